"""``loadmaster trace``: read, convert and look at job traces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer
from rich.table import Table

from loadmaster.cli.output import byte_progress, console
from loadmaster.errors import ConfigError
from loadmaster.report.trace_plots import write_trace_plots
from loadmaster.traces import OnError, Trace, format_names, read_trace, schema_markdown, write_parquet
from loadmaster.traces.inspect import HEAVY_USER_FRACTION, TraceSummary, summarize_trace, trace_name
from loadmaster.traces.source import size_of

app = typer.Typer(no_args_is_help=True, help="Read, convert and inspect job traces.")

FormatOption = Annotated[
    str | None,
    typer.Option("--format", help=f"Trace format (default: from the name): {', '.join(format_names())}"),
]
OnErrorOption = Annotated[
    str, typer.Option("--on-error", help="A bad row: 'stop' with an error naming it, or 'skip' and count it")
]


def load(path: Path, fmt: str | None, on_error: str) -> Trace:
    """Read a trace with a progress bar, then print what was read and skipped."""
    if on_error not in ("stop", "skip"):
        raise typer.BadParameter(f"--on-error must be 'stop' or 'skip', got {on_error!r}")
    policy: OnError = "skip" if on_error == "skip" else "stop"
    with byte_progress() as progress:
        task = progress.add_task(path.name[:14], total=size_of(path) if path.is_file() else None)
        trace = read_trace(path, fmt, policy, lambda done: progress.update(task, completed=done))
    console.print(trace.report.summary())
    for example in trace.report.examples[1:5]:
        console.print(f"  also skipped {example}")
    if len(trace) == 0:
        skipped = trace.report.skipped
        why = f"all {skipped:,} rows were skipped" if skipped else "the file has no job rows"
        raise ConfigError(str(path), "", f"no jobs to read: {why}")
    return trace


@app.command()
def convert(
    path: Annotated[Path, typer.Argument(help="Trace file to read")],
    out: Annotated[Path, typer.Option("-o", "--out", help="Parquet file to write in the canonical schema")],
    fmt: FormatOption = None,
    on_error: OnErrorOption = "stop",
) -> None:
    """Convert a trace of any supported format to the canonical Parquet job table."""
    trace = load(path, fmt, on_error)
    write_parquet(trace, out)
    console.print(f"Wrote {len(trace):,} jobs to [bold]{out}[/]")


@app.command()
def schema() -> None:
    """Print the canonical job table's columns (Markdown)."""
    console.print(schema_markdown(), markup=False, highlight=False)


@app.command()
def inspect(
    path: Annotated[Path, typer.Argument(help="Trace file to read")],
    fmt: FormatOption = None,
    on_error: OnErrorOption = "stop",
    out: Annotated[
        Path | None, typer.Option("--out", help="Folder for the plots (default: out/inspect-<name>)")
    ] = None,
) -> None:
    """Summarise a trace (jobs, users, GPU demand, run times, estimates) and plot it."""
    trace = load(path, fmt, on_error)
    summary = summarize_trace(trace)
    console.print(summary_table(summary))
    console.print(demand_table(summary))
    folder = out or Path("out") / f"inspect-{trace_name(trace)}"
    paths = write_trace_plots(trace, folder, summary)
    console.print(f"Plots: [bold]{folder}[/] ({', '.join(p.name for p in paths)})")


def summary_table(summary: TraceSummary) -> Table:
    """The summary as a two-column table; a statistic the trace cannot give says so."""
    table = Table(title=f"Trace {summary.name}", show_header=False)
    table.add_column("what", style="bold", no_wrap=True)
    table.add_column("value")
    absent = "not in this trace"
    span_d = summary.span_s / 86_400.0
    table.add_row("jobs", f"{summary.jobs:,} ({summary.jobs_with_duration:,} with a run time)")
    table.add_row("users, groups", f"{summary.users:,}, {summary.groups:,}" if summary.users else absent)
    table.add_row("span", f"{span_d:,.1f} days of submissions ({summary.clock})")
    table.add_row("GPU-hours", f"{summary.gpu_hours:,.0f}")
    table.add_row("run time percentiles", _percentiles(summary) or absent)
    share = summary.top_user_share
    table.add_row(
        f"top {HEAVY_USER_FRACTION:.0%} users",
        f"{share:.1%} of GPU-hours" if share is not None else absent,
    )
    table.add_row("statuses", ", ".join(f"{name} {n:,}" for name, n in summary.statuses) or "no jobs")
    over = summary.median_overestimate
    table.add_row(
        "time limits",
        f"{summary.time_limit_fraction:.1%} of jobs; median limit / run time "
        + (f"{over:.2f}" if over is not None else absent),
    )
    return table


def demand_table(summary: TraceSummary) -> Table:
    """GPU demand by size class: jobs and GPU-hours, each also as a share of the whole trace."""
    table = Table(title="GPU demand by job size")
    for header in ("GPUs", "jobs", "% jobs", "GPU-hours", "% GPU-hours"):
        table.add_column(header, justify="right")
    for c in summary.size_classes:
        table.add_row(
            c.label,
            f"{c.jobs:,}",
            f"{100.0 * c.jobs / max(summary.jobs, 1):.1f}",
            f"{c.gpu_hours:,.0f}",
            f"{100.0 * c.gpu_hours / summary.gpu_hours:.1f}" if summary.gpu_hours > 0 else "-",
        )
    return table


def _percentiles(summary: TraceSummary) -> str:
    if summary.duration_percentiles_s is None:
        return ""
    parts = [f"p{p} {_duration(v)}" for p, v in summary.duration_percentiles_s]
    if summary.mean_duration_s is not None:
        parts.append(f"mean {_duration(summary.mean_duration_s)}")
    return ", ".join(parts)


def _duration(seconds: float) -> str:
    if seconds < 120:
        return f"{seconds:.0f} s"
    if seconds < 7200:
        return f"{seconds / 60:.0f} min"
    return f"{seconds / 3600:.1f} h"
