"""The terminal the command line writes to, shared by every command group."""

from __future__ import annotations

from rich.console import Console
from rich.progress import BarColumn, DownloadColumn, Progress, TextColumn, TimeElapsedColumn

console = Console(width=None if Console().is_terminal else 120)
"""Rich console; 120 columns when not a terminal, so logs and tests see whole lines."""


def byte_progress() -> Progress:
    """A progress bar over the bytes of a file being read."""
    columns = (TextColumn("{task.description:<14}"), BarColumn(), DownloadColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=False)
