"""binpack: used-host-first. Put a task on the node with the fewest free GPUs that still fit.

Packing small jobs onto busy nodes keeps whole 8-GPU nodes free for large
distributed jobs, which the spreading default of Kubernetes does not.
"""

from __future__ import annotations

from loadmaster.model import MILLI_PER_GPU, Job, TaskRequest
from loadmaster.scheduling.framework import CycleContext, FloatArray, ScorePlugin


class BinPack(ScorePlugin):
    """Score = minus the free GPUs on the node (fewer free is better)."""

    name = "binpack"
    reads_state_only = True
    """The score is a function of the (viewed) state alone: reservation searches may be reused."""

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        return -ctx.state.free_milli.astype(float) / MILLI_PER_GPU
