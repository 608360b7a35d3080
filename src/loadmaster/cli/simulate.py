"""``loadmaster simulate`` and ``loadmaster profiles``: compare scheduling profiles on the same jobs."""

from __future__ import annotations

import math
import os
import re
from dataclasses import replace
from pathlib import Path
from typing import Annotated

import typer
from rich.markup import escape
from rich.table import Table

from loadmaster.cli.output import console, count_progress, working
from loadmaster.config import (
    BUILTIN_CLUSTERS,
    BUILTIN_PROFILES,
    BUILTIN_WORKLOADS,
    Cluster,
    Workload,
    load_cluster,
    load_profiles,
    load_selected,
    load_trace_workload,
    load_workload,
)
from loadmaster.config.usage import load_past_usage
from loadmaster.errors import ConfigError
from loadmaster.experiment import ProfileRun, compare, context, output_helpers, write_outputs
from loadmaster.model.usage import PastUsage
from loadmaster.scheduling import PLUGINS, Profile
from loadmaster.traces.replay import replay_time

DEFAULT_PROFILES = "kube-default,fifo,sds,nsml,slurm,fair"


def simulate(  # noqa: PLR0917 - typer maps each option to a parameter
    cluster: Annotated[
        str, typer.Option(help=f"Cluster spec file, or built-in: {', '.join(BUILTIN_CLUSTERS)}")
    ] = "lab",
    workload: Annotated[
        str, typer.Option(help=f"Workload spec file, or built-in: {', '.join(BUILTIN_WORKLOADS)}")
    ] = "lab",
    trace: Annotated[
        Path | None,
        typer.Option(help="Replay this trace file instead of --workload (defaults of a kind: trace spec)"),
    ] = None,
    on_error: Annotated[
        str, typer.Option(help="A bad row of --trace: 'stop' with an error naming it, or 'skip' and count it")
    ] = "stop",
    profiles: Annotated[
        str, typer.Option(help="Comma-separated profile names to compare")
    ] = DEFAULT_PROFILES,
    profiles_file: Annotated[
        str, typer.Option(help="Profiles file (default: the built-in profiles)")
    ] = BUILTIN_PROFILES,
    out: Annotated[Path, typer.Option(help="Folder for the report, metrics and job tables")] = Path("out"),
    jobs: Annotated[int | None, typer.Option(min=1, help="Override the workload's number of jobs")] = None,
    load: Annotated[float | None, typer.Option(help="Override the workload's load ratio (> 0)")] = None,
    seed: Annotated[int, typer.Option(min=0, help="Seed of the scheduler's random choices")] = 0,
    workload_seed: Annotated[int | None, typer.Option(min=0, help="Override the workload's seed")] = None,
    period: Annotated[float | None, typer.Option(help="Also run a cycle every PERIOD seconds (> 0)")] = None,
    workers: Annotated[
        int | None,
        typer.Option(
            min=1,
            help="Profiles simulated at once, each in its own process (default: one per CPU core); "
            "the results do not depend on it",
        ),
    ] = None,
    explain: Annotated[
        list[str] | None,
        typer.Option(help="Print the story of JOB_ID under each profile: why it waited, when"),
    ] = None,
    past_usage: Annotated[
        Path | None,
        typer.Option(
            help="Start from this fair-share usage and run-time history (the usage.json that "
            "`kube snapshot` writes beside the trace); default: nobody has used anything"
        ),
    ] = None,
) -> None:
    """Run every profile on the same cluster and jobs; print a comparison and write a report."""
    _check_options(load=load, period=period, on_error=on_error, trace=trace)
    # Forked first: they import the plotting and Parquet libraries while this process simulates.
    with output_helpers() as helpers:
        spec_cluster = load_cluster(cluster)
        chosen = load_selected(
            [p.strip() for p in profiles.split(",") if p.strip()], "--profiles", profiles_file
        )
        if trace is not None:
            spec_workload = load_trace_workload(
                trace,
                spec_cluster,
                jobs=jobs,
                load=load,
                seed=workload_seed,
                on_error="skip" if on_error == "skip" else "stop",
            )
        else:
            spec_workload = load_workload(workload, spec_cluster, jobs=jobs, load=load, seed=workload_seed)
        nodes = spec_cluster.nodes
        console.print(
            f"[bold]{spec_cluster.name}[/]: {len(nodes)} nodes, {nodes.total_gpus} GPUs; "
            f"[bold]{spec_workload.name}[/]: {len(spec_workload.jobs)} jobs at load {spec_workload.load_text}"
        )
        for line in spec_workload.replay.lines() if spec_workload.replay else ():
            console.print(line, markup=False, highlight=False)
        past = load_past_usage(past_usage) if past_usage is not None else None
        if past is not None and spec_workload.replay is not None:  # trace time -> the replay's
            past = replace(past, as_of_s=replay_time(spec_workload.replay, past.as_of_s))
        wanted = frozenset(explain or ())
        unknown = sorted(wanted - {t.job.id for t in spec_workload.jobs})
        if unknown:
            raise ConfigError(
                "--explain", "", f"no job {unknown[0]!r} in the workload (ids look like j000001)"
            )
        parallel = workers if workers is not None else os.cpu_count() or 1
        runs = _run_with_progress(spec_cluster, spec_workload, chosen, seed, period, wanted, parallel, past)
        console.print(_comparison(runs))
        for run in runs:
            if run.summary.jobs_rejected:
                console.print(_rejections(run), markup=False, highlight=False)
        if any(math.isnan(run.summary.jain_fairness) for run in runs):
            console.print("jain -: the jobs have fewer than two users, so there is no fairness to compare.")
        for job_id in sorted(wanted):
            console.print(_story(job_id, runs))
        with working(f"Writing the report, plots and job tables to {out}"):
            paths = write_outputs(out, runs, context(spec_cluster, spec_workload, seed), helpers)
        console.print(f"Report: [bold]{paths['report']}[/]  metrics: {paths['metrics']}")


def _rejections(run: ProfileRun) -> str:
    """A profile's jobs refused at arrival, with the first reason: they are in no column's mean."""
    reasons = [str(r) for r in run.result.jobs.reason if str(r).startswith("rejected")]
    first = reasons[0].removeprefix("rejected: ") if reasons else "no reason recorded"
    return (
        f"{run.profile.name}: {run.summary.jobs_rejected:,} of {run.summary.jobs:,} jobs rejected "
        f"at arrival, so its waits leave them out; first: {first}"
    )


def _check_options(*, load: float | None, period: float | None, on_error: str, trace: Path | None) -> None:
    """Usage errors that name the option: what typer's ranges cannot say (open bounds, choices)."""
    if load is not None and not load > 0:
        raise ConfigError(
            "simulate", "--load", f"must be a number > 0 (1.0 offers each pool its capacity), got {load}"
        )
    if period is not None and not period > 0:
        raise ConfigError("simulate", "--period", f"must be a number of seconds > 0, got {period}")
    if on_error not in ("stop", "skip"):
        raise ConfigError("simulate", "--on-error", f"must be 'stop' or 'skip', got {on_error!r}")
    if on_error == "skip" and trace is None:
        raise ConfigError(
            "simulate", "--on-error", "applies to --trace only (a workload file sets on_error: skip)"
        )


def _run_with_progress(  # noqa: PLR0917 - a private helper of simulate, called once
    cluster: Cluster,
    workload: Workload,
    profiles: list[Profile],
    seed: int,
    period: float | None,
    explain: frozenset[str],
    workers: int,
    past_usage: PastUsage | None,
) -> list[ProfileRun]:
    with count_progress() as progress:
        tasks = {p.name: progress.add_task(p.name, total=len(workload.jobs)) for p in profiles}
        return compare(
            cluster,
            workload,
            profiles,
            seed=seed,
            period_s=period,
            progress=lambda name, n: progress.advance(tasks[name], n),
            explain=explain,
            workers=workers,
            past_usage=past_usage,
        )


_STATUS = re.compile(r"^waiting: \[(?P<plugin>[^\]]+)\] (?P<code>\w+): (?P<reason>.*)$")
_SECONDS = re.compile(r"\bt=(?P<s>\d+(?:\.\d+)?)s\b")
_VERDICT = {"wait": "waits", "unschedulable": "cannot start now"}


def readable_step(text: str) -> str:
    """One step of a job's story in the table's terms: times in hours, the plugin named once.

    The simulator records a status as ``waiting: [plugin] code: reason`` with times in seconds
    (the form kubectl describe and metrics.json carry); the table speaks hours only.
    """
    text = _SECONDS.sub(lambda m: f"{float(m['s']) / 3600:.2f} h", text)
    found = _STATUS.match(text)
    if found is None:
        return text
    verdict = _VERDICT.get(found["code"], found["code"])
    return f"{verdict} ({found['plugin']}): {found['reason']}"


def _story(job_id: str, runs: list[ProfileRun]) -> Table:
    """One job's story under each profile: what happened when, and why it waited."""
    table = Table(title=f"Why {job_id} waited, profile by profile (times in hours from the first submission)")
    table.add_column("profile", style="bold", no_wrap=True)
    table.add_column("t (h)", justify="right")
    table.add_column("what happened")
    for run in runs:
        for i, (time_s, text) in enumerate(run.result.explanations.get(job_id, [])):
            table.add_row(
                run.profile.name if i == 0 else "", f"{time_s / 3600:.2f}", escape(readable_step(text))
            )
        table.add_section()
    return table


_COLUMNS: tuple[tuple[str, str, float], ...] = (
    ("wait h", "mean_wait_s", 3600.0),
    ("p99 h", "p99_wait_s", 3600.0),
    ("bsld", "mean_bounded_slowdown", 1.0),
    ("span d", "makespan_s", 86400.0),
    ("alloc% arr", "allocation_arrivals", 0.01),
    ("alloc% all", "allocation_mean", 0.01),
    ("frag%", "fragmentation_mean", 0.01),
    ("jain", "jain_fairness", 1.0),
    ("waste GPUh", "wasted_gpu_hours", 1.0),
    ("left", "jobs_unfinished", 1.0),
)


_CAPTION = (
    "wait: mean queue wait; p99: 99th percentile wait; bsld: mean bounded slowdown; span: makespan; "
    "alloc arr / all: GPUs allocated over the arrival window (first to last submission) / over the "
    "whole run, until the last job ends; frag: free GPUs no waiting job can use; "
    "jain: fairness over users (1 = equal); "
    "waste GPUh: GPU-hours held idle by partly started gangs or lost to preemption; "
    "left: jobs that never ran. "
    "Lower is better except alloc and jain (- where fewer than two users)."
)


def _comparison(runs: list[ProfileRun]) -> Table:
    table = Table(title="Policies compared on the same jobs", caption=_CAPTION)
    table.add_column("profile", style="bold", no_wrap=True)
    for header, _, _ in _COLUMNS:
        table.add_column(header, justify="right")
    table.add_column("sim s", justify="right", style="dim")
    for run in runs:
        values = [getattr(run.summary, field) / scale for _, field, scale in _COLUMNS]
        table.add_row(run.profile.name, *(_fmt(v) for v in values), f"{run.wall_s:.1f}")
    return table


def _fmt(value: float) -> str:
    if isinstance(value, float) and math.isnan(value):
        return "-"
    return f"{value:,.0f}" if abs(value) >= 100 else f"{value:.2f}"


def list_profiles(
    profiles_file: Annotated[
        str, typer.Argument(help="Profiles file (default: the built-in profiles)")
    ] = BUILTIN_PROFILES,
) -> None:
    """List the profiles of a file (validating it) and the plugins they may use."""
    table = Table(title=f"Profiles in {profiles_file}")
    for column in ("profile", "actions", "plugins"):
        table.add_column(column)
    for name, profile in load_profiles(profiles_file).items():
        table.add_row(name, ", ".join(profile.actions), ", ".join(p.name for p in profile.plugins))
    console.print(table)
    console.print(f"Plugins: {', '.join(PLUGINS)}")
