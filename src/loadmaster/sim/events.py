"""A deterministic event queue: a heap of (time, priority, seq, kind, index).

Ties in time are broken by priority (completions free resources before new
arrivals are seen, unless ``arrivals_first``) and then by insertion order, so
a run never depends on how Python happens to compare payloads.
"""

from __future__ import annotations

import heapq
from enum import IntEnum


class Kind(IntEnum):
    """Event kinds; the value is the tie-break priority at equal times (lower first)."""

    COMPLETION = 0
    ARRIVAL = 1
    TICK = 2
    MIG = 3
    """A MIG event (layout ready, node reboot or return, re-planning); ``index`` is the driver's token."""
    WAKE = 4
    """A cycle the scheduler asked for (``Scheduler.wake_s``: a job crossing a LAS threshold, or a
    periodic backfill walk that a cycle skipped)."""


class EventQueue:
    """Min-heap of events; ``index`` refers to a job (or is unused for ticks).

    ``arrivals_first`` swaps the order of arrivals and completions at equal
    times (the RLScheduler simulator's order: a job submitted when another
    ends is queued before the GPUs come back).
    """

    def __init__(self, arrivals_first: bool = False) -> None:
        self._heap: list[tuple[float, int, int, int]] = []
        self._seq = 0
        self._rank = {kind: int(kind) for kind in Kind}
        if arrivals_first:
            self._rank[Kind.ARRIVAL], self._rank[Kind.COMPLETION] = 0, 1
        self._kinds = {rank: kind for kind, rank in self._rank.items()}

    def push(self, time_s: float, kind: Kind, index: int = -1) -> None:
        heapq.heappush(self._heap, (time_s, self._rank[kind], self._seq, index))
        self._seq += 1

    def __len__(self) -> int:
        return len(self._heap)

    def next_time(self) -> float:
        """Time of the earliest event; the queue must not be empty."""
        return self._heap[0][0]

    def pop_due(self, time_s: float) -> list[tuple[Kind, int]]:
        """Remove and return every event at ``time_s``, in tie-break order."""
        due: list[tuple[Kind, int]] = []
        heap = self._heap
        while heap and heap[0][0] <= time_s:
            _, rank, _, index = heapq.heappop(heap)
            due.append((self._kinds[rank], index))
        return due

    def pop_next(self) -> list[tuple[Kind, int]]:
        """Remove and return the earliest event alone; the queue must not be empty."""
        _, rank, _, index = heapq.heappop(self._heap)
        return [(self._kinds[rank], index)]
