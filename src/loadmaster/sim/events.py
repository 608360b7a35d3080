"""A deterministic event queue: a heap of (time, priority, seq, kind, index).

Ties in time are broken by priority (completions free resources before new
arrivals are seen) and then by insertion order, so a run never depends on how
Python happens to compare payloads.
"""

from __future__ import annotations

import heapq
from enum import IntEnum


class Kind(IntEnum):
    """Event kinds; the value is the tie-break priority at equal times (lower first)."""

    COMPLETION = 0
    ARRIVAL = 1
    TICK = 2


class EventQueue:
    """Min-heap of events; ``index`` refers to a job (or is unused for ticks)."""

    def __init__(self) -> None:
        self._heap: list[tuple[float, int, int, int]] = []
        self._seq = 0

    def push(self, time_s: float, kind: Kind, index: int = -1) -> None:
        heapq.heappush(self._heap, (time_s, int(kind), self._seq, index))
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
            _, kind, _, index = heapq.heappop(heap)
            due.append((Kind(kind), index))
        return due
