"""first-fit: the first node (in cluster order) that fits."""

from __future__ import annotations

import numpy as np

from loadmaster.model import Job, TaskRequest
from loadmaster.scheduling.framework import CycleContext, FloatArray, ScorePlugin


class FirstFit(ScorePlugin):
    """Score falls with the node index, from 0 down to just above -1.

    The range keeps it below one GPU of any other score, so with binpack it
    only breaks ties, and alone it picks the lowest-index node that fits.
    """

    name = "first-fit"
    pure = True
    """The score depends on the node's index alone."""

    def __init__(self, args: object | None = None) -> None:
        super().__init__(args)
        self._scores: dict[int, FloatArray] = {}
        """The scores by cluster size: they depend on nothing else, and every placement asks."""

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        count = len(ctx.state.nodes)
        scores = self._scores.get(count)
        if scores is None:
            scores = -np.arange(count, dtype=float) / count
            scores.flags.writeable = False  # shared by every caller: nobody may change it
            self._scores[count] = scores
        return scores
