"""What Kubernetes' node-constraint plugins share: a cache per node table and the score scale.

``node-unschedulable``, ``taint-toleration`` and ``node-affinity`` are the
loadmaster forms of kube-scheduler's plugins of the same names
(pkg/scheduler/framework/plugins/{nodeunschedulable,tainttoleration,nodeaffinity}).
Each computes a mask or a score per node from the node table (fixed for the
cycle) and a job property (its tolerations or affinity), so both are cached
per node table and property: a cycle of thousands of jobs with a few
distinct tolerations computes a few masks.
"""

from __future__ import annotations

from collections.abc import Callable, Hashable
from typing import Generic, TypeVar

from loadmaster.model import NodeTable

T = TypeVar("T")

MAX_NODE_SCORE = 100.0
"""A node score's top, as kube-scheduler's ``framework.MaxNodeScore``; a profile weight scales it."""


class TableCache(Generic[T]):
    """Values computed from one node table, keyed by a job property; emptied when the table changes.

    Bounded: one table's entries at a time, and at most ``limit`` of them.
    """

    def __init__(self, limit: int = 4096) -> None:
        self.limit = limit
        self._table: NodeTable | None = None
        self._values: dict[Hashable, T] = {}

    def get(self, table: NodeTable, key: Hashable, compute: Callable[[], T]) -> T:
        if table is not self._table or len(self._values) >= self.limit:
            self._table, self._values = table, {}
        found = self._values.get(key)
        if found is None:
            found = self._values[key] = compute()
        return found
