"""The changes to a driver's pending jobs, in order: how a scheduler keeps its own index of the queue.

A non-strict queue on an overloaded cluster holds thousands of jobs, and most of them wait, cycle
after cycle, for a shape of request that does not fit. A scheduler that reads the whole queue at
every cycle to sort it into such shapes does work that grows with the queue, although between two
cycles only a few jobs came or went. A driver that keeps its pending jobs as they come and go (the
simulator) also writes each change here, and hands the log to the scheduler in the snapshot
(:attr:`ClusterSnapshot.pending_log`); the scheduler then reads only what changed since the
version it last read.

The driver promises three things, which the log's operations spell: a job added goes to the end of
the queue's order; a job replaced (a gang that got some of its tasks placed) keeps its place; any
other change of order is written as :meth:`PendingLog.reorder`, after which a reader starts again
from the whole queue. The log keeps its last entries only (:data:`KEPT`): a reader that fell
further behind reads the whole queue too. A reader trusts the log: a change to the queue that the
driver did not write is one the reader does not see (it checks only the queue's length, which
catches a job added or removed unlogged, not one replaced).
"""

from __future__ import annotations

from collections.abc import Sequence
from typing import Literal

from loadmaster.model.job import PendingJob

ChangeKind = Literal["add", "remove", "replace", "reorder"]
Change = tuple[ChangeKind, PendingJob | str | None]
"""("add", job) at the end; ("remove", job id); ("replace", job) in its place; ("reorder", None)."""

KEPT = 8192
"""Entries kept: a reader that reads at every cycle is never that far behind (a cycle follows each
event), and a log of a long run stays small."""


class PendingLog:
    """Append-only changes to one driver's pending jobs, numbered by version."""

    def __init__(self, kept: int = KEPT) -> None:
        if kept < 1:
            raise ValueError(f"PendingLog: kept must be at least 1, got {kept}")
        self._kept = kept
        self._entries: list[Change] = []
        self._base = 0
        """The version of the first entry kept."""

    @property
    def version(self) -> int:
        """The number of changes written so far: the state of the queue they lead to."""
        return self._base + len(self._entries)

    def add(self, pending: PendingJob) -> None:
        """``pending`` joined the queue, after every job already in it."""
        self._write(("add", pending))

    def remove(self, job_id: str) -> None:
        """``job_id`` left the queue (it started, or was withdrawn)."""
        self._write(("remove", job_id))

    def replace(self, pending: PendingJob) -> None:
        """The job of ``pending``'s id is now ``pending`` (more of its tasks bound), in the same place."""
        self._write(("replace", pending))

    def reorder(self) -> None:
        """The queue's order changed otherwise (a preempted job went back to its submission place)."""
        self._write(("reorder", None))

    def since(self, version: int) -> Sequence[Change] | None:
        """The changes after ``version``, oldest first; None if they are no longer all kept."""
        if version < self._base or version > self.version:
            return None
        return self._entries[version - self._base :]

    def _write(self, change: Change) -> None:
        self._entries.append(change)
        if len(self._entries) > 2 * self._kept:
            # Drop the oldest half at once: amortised O(1) per change, at most 2 x kept held.
            dropped = len(self._entries) - self._kept
            del self._entries[:dropped]
            self._base += dropped
