"""``loadmaster trace``: read, convert and look at job traces."""

from __future__ import annotations

from pathlib import Path
from typing import Annotated

import typer

from loadmaster.cli.output import byte_progress, console
from loadmaster.traces import OnError, Trace, format_names, read_trace, schema_markdown, write_parquet
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
