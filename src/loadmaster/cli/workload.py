"""``loadmaster workload``: fit a workload model to a trace, and sample jobs from it."""

from __future__ import annotations

import hashlib
from pathlib import Path
from typing import Annotated

import numpy as np
import typer
from rich.table import Table

from loadmaster.cli.output import console
from loadmaster.cli.trace import FormatOption, OnErrorOption, load
from loadmaster.config.workload_model import load_workload_model, write_workload_model
from loadmaster.errors import ConfigError, ModelError
from loadmaster.report.fit_plots import LABELS, write_fit_report
from loadmaster.traces import write_parquet
from loadmaster.traces.fitting import job_columns, sample_trace
from loadmaster.workload.fit import FitOptions, fit_workload
from loadmaster.workload.fitted import WorkloadModel, sample_workload
from loadmaster.workload.goodness import KS_TARGET, Marginal, goodness_of_fit
from loadmaster.workload.habits import (
    CALIBRATION_JOBS,
    MIN_JOBS,
    MIN_RUN_S,
    UserHabitsFit,
    calibrate,
    fit_user_habits,
    habits_yaml,
)

app = typer.Typer(no_args_is_help=True, help="Fit workload models to traces and sample jobs from them.")

GpusOption = Annotated[
    int | None,
    typer.Option(
        "--gpus", min=1, help="GPUs of the cluster the load refers to (default: the trace's, if known)"
    ),
]


@app.command()
def fit(  # noqa: PLR0917 - typer maps each option to a parameter
    path: Annotated[Path, typer.Argument(help="Trace file to fit")],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Model file (YAML); default out/<trace>.yaml")
    ] = None,
    fmt: FormatOption = None,
    on_error: OnErrorOption = "stop",
    report: Annotated[
        Path | None,
        typer.Option("--report", help="Folder for the goodness-of-fit report (default: <model>-report)"),
    ] = None,
    heavy_share: Annotated[
        float, typer.Option(min=0.01, max=1.0, help="Heavy users hold at least this share of GPU-hours")
    ] = 0.8,
    gpus: GpusOption = None,
    seed: Annotated[int, typer.Option(help="Seed of the sample the report compares with the trace")] = 0,
) -> None:
    """Fit the workload model to a trace; write the model, a goodness-of-fit report, print the KS table."""
    out = out or Path("out") / f"{path.stem}.yaml"
    trace = load(path, fmt, on_error)
    columns = job_columns(trace, gpus)
    try:
        model = fit_workload(columns, FitOptions(heavy_gpu_hour_share=heavy_share))
        marginals = goodness_of_fit(columns, model, np.random.default_rng(seed))
    except ModelError as exc:
        raise ConfigError(str(path), "", f"cannot fit a workload model: {exc}") from None
    write_workload_model(model, out)
    folder = report or out.with_name(f"{out.stem}-report")
    paths = write_fit_report(
        folder, marginals, title=f"Goodness of fit: {path.name}", details=_details(model, seed)
    )
    console.print(_model_table(model))
    console.print(_ks_table(marginals))
    console.print(f"Model: [bold]{out}[/]  report: {paths['report']}")


@app.command()
def sample(  # noqa: PLR0917 - typer maps each option to a parameter
    model_path: Annotated[Path, typer.Argument(help="Model file written by 'workload fit'")],
    jobs: Annotated[int, typer.Option("--jobs", min=1, help="Number of jobs to draw")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Parquet file to write (canonical schema)")],
    load_ratio: Annotated[
        float | None,
        typer.Option("--load", min=0.0, help="Target offered load on --gpus GPUs (default: the fitted rate)"),
    ] = None,
    gpus: GpusOption = None,
    seed: Annotated[int, typer.Option(help="Seed: the same seed draws the same jobs")] = 0,
) -> None:
    """Draw jobs from a fitted workload model into a canonical Parquet trace."""
    model = load_workload_model(model_path)
    try:
        drawn = sample_workload(model, jobs, np.random.default_rng(seed), load=load_ratio, capacity_gpus=gpus)
    except ModelError as exc:
        raise ConfigError(str(model_path), "", str(exc)) from None
    meta = {"source": model_path.name, "seed": str(seed), "jobs": str(jobs)}
    if load_ratio is not None:
        meta["load"] = f"{load_ratio:g}"
    capacity = gpus or model.fitted_on.capacity_gpus
    if capacity is not None:
        meta["capacity_gpus"] = str(capacity)
    write_parquet(sample_trace(drawn, meta), out)
    span_h = float(drawn.submit_s[-1] - drawn.submit_s[0]) / 3600.0
    console.print(f"Wrote {len(drawn):,} jobs over {span_h:,.1f} h to [bold]{out}[/]")


@app.command()
def habits(  # noqa: PLR0917 - typer maps each option to a parameter
    path: Annotated[Path, typer.Argument(help="Trace file that records who submitted each job")],
    out: Annotated[
        Path | None, typer.Option("-o", "--out", help="Write the params block here (YAML); default: print it")
    ] = None,
    fmt: FormatOption = None,
    on_error: OnErrorOption = "stop",
    min_jobs: Annotated[int, typer.Option(min=2, help="Fewest jobs a user needs to be counted")] = MIN_JOBS,
    min_run_s: Annotated[
        float, typer.Option(min=0.001, help="Shortest run time counted, s (the lab's shortest run)")
    ] = MIN_RUN_S,
    calibration_jobs: Annotated[
        int, typer.Option(min=1000, help="Jobs of each lab sample the generator's shares are calibrated on")
    ] = CALIBRATION_JOBS,
) -> None:
    """Measure users' habits on a trace; write them as the lab generator's user-habit parameters.

    Between- and within-user spread and persistence of run time and over-asking, calibrated to
    the lab generator (docs/workload-fitting.md, "User habits"), with their provenance.
    """
    trace = load(path, fmt, on_error)
    try:
        fit = fit_user_habits(job_columns(trace), min_jobs=min_jobs, min_run_s=min_run_s)
        calibrated = calibrate(fit, jobs=calibration_jobs)
    except ModelError as exc:
        raise ConfigError(str(path), "", f"cannot fit user habits: {exc}") from None
    command = f"loadmaster workload habits {path.name}" + (f" --format {fmt}" if fmt else "")
    if (min_jobs, min_run_s) != (MIN_JOBS, MIN_RUN_S):
        command += f" --min-jobs {min_jobs} --min-run-s {min_run_s:g}"
    if calibration_jobs != CALIBRATION_JOBS:
        command += f" --calibration-jobs {calibration_jobs}"
    digest = hashlib.sha256(path.read_bytes()).hexdigest()
    text = habits_yaml(fit, calibrated, sha256=digest, command=command)
    console.print(_habits_table(fit))
    if out is None:
        console.print(text, markup=False, highlight=False, soft_wrap=True)
        return
    out.parent.mkdir(parents=True, exist_ok=True)
    out.write_text(text, encoding="utf-8")
    console.print(f"Params: [bold]{out}[/]")


def _habits_table(fit: UserHabitsFit) -> Table:
    table = Table(
        title=f"User habits in {fit.source}: {fit.run_time.users} users, {fit.run_time.jobs:,} jobs"
    )
    for column in ("quantity", "within-user sigma", "between-user sigma", "between share"):
        table.add_column(column, justify="left" if column == "quantity" else "right")
    for name, split in (("log run time", fit.run_time), ("log(limit / run time)", fit.limit_factor)):
        table.add_row(name, f"{split.within_sigma:.3f}", f"{split.between_sigma:.3f}", f"{split.share:.3f}")
    signal = fit.signal
    table.caption = (
        f"Rank correlation with run time over {signal.jobs:,} jobs: requested limit"
        f" {signal.limit_spearman:.3f}, user history (mean of the last two run times, capped by the limit)"
        f" {signal.history_spearman:.3f}, limit x the user's recent run/limit {signal.corrected_spearman:.3f}"
    )
    return table


def _details(model: WorkloadModel, seed: int) -> list[str]:
    lines = [
        f"Sample seed {seed}. Arrival clock: {model.arrivals.clock}. "
        f"Fitted on {model.fitted_on.jobs:,} jobs over {model.fitted_on.span_s / 86400:,.1f} days.",
        "",
    ]
    for c in model.classes:
        lines.append(
            f"- **{c.name}** users: {c.users}, {c.job_share:.1%} of jobs, "
            f"{c.gpu_hour_share:.1%} of GPU-hours, {len(c.shapes)} job shapes, "
            f"{len(c.duration_s.mixture.components)} run-time component(s)"
        )
    return lines


def _model_table(model: WorkloadModel) -> Table:
    table = Table(title="Fitted user classes")
    for column in ("class", "users", "jobs", "GPU-hours", "shapes", "run-time medians (weight)"):
        table.add_column(
            column, justify="left" if column in ("class", "run-time medians (weight)") else "right"
        )
    for c in model.classes:
        medians = ", ".join(f"{m.median:,.0f} s ({m.weight:.0%})" for m in c.duration_s.mixture.components)
        table.add_row(
            c.name, str(c.users), f"{c.job_share:.1%}", f"{c.gpu_hour_share:.1%}", str(len(c.shapes)), medians
        )
    return table


def _ks_table(marginals: tuple[Marginal, ...]) -> Table:
    table = Table(
        title=f"Goodness of fit: KS distance, trace vs a sample of the model (target <= {KS_TARGET})"
    )
    table.add_column("marginal")
    table.add_column("KS", justify="right")
    table.add_column("ok", justify="center")
    for m in marginals:
        table.add_row(LABELS.get(m.name, m.name), f"{m.ks:.4f}", "yes" if m.passes else "[red]no[/]")
    return table
