"""taint-toleration: a job stays off nodes whose taints it does not tolerate, and avoids PreferNoSchedule.

As kube-scheduler's TaintToleration plugin
(pkg/scheduler/framework/plugins/tainttoleration): the filter keeps a node
only if the job tolerates each of its ``NoSchedule`` and ``NoExecute``
taints; the score counts the node's ``PreferNoSchedule`` taints the job does
not tolerate (only tolerations with that effect or none count) and scales
them in reverse to 0-100, so the node with most such taints scores 0 and a
node with none scores 100. Evicting running tasks from a ``NoExecute`` node
is the taint-eviction controller's work, not a scheduler's: not done here.
"""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from loadmaster.model import Job, NodeTable, Taint, TaskRequest, Toleration
from loadmaster.model.constraints import tolerated
from loadmaster.scheduling.framework import (
    BoolArray,
    CycleContext,
    FilterPlugin,
    FilterResult,
    FloatArray,
    ScorePlugin,
)
from loadmaster.scheduling.plugins.node_constraints import MAX_NODE_SCORE, TableCache

_HARD = ("NoSchedule", "NoExecute")


def untolerated(taints: tuple[Taint, ...], tolerations: tuple[Toleration, ...]) -> Taint | None:
    """The first NoSchedule or NoExecute taint not tolerated (``FindMatchingUntoleratedTaint``), or None."""
    return next((t for t in taints if t.effect in _HARD and not tolerated(tolerations, t)), None)


class TaintToleration(FilterPlugin, ScorePlugin):
    """Filter: every hard taint tolerated. Score: fewer untolerated PreferNoSchedule taints is better."""

    name = "taint-toleration"
    reads_nodes_only = True  # the job and the node table (ctx.state.nodes); no time, no draws

    def __init__(self, args: object | None = None) -> None:
        super().__init__(args)
        self._masks: TableCache[tuple[BoolArray, str]] = TableCache()
        self._scores: TableCache[FloatArray] = TableCache()

    def filter(self, job: Job, ctx: CycleContext) -> FilterResult:
        nodes = ctx.state.nodes
        mask, example = self._masks.get(nodes, job.tolerations, lambda: _filter(nodes, job.tolerations))
        refused = len(nodes) - int(mask.sum())
        return FilterResult(
            mask, f"{self.name}: {refused} node(s) had taints that the job didn't tolerate (e.g. {example})"
        )

    def memo_key(self, job: Job) -> Hashable:
        return job.tolerations

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        soft = tuple(t for t in job.tolerations if t.effect in ("", "PreferNoSchedule"))
        nodes = ctx.state.nodes
        return self._scores.get(nodes, soft, lambda: _score(nodes, soft))


def _filter(nodes: NodeTable, tolerations: tuple[Toleration, ...]) -> tuple[BoolArray, str]:
    found = [untolerated(n.taints, tolerations) for n in nodes.nodes]
    example = next((f"{t} on {n.name}" for t, n in zip(found, nodes.nodes, strict=True) if t), "")
    return np.array([t is None for t in found], dtype=bool), example


def _score(nodes: NodeTable, soft: tuple[Toleration, ...]) -> FloatArray:
    counts = np.array(
        [
            sum(t.effect == "PreferNoSchedule" and not tolerated(soft, t) for t in n.taints)
            for n in nodes.nodes
        ],
        dtype=np.float64,
    )
    most = counts.max() if counts.size else 0.0
    if most == 0:
        return np.full(len(nodes), MAX_NODE_SCORE)  # DefaultNormalizeScore, reversed: all at the top
    scores: FloatArray = MAX_NODE_SCORE - MAX_NODE_SCORE * counts / most
    return scores
