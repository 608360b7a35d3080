"""The terminal the command line writes to, shared by every command group."""

from __future__ import annotations

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    TextColumn,
    TimeElapsedColumn,
)

console = Console(width=None if Console().is_terminal else 120)
"""Rich console; 120 columns when not a terminal, so logs and tests see whole lines."""


def byte_progress() -> Progress:
    """A progress bar over the bytes of a file being read."""
    columns = (TextColumn("{task.description:<14}"), BarColumn(), DownloadColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=False)


def count_progress(label_width: int = 14) -> Progress:
    """A progress bar over a count of items (jobs simulated, updates trained), labelled per task."""
    columns = (
        TextColumn(f"{{task.description:<{label_width}}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    return Progress(*columns, console=console, transient=False)
