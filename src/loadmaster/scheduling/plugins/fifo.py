"""fifo: serve jobs in submission order.

Strict by default, as users expect: a job that cannot start blocks every job
submitted after it in the same queue, so an 8-GPU job is never overtaken by
1-GPU jobs submitted later (at the price of idle GPUs behind it; backfill is
the remedy).
"""

from __future__ import annotations

from dataclasses import dataclass

from loadmaster.model import Job
from loadmaster.scheduling.framework import CycleContext, OrderPlugin


@dataclass(frozen=True, slots=True)
class FifoArgs:
    strict: bool = True
    """Block the queue behind a head job that cannot start (False: later jobs may pass it)."""
    commit: bool = False
    """Keep the job chosen as head first until it starts, even if a job with a lower key arrives
    meanwhile (the RLScheduler loop commits to the job it picked; False: re-sort every cycle)."""


class Fifo(OrderPlugin):
    """Order by submit time, then job id (drivers keep pending jobs in that order)."""

    name = "fifo"
    Args = FifoArgs
    follows_submission_order = True

    def __init__(self, args: FifoArgs | None = None) -> None:
        super().__init__(args)
        settings = args or FifoArgs()
        self.strict = settings.strict
        self.commits_head = settings.commit

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        return (job.submit_s, job.id)
