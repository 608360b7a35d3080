"""node-affinity: a job's required node affinity as a filter, its preferred affinity as a score.

As kube-scheduler's NodeAffinity plugin
(pkg/scheduler/framework/plugins/nodeaffinity, matching from
k8s.io/component-helpers scheduling/corev1/nodeaffinity): the required
``nodeSelectorTerms`` are ORed, the expressions of one term ANDed, an empty
term matches nothing; operators In, NotIn, Exists, DoesNotExist, Gt and Lt.
The score sums the weights of the preferred terms a node matches and scales
the sums to 0-100 by the largest (DefaultNormalizeScore). ``nodeSelector``
(exact labels) is applied before any plugin, with the pool and resource type.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from loadmaster.model import Job, NodeAffinity, NodeTable, TaskRequest
from loadmaster.scheduling.framework import (
    BoolArray,
    CycleContext,
    FilterPlugin,
    FilterResult,
    FloatArray,
    ScorePlugin,
)
from loadmaster.scheduling.plugins.node_constraints import MAX_NODE_SCORE, TableCache


class NodeAffinityPlugin(FilterPlugin, ScorePlugin):
    """Filter: a required term matches. Score: weights of the matching preferred terms, scaled to 0-100."""

    name = "node-affinity"
    reads_nodes_only = True  # the job and the node table (ctx.state.nodes); no time, no draws

    def __init__(self, args: object | None = None) -> None:
        super().__init__(args)
        self._masks: TableCache[BoolArray] = TableCache()
        self._scores: TableCache[FloatArray] = TableCache()

    def filter(self, job: Job, ctx: CycleContext) -> FilterResult:
        nodes = ctx.state.nodes
        affinity = job.affinity
        if affinity is None or affinity.required is None:
            return FilterResult(np.ones(len(nodes), dtype=bool))
        mask = self._masks.get(nodes, affinity.required, lambda: _allowed(nodes, affinity))
        return FilterResult(mask, f"{self.name}: no node matched the job's required node affinity")

    def memo_key(self, job: Job) -> Hashable:
        return job.affinity.required if job.affinity is not None else None

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        nodes = ctx.state.nodes
        affinity = job.affinity
        if affinity is None or not affinity.preferred:
            return np.zeros(len(nodes), dtype=np.float64)
        return self._scores.get(nodes, affinity.preferred, lambda: _preference(nodes, affinity))


def _allowed(nodes: NodeTable, affinity: NodeAffinity) -> BoolArray:
    return np.array([affinity.allows(n.name, n.labels) for n in nodes.nodes], dtype=bool)


def _preference(nodes: NodeTable, affinity: NodeAffinity) -> FloatArray:
    sums = np.array([affinity.preference(n.name, n.labels) for n in nodes.nodes], dtype=np.float64)
    most = sums.max() if sums.size else 0.0
    if most <= 0:
        return np.zeros(len(nodes), dtype=np.float64)
    scores: FloatArray = MAX_NODE_SCORE * sums / most
    return scores
