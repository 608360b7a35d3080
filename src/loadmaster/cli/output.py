"""The terminal the command line writes to, shared by every command group."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager

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


@contextmanager
def working(label: str, every_s: float = 5.0) -> Iterator[None]:
    """Show that a long step whose progress cannot be counted is still running.

    On a terminal, a spinner with the elapsed time; otherwise (output redirected to a file or a
    CI log), ``label`` once at the start and a line every ``every_s`` seconds, so that a reader
    of the log can tell a slow step from a hung one.
    """
    started = time.perf_counter()
    if console.is_terminal:
        with console.status(f"{label} ..."):
            yield
        return
    console.print(f"{label} ...", markup=False, highlight=False)
    done = threading.Event()

    def beat() -> None:
        while not done.wait(every_s):
            console.print(f"  {label}: {time.perf_counter() - started:.0f} s", markup=False, highlight=False)

    thread = threading.Thread(target=beat, name="progress-heartbeat", daemon=True)
    thread.start()
    try:
        yield
    finally:
        done.set()
        thread.join()
