"""Several profiles in one scheduler process, one per ``schedulerName``, as kube-scheduler allows.

kube-scheduler runs every profile of its configuration (``profiles:
[{schedulerName, plugins}]``) over one cache of the cluster: a pod is
scheduled by the profile its ``spec.schedulerName`` names, and what one
profile binds is used room for the next (pkg/scheduler/profile,
scheduler.go ``frameworkForPod``). :class:`ProfileScheduler` does the same
with loadmaster profiles: each cycle it runs each profile, in the order
configured, over the jobs of its scheduler name, on the room left by the
profiles before it. A job a profile preempts stays counted as running for
the later profiles (its pods are still terminating) but is offered to none
of them as a victim again. Pure: no clock, no I/O.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import replace

import numpy as np

from loadmaster.errors import ConfigError
from loadmaster.model import ClusterSnapshot, Job, NodeTable, PendingJob, RunningJob
from loadmaster.scheduling import Bind, CycleResult, Decision, Preempt, Scheduler
from loadmaster.scheduling.state import WorkingState
from loadmaster.scheduling.status import Status


class ProfileScheduler(Scheduler):
    """A :class:`Scheduler` per scheduler name; jobs go to the one their ``scheduler_name`` names.

    ``profile`` is the first scheduler's (a job without a name goes to it).
    """

    def __init__(self, schedulers: Mapping[str, Scheduler]) -> None:
        if not schedulers:
            raise ConfigError(
                "--scheduler-name", "schedulers", "at least one schedulerName -> profile is needed"
            )
        self.schedulers = dict(schedulers)
        self.default = next(iter(self.schedulers))
        super().__init__(self.schedulers[self.default].profile)

    def of(self, job: Job) -> Scheduler:
        """The scheduler of ``job``'s scheduler name (the first one for a name not configured)."""
        return self.schedulers.get(job.scheduler_name or self.default, self.schedulers[self.default])

    def feasible(self, job: Job, nodes: NodeTable) -> Status:
        return self.of(job).feasible(job, nodes)

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        if len(self.schedulers) == 1:
            return self.schedulers[self.default].cycle(snapshot, now, rng)
        state = WorkingState.from_snapshot(snapshot)
        running = list(snapshot.running)
        decisions: list[Decision] = []
        statuses: dict[str, Status] = {}
        for scheduler in self.schedulers.values():
            mine = tuple(p for p in snapshot.pending if self.of(p.job) is scheduler)
            if not mine:
                continue
            view = _snapshot_of(snapshot, state, tuple(running), mine)
            result = scheduler.cycle(view, now, rng)
            for pending in mine:
                status = result.status_of(pending.job.id, scheduler.profile.lane(pending.job))
                if status is not None:
                    statuses[pending.job.id] = status
            for decision in result.decisions:
                if isinstance(decision, Bind):
                    for placement in decision.placements:
                        state.take_clamped(placement)
                elif isinstance(decision, Preempt):
                    running = [r for r in running if r.job.id != decision.job_id]
                decisions.append(decision)
        return CycleResult(tuple(decisions), statuses)


def skipped_walks(scheduler: Scheduler) -> int:
    """Cycles that skipped a periodic backfill walk (``interval_s`` not yet passed), over every profile.

    A :class:`ProfileScheduler` runs its profiles' schedulers, not its own cycle: their counts.
    """
    if isinstance(scheduler, ProfileScheduler):
        return sum(s.skipped_walks for s in scheduler.schedulers.values())
    return scheduler.skipped_walks


def _snapshot_of(
    snapshot: ClusterSnapshot,
    state: WorkingState,
    running: tuple[RunningJob, ...],
    pending: tuple[PendingJob, ...],
) -> ClusterSnapshot:
    """``snapshot`` with the free room of ``state`` (copied), and only ``running`` and ``pending``."""
    return replace(
        snapshot,
        gpu_free_milli=state.gpu_free.copy(),
        cpu_free_milli=state.cpu_free.copy(),
        memory_free_mib=state.memory_free.copy(),
        whole_free=state.whole_free.copy(),
        largest_share=state.largest_share.copy(),
        free_milli=state.free_milli.copy(),
        running=running,
        pending=pending,
        pending_queues=None,
        mig=state.mig.copy() if state.mig is not None else None,
        pods_free=state.pods_free.copy() if state.pods_free is not None else None,
    )
