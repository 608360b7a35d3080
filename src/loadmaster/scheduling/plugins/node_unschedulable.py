"""node-unschedulable: no new task on a cordoned node, unless the job tolerates the cordon.

As kube-scheduler's NodeUnschedulable filter
(pkg/scheduler/framework/plugins/nodeunschedulable): a node with
``spec.unschedulable`` is filtered out unless the job tolerates the taint
``node.kubernetes.io/unschedulable:NoSchedule``. Tasks already on the node
keep running (a cordon is not a drain).
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from loadmaster.model import Job, Taint
from loadmaster.model.constraints import UNSCHEDULABLE_TAINT_KEY, tolerated
from loadmaster.scheduling.framework import BoolArray, CycleContext, FilterPlugin, FilterResult
from loadmaster.scheduling.plugins.node_constraints import TableCache

CORDON = Taint(UNSCHEDULABLE_TAINT_KEY, "", "NoSchedule")


class NodeUnschedulable(FilterPlugin):
    """Cordoned nodes are off limits to jobs that do not tolerate the cordon."""

    name = "node-unschedulable"
    reads_nodes_only = True  # the job and the node table (ctx.state.nodes); no time, no draws

    def __init__(self, args: object | None = None) -> None:
        super().__init__(args)
        self._open: TableCache[BoolArray] = TableCache(limit=2)

    def filter(self, job: Job, ctx: CycleContext) -> FilterResult:
        nodes = ctx.state.nodes
        if tolerated(job.tolerations, CORDON):
            return FilterResult(np.ones(len(nodes), dtype=bool))
        mask = self._open.get(
            nodes, "open", lambda: np.array([not n.unschedulable for n in nodes.nodes], dtype=bool)
        )
        return FilterResult(mask, f"{self.name}: {len(nodes) - int(mask.sum())} node(s) were unschedulable")

    def memo_key(self, job: Job) -> Hashable:
        return tolerated(job.tolerations, CORDON)
