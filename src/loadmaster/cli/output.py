"""The terminal the command line writes to, shared by every command group."""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

from rich.console import Console
from rich.progress import (
    BarColumn,
    DownloadColumn,
    MofNCompleteColumn,
    Progress,
    Task,
    TaskID,
    TextColumn,
    TimeElapsedColumn,
)

console = Console(width=None if Console().is_terminal else 120)
"""Rich console; 120 columns when not a terminal, so logs and tests see whole lines."""


def byte_progress() -> Progress:
    """A progress bar over the bytes of a file being read."""
    columns = (TextColumn("{task.description:<14}"), BarColumn(), DownloadColumn(), TimeElapsedColumn())
    return Progress(*columns, console=console, transient=False)


class LoggedProgress(Progress):
    """Rich progress bars on a terminal; plain lines when the output goes to a file or a pipe.

    Redirected, a live bar shows nothing until it ends (hours, for a long simulation), so each
    task instead prints a line when it starts, one every ``every_s`` seconds while it runs, and
    one when it completes (or, at the end, where it stopped).
    """

    def __init__(self, *columns: Any, every_s: float = 10.0) -> None:
        self._lines = not console.is_terminal
        super().__init__(*columns, console=console, transient=False, disable=self._lines)
        self._every_s = every_s
        self._said: dict[TaskID, float] = {}
        self._done: set[TaskID] = set()

    def advance(self, task_id: TaskID, advance: float = 1) -> None:
        """Advance the bar; redirected, print a line if one is due."""
        super().advance(task_id, advance)
        self._say(task_id)

    def update(self, task_id: TaskID, **changes: Any) -> None:
        """Update the bar; redirected, print a line if one is due."""
        super().update(task_id, **changes)
        self._say(task_id)

    def stop(self) -> None:
        """Stop; redirected, say where each started task that did not complete stopped."""
        super().stop()
        for task in self.tasks:
            if self._lines and task.id in self._said and task.id not in self._done:
                self._line(task, "stopped at")

    def _say(self, task_id: TaskID) -> None:
        if not self._lines:
            return
        task = next(t for t in self.tasks if t.id == task_id)
        now = time.monotonic()
        if task_id not in self._said:
            self._said[task_id] = now
            console.print(f"{task.description}: started", markup=False, highlight=False)
        if task.finished and task_id not in self._done:
            self._done.add(task_id)
            self._line(task, "done,")
        elif now - self._said[task_id] >= self._every_s and not task.finished:
            self._said[task_id] = now
            self._line(task, "at")

    def _line(self, task: Task, what: str) -> None:
        total = f" of {task.total:,.0f}" if task.total is not None else ""
        elapsed = task.elapsed or 0.0
        console.print(
            f"{task.description}: {what} {task.completed:,.0f}{total} after {elapsed:.0f} s",
            markup=False,
            highlight=False,
        )


def count_progress(label_width: int = 14, every_s: float = 10.0) -> LoggedProgress:
    """Progress over a count of items (jobs simulated, updates trained), labelled per task.

    Bars on a terminal, lines when redirected (:class:`LoggedProgress`).
    """
    columns = (
        TextColumn(f"{{task.description:<{label_width}}}"),
        BarColumn(),
        MofNCompleteColumn(),
        TimeElapsedColumn(),
    )
    return LoggedProgress(*columns, every_s=every_s)


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
