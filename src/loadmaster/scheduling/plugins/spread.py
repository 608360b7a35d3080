"""spread: least-allocated. Put a task on the node with the most free GPUs.

This is what the default Kubernetes scheduler does; it suits web services and
is kept as the baseline that fragments a GPU cluster.
"""

from __future__ import annotations

from loadmaster.model import MILLI_PER_GPU, Job, TaskRequest
from loadmaster.scheduling.framework import CycleContext, FloatArray, ScorePlugin


class Spread(ScorePlugin):
    """Score = the free GPUs on the node (more free is better)."""

    name = "spread"
    pure = True

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        return ctx.state.free_milli.astype(float) / MILLI_PER_GPU
