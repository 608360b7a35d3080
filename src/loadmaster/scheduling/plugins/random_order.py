"""random-order: serve waiting jobs in a random order, drawn afresh each cycle.

The "Random" baseline of DeepJS-style comparisons: with lax allocation, a
uniformly random job among those that fit starts first. It bounds from below
what any ordering achieves, so a learned policy that does not clearly beat it
has learned nothing.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadmaster.model import Job
from loadmaster.scheduling.framework import CycleContext, OrderPlugin


class RandomOrder(OrderPlugin):
    """Key = a draw from the cycle's seeded generator, so runs repeat exactly."""

    name = "random-order"

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        return (float(ctx.rng.random()), job.id)

    def order_keys(self, jobs: Sequence[Job], ctx: CycleContext) -> list[tuple[float | str, ...]]:
        draws = ctx.rng.random(len(jobs))
        return [(float(d), job.id) for d, job in zip(draws, jobs, strict=True)]
