"""``loadmaster diagnose``: find what is wrong with a training job, and which GPUs to reclaim."""

from __future__ import annotations

import json
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from loadmaster.cli.output import console
from loadmaster.diagnostics import (
    IterationTimes,
    ReclaimRule,
    diagnose,
    frame_from_files,
    frame_from_store,
    frame_from_tables,
    read_pai_minibatch,
    reclaim_report,
    slow_group,
    stragglers,
    write_report,
)
from loadmaster.diagnostics.frame import JobFrame, read_table
from loadmaster.diagnostics.iterations import read_iteration_csv
from loadmaster.errors import TelemetryError
from loadmaster.telemetry.prometheus import PrometheusStore
from loadmaster.telemetry.store import Series
from loadmaster.telemetry.synthetic import (
    Fault,
    FaultKind,
    GpuRef,
    NodeSpec,
    PlannedJob,
    SyntheticTelemetry,
    TelemetryPlan,
)

if TYPE_CHECKING:
    from loadmaster.telemetry.duck import DuckDBStore

app = typer.Typer(
    no_args_is_help=False, invoke_without_command=True, help="Diagnose a training job from GPU telemetry."
)


def synthetic_frame(nodes: int = 4, duration_s: float = 3600.0, seed: int = 0) -> JobFrame:
    """A demo job with one fault of each kind on ``nodes`` x 8 GPUs."""
    if nodes < 3:
        raise TelemetryError(f"--nodes must be at least 3 for the demo job, got {nodes}")
    specs = tuple(NodeSpec(f"node{i}", 8) for i in range(nodes))
    gpus = tuple(GpuRef(n.hostname, g) for n in specs for g in range(8))
    d = duration_s
    faults = (
        Fault(FaultKind.STRAGGLER, 0.10 * d, 0.25 * d, gpus=(GpuRef("node1", 3),)),
        Fault(FaultKind.COMM, 0.45 * d, 0.60 * d, nodes=("node2",)),
        Fault(FaultKind.THERMAL, 0.70 * d, 0.80 * d, gpus=(GpuRef("node0", 5),)),
        Fault(FaultKind.MEMORY_LEAK, 0.30 * d, 0.65 * d, gpus=(GpuRef("node0", 1),)),
        Fault(FaultKind.XID, 0.50 * d, 0.52 * d, gpus=(GpuRef("node1", 6),)),
        Fault(FaultKind.ECC, 0.20 * d, 0.40 * d, gpus=(GpuRef("node0", 0),)),
        Fault(FaultKind.MISSING, 0.85 * d, 0.90 * d, gpus=(GpuRef("node2", 7),)),
        Fault(FaultKind.IDLE, 0.85 * d, 0.95 * d, nodes=("node1",)),
    )
    plan = TelemetryPlan(specs, (PlannedJob("demo", "ann", gpus, 0.0, d + 1.0),), faults, seed=seed)
    gen = SyntheticTelemetry(plan)
    return frame_from_tables(
        gen.series(d / 2), [gen.samples(0.0, d)], job="demo", step_s=1.0, start_s=0.0, end_s=d
    )


@app.callback()
def diagnose_command(  # noqa: PLR0917 - typer maps each option to a parameter
    ctx: typer.Context,
    store: Annotated[Path | None, typer.Option(help="DuckDB telemetry store file")] = None,
    prometheus: Annotated[
        str | None, typer.Option(help="Prometheus base URL (http://prometheus:9090): read the job's series")
    ] = None,
    window: Annotated[
        float, typer.Option(help="With --prometheus and no --start: seconds back from --end (default now)")
    ] = 3600.0,
    samples: Annotated[Path | None, typer.Option(help="Samples file (Parquet or CSV, SAMPLE_SCHEMA)")] = None,
    series: Annotated[Path | None, typer.Option(help="Series file (Parquet or CSV, SERIES_SCHEMA)")] = None,
    job: Annotated[str | None, typer.Option(help="Job id (the series' job label)")] = None,
    start: Annotated[
        float | None, typer.Option(help="Start, seconds (store: its clock; Prometheus: Unix time)")
    ] = None,
    end: Annotated[
        float | None, typer.Option(help="End, seconds (store: its clock; Prometheus: Unix time)")
    ] = None,
    step: Annotated[float, typer.Option(help="Grid step in seconds")] = 1.0,
    synthetic: Annotated[
        bool, typer.Option(help="Diagnose a generated demo job with injected faults")
    ] = False,
    nodes: Annotated[int, typer.Option(help="Nodes of the --synthetic job")] = 4,
    duration: Annotated[float, typer.Option(help="Seconds of the --synthetic job")] = 3600.0,
    seed: Annotated[int, typer.Option(help="Seed of the --synthetic job")] = 0,
    out: Annotated[Path, typer.Option(help="Folder for diagnosis.json and diagnosis.html")] = Path(
        "out/diagnosis"
    ),
) -> None:
    """Diagnose one job: write findings (JSON) and a report with plots (HTML)."""
    if ctx.invoked_subcommand is not None:
        return
    if prometheus is not None:
        frame = _from_prometheus(prometheus, job, start=start, end=end, window=window, step=step)
    else:
        frame = _load(store, samples, series, job, start, end, step, synthetic, nodes, duration, seed)
    diagnosis = diagnose(frame)
    paths = write_report(diagnosis, frame, out)
    if diagnosis.note:
        console.print(diagnosis.note, markup=False, highlight=False)
    for finding in diagnosis.findings:
        console.print(finding.summary, markup=False, highlight=False)
    if not diagnosis.findings and diagnosis.telemetry_s >= 1:
        console.print("No findings: every GPU behaves like its peers.")
    console.print(f"Report: {paths['html']}  findings: {paths['json']}", markup=False, highlight=False)


def _load(  # noqa: PLR0917 - the options of diagnose_command, passed on
    store: Path | None,
    samples: Path | None,
    series: Path | None,
    job: str | None,
    start: float | None,
    end: float | None,
    step: float,
    synthetic: bool,
    nodes: int,
    duration: float,
    seed: int,
) -> JobFrame:
    if synthetic:
        return synthetic_frame(nodes, duration, seed)
    if samples is not None:
        if series is None:
            raise TelemetryError("--samples needs --series (the labels of each series)")
        return frame_from_files(samples, series, job=job, step_s=step)
    if store is not None:
        if job is None or start is None or end is None:
            raise TelemetryError("--store needs --job, --start and --end")
        return frame_from_store(_open_store(store), job, start, end, step)
    raise TelemetryError("give --store, --samples/--series or --synthetic")


def _from_prometheus(
    url: str, job: str | None, *, start: float | None, end: float | None, window: float, step: float
) -> JobFrame:
    """The job's series read from Prometheus with range queries, on a ``step`` grid ending at ``end``."""
    if job is None:
        raise TelemetryError("--prometheus needs --job (the job label of the GPUs' series)")
    if window <= 0 or step <= 0:
        raise TelemetryError(f"--window and --step must be > 0 seconds, got {window} and {step}")
    until = end if end is not None else time.time()
    since = start if start is not None else until - window
    if since >= until:
        raise TelemetryError(f"--start ({since}) must be before --end ({until})")
    with PrometheusStore(url, lookback_s=max(until - since, window) + 3600.0) as store:
        everything = store.series()
        if any(s.labels.get("job") == job for s in everything):
            return frame_from_store(store, job, since, until, step)
        pods = _pod_series(everything, job)
        if not pods:
            raise TelemetryError(
                f"no GPU series of job {job!r} in Prometheus: none labelled job={job!r} (exported_job), "
                "and for a namespace/name id none whose namespace matches and pod is the name or starts "
                "with it and a dash"
            )
        return frame_from_store(store, job, since, until, step, series=pods)


def _pod_series(series: list[Series], job: str) -> list[Series]:
    """A Kubernetes job's GPU series by pod labels (dcgm-exporter sets no job label): namespace/name
    matches pods named ``name`` or ``name-...`` (a PodGroup's members) in that namespace."""
    if "/" not in job:
        return []
    namespace, name = job.split("/", 1)
    return [
        s
        for s in series
        if s.scope == "gpu"
        and s.labels.get("namespace") == namespace
        and (s.labels.get("pod") == name or s.labels.get("pod", "").startswith(f"{name}-"))
        and "GPU_I_ID" not in s.labels
    ]


def _open_store(path: Path) -> DuckDBStore:
    from loadmaster.telemetry.duck import DuckDBStore  # noqa: PLC0415 - duckdb only when asked for

    if not path.exists():
        raise TelemetryError(f"{path}: no such store file")
    return DuckDBStore(str(path))


@app.command("reclaim")
def reclaim_command(  # noqa: PLR0917 - typer maps each option to a parameter
    store: Annotated[Path, typer.Option(help="DuckDB telemetry store file")],
    at: Annotated[
        float | None, typer.Option(help="Time to judge at, seconds (default: newest sample)")
    ] = None,
    idle_minutes: Annotated[float, typer.Option(help="Idle: zero utilisation for this long")] = 30.0,
    underused_hours: Annotated[float, typer.Option(help="Under-used window")] = 2.0,
    underused_p95: Annotated[float, typer.Option(help="Under-used: p95 SM activity below this")] = 0.2,
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the report here")] = None,
) -> None:
    """Allocated GPUs that are idle or under-used, per user and job, with the action to take."""
    opened = _open_store(store)
    when = at if at is not None else opened.newest_s()
    if when is None:
        raise TelemetryError(f"{store}: the store holds no samples")
    rule = ReclaimRule(
        idle_window_s=60 * idle_minutes,
        underused_window_s=3600 * underused_hours,
        underused_p95_sm=underused_p95,
    )
    report = reclaim_report(opened, float(when), rule)
    for row in report.jobs:
        console.print(f"{row.user} {row.job}: {row.action}", markup=False, highlight=False)
    if not report.jobs:
        console.print("Every allocated GPU is in use.")
    if json_out is not None:
        json_out.write_text(json.dumps(report.to_dict(), indent=2))


@app.command("iterations")
def iterations_command(
    path: Annotated[Path, typer.Argument(help="Per-rank iteration times: CSV or Parquet")],
    json_out: Annotated[Path | None, typer.Option("--json", help="Also write the findings here")] = None,
) -> None:
    """Stragglers and slow groups from per-rank iteration times.

    The file holds columns rank, iteration, time_s (one row per rank and iteration), or is an
    Alibaba PAI v2020 mini-batch file (worker, time, batch_time_norm: times normalised to 0-1000).
    """
    it = _read_iterations(path)
    found = stragglers(it)
    group = slow_group(it)
    console.print(
        f"{it.job}: {len(it.ranks)} ranks, {it.iterations.size} iterations "
        f"({it.iterations[0]:.0f}-{it.iterations[-1]:.0f}), times in {it.unit}",
        markup=False,
        highlight=False,
    )
    for finding in [*found, *([group] if group is not None else [])]:
        console.print(finding.summary, markup=False, highlight=False)
    if not found and group is None:
        console.print("No stragglers: every rank keeps pace with its peers.")
    if json_out is not None:
        rows = [f.to_dict() for f in found]
        body = {"job": it.job, "unit": it.unit, "stragglers": rows,
                "slow_group": group.to_dict() if group is not None else None}  # fmt: skip
        json_out.write_text(json.dumps(body, indent=2))


def _read_iterations(path: Path) -> IterationTimes:
    columns = read_table(path).column_names
    if "batch_time_norm" in columns:
        return read_pai_minibatch(path)
    return read_iteration_csv(path)
