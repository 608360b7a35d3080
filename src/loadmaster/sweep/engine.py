"""The sweep's driver: hand cells to an executor, store each result, retry failures, report progress.

The driver keeps at most ``executor.slots`` cells in flight (so "running" is
what runs, and memory stays bounded however large the sweep), stores every
result the moment it arrives, and skips every cell whose key already has a
result: a rerun after a crash, even ``kill -9`` of the driver, resumes where
it stopped. A cell that fails is retried ``retries`` times, each after a
backoff that doubles; then its last error is stored and the sweep goes on.
"""

from __future__ import annotations

import heapq
import logging
import time
from collections import deque
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

from loadmaster.parallel import Executor
from loadmaster.sweep.run import run_cell
from loadmaster.sweep.spec import Cell, Sweep
from loadmaster.sweep.store import Store

log = logging.getLogger(__name__)


@dataclass(frozen=True, slots=True)
class Progress:
    """Where a sweep stands, in distinct cells (cells with the same key count once)."""

    total: int
    done: int
    running: int
    failed: int
    skipped: int
    """Finished in an earlier run."""
    eta_s: float | None
    """Time left at this run's rate so far; None until a cell has finished."""


@dataclass(frozen=True, slots=True)
class Outcome:
    """How a run of the sweep ended."""

    ran: int
    skipped: int
    failed: dict[str, str]
    """Key -> last error of each cell that failed every attempt."""
    wall_s: float


def run_sweep(
    sweep: Sweep,
    store: Store,
    executor: Executor,
    *,
    on_progress: Callable[[Progress], None] | None = None,
    runner: Callable[[Cell], dict[str, Any]] = run_cell,
    poll_s: float = 0.5,
) -> Outcome:
    """Run every cell of ``sweep`` that ``store`` has no result for."""
    started = time.perf_counter()
    unique = {cell.key: cell for cell in sweep.cells}
    finished = store.done()
    todo = deque((key, 1) for key in unique if key not in finished)
    skipped = len(unique) - len(todo)
    log.info(
        "sweep %s: %d cells, %d done before, %d to run on %s",
        sweep.name,
        len(unique),
        skipped,
        len(todo),
        executor.describe,
    )
    flight: dict[int, tuple[str, int]] = {}
    later: list[tuple[float, str, int]] = []
    failed: dict[str, str] = {}
    ran = 0

    def report() -> None:
        if on_progress is not None:
            elapsed = time.perf_counter() - started
            left = len(todo) + len(flight) + len(later)
            eta = elapsed / ran * left if ran else None
            on_progress(Progress(len(unique), skipped + ran, len(flight), len(failed), skipped, eta))

    report()
    while todo or flight or later:
        now = time.perf_counter()
        while later and later[0][0] <= now:
            _, key, attempt = heapq.heappop(later)
            todo.appendleft((key, attempt))
        while todo and len(flight) < executor.slots:
            key, attempt = todo.popleft()
            flight[executor.submit(runner, unique[key])] = (key, attempt)
        timeout = poll_s if not later else max(0.0, min(poll_s, later[0][0] - time.perf_counter()))
        for item in executor.wait(timeout) if flight else _sleep(timeout):
            key, attempt = flight.pop(item.ticket)
            if item.error is None:
                store.put(
                    key, {**item.value, "ran_on": {"node": item.node, "pid": item.pid}, "attempt": attempt}
                )
                ran += 1
                log.info("cell %s done on %s (attempt %d)", key, item.node, attempt)
            elif attempt <= sweep.spec.retries:
                delay = sweep.spec.retry_backoff_s * 2 ** (attempt - 1)
                log.warning(
                    "cell %s failed (attempt %d), retrying in %.1f s: %s",
                    key,
                    attempt,
                    delay,
                    _last_line(item.error),
                )
                heapq.heappush(later, (time.perf_counter() + delay, key, attempt + 1))
            else:
                log.error("cell %s failed %d times; giving up: %s", key, attempt, _last_line(item.error))
                failed[key] = item.error
                store.fail(
                    key,
                    {
                        "key": key,
                        "labels": unique[key].labels(),
                        "error": item.error,
                        "attempts": attempt,
                        "node": item.node,
                    },
                )
        report()
    return Outcome(ran, skipped, failed, time.perf_counter() - started)


def _sleep(seconds: float) -> list[Any]:
    time.sleep(seconds)
    return []


def _last_line(error: str) -> str:
    lines = [line for line in error.strip().splitlines() if line.strip()]
    return lines[-1] if lines else error
