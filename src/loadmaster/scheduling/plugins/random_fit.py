"""random: a uniformly random node among those that fit (the baseline every paper reports)."""

from __future__ import annotations

from loadmaster.model import Job, TaskRequest
from loadmaster.scheduling.framework import CycleContext, FloatArray, ScorePlugin


class RandomFit(ScorePlugin):
    """Score drawn from the cycle's seeded generator, so runs repeat exactly."""

    name = "random"

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        return ctx.rng.random(len(ctx.state.nodes))
