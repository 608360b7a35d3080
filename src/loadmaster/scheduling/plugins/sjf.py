"""sjf: shortest job first, by the run time the user requested.

Serving short jobs first minimises mean wait and slowdown when requested
times are honest; it is the classic baseline of the RLScheduler (SC'20)
heuristic table. Long jobs may starve under a steady stream of short ones,
which is why it is a baseline rather than a default.
"""

from __future__ import annotations

from dataclasses import dataclass

from loadmaster.model import Job
from loadmaster.scheduling.framework import CycleContext, OrderPlugin


@dataclass(frozen=True, slots=True)
class SjfArgs:
    strict: bool = False
    """Block the queue behind a head job that cannot start (the reference protocol without backfilling)."""
    commit: bool = False
    """Keep the job chosen as head first until it starts, even if a job with a lower key arrives
    meanwhile (the RLScheduler loop commits to the job it picked; False: re-sort every cycle)."""


class ShortestJobFirst(OrderPlugin):
    """Key = (requested time ``time_limit_s``, submit time, id): shortest request first."""

    name = "sjf"
    Args = SjfArgs

    def __init__(self, args: SjfArgs | None = None) -> None:
        super().__init__(args)
        settings = args or SjfArgs()
        self.strict = settings.strict
        self.commits_head = settings.commit

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        return (job.time_limit_s, job.submit_s, job.id)
