"""gang: all workers of a job start together or none do.

Without it, tasks are bound one by one as they fit (what the default
Kubernetes scheduler does), and a partially placed job holds GPUs while it
waits for the rest of its workers.
"""

from __future__ import annotations

from loadmaster.model import PendingJob
from loadmaster.scheduling.framework import PermitPlugin
from loadmaster.scheduling.status import SUCCESS, Status, unschedulable


class Gang(PermitPlugin):
    """Permit a placement only when it brings the job to ``min_available`` tasks."""

    name = "gang"

    def permit(self, pending: PendingJob, placed: int) -> Status:
        have = len(pending.bound) + placed
        if have >= pending.job.min_available:
            return SUCCESS
        return unschedulable(
            f"gang: only {have} of the {pending.job.min_available} tasks it needs fit now",
            self.name,
        )

    def permits(self, pending: PendingJob, placed: int) -> bool:
        return len(pending.bound) + placed >= pending.job.min_available
