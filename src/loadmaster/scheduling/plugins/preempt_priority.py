"""priority-preempt: a job may evict running jobs of a lower priority class.

A job's priority is its class's value, or its resolved ``priority_value``
(a Kubernetes PriorityClass) when it carries one.
Victims must have run ``min_runtime_s`` (so a job is never evicted right
after it started), and are offered lowest class first, then youngest first
(least work lost). The ``preempt`` action takes the fewest that make room and
evicts each gang whole; the evicted jobs are requeued and their lost GPU time
is counted.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

from loadmaster.model import PendingJob, RunningJob
from loadmaster.scheduling.framework import CycleContext, VictimPlugin
from loadmaster.scheduling.plugins.priority import default_classes, priority_value


@dataclass(frozen=True, slots=True)
class PriorityPreemptArgs:
    classes: Mapping[str, int] = field(default_factory=default_classes)
    """Value of each priority class name; a job may evict jobs of a strictly lower value."""
    min_runtime_s: float = 600.0
    """Jobs that have run less than this are never evicted."""


class PriorityPreempt(VictimPlugin):
    """Eligible victims: lower class, ran long enough; lowest class first, then youngest."""

    name = "priority-preempt"
    Args = PriorityPreemptArgs

    def __init__(self, args: PriorityPreemptArgs | None = None) -> None:
        super().__init__(args)
        self.settings: PriorityPreemptArgs = args or PriorityPreemptArgs()

    def select_victims(
        self, pending: PendingJob, running: Sequence[RunningJob], ctx: CycleContext
    ) -> Sequence[RunningJob]:
        classes = self.settings.classes
        mine = priority_value(pending.job, classes)
        eligible = [
            r
            for r in running
            if priority_value(r.job, classes) < mine and ctx.now - r.start_s >= self.settings.min_runtime_s
        ]
        eligible.sort(key=lambda r: (priority_value(r.job, classes), -r.start_s, r.job.id))
        return eligible
