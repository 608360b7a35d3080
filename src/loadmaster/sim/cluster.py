"""SimCluster: cluster state in numpy arrays, updated in place as jobs bind and end.

It is the simulator's side of the backend seam: :meth:`snapshot` for the
scheduler, :meth:`bind` and :meth:`release` to carry out decisions.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from types import MappingProxyType

import numpy as np
import numpy.typing as npt

from loadmaster.errors import SimulationError
from loadmaster.model import (
    MILLI_PER_GPU,
    ClusterSnapshot,
    Job,
    NodeTable,
    PendingJob,
    RunningJob,
    TaskPlacement,
)
from loadmaster.model.pending_log import PendingLog
from loadmaster.model.running import RunningSerials, next_serial
from loadmaster.model.snapshot import gpu_summary, node_gpu_summary
from loadmaster.model.usage import HALF_LIFE_S, HISTORY_JOBS, PastUsage, UsageLedger
from loadmaster.scheduling.mig_pool import MigPool


def _read_only(array: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    view = array.view()
    view.setflags(write=False)
    return view


class SimCluster:
    """Free resources per GPU and per node, and the jobs pending and running.

    ``pending`` and ``running`` are dicts keyed by job id; ``pending`` keeps
    submission order because jobs are added as they arrive.
    """

    def __init__(
        self,
        nodes: NodeTable,
        half_life_s: float = HALF_LIFE_S,
        history_jobs: int = HISTORY_JOBS,
        mig: MigPool | None = None,
    ) -> None:
        self.nodes = nodes
        self.mig = mig
        self.usage = UsageLedger(half_life_s)
        self.recent_runtimes: dict[str, tuple[float, ...]] = {}
        self.recent_limits: dict[str, tuple[float, ...]] = {}
        """The time limits of the jobs of ``recent_runtimes``, in the same order."""
        self.history_jobs = history_jobs
        self.gpu_free = np.where(nodes.gpu_exists(), MILLI_PER_GPU, 0).astype(np.int64)
        for node, gpu in mig.gpus if mig is not None else ():
            self.gpu_free[node, gpu] = 0  # MIG mode: only MIG requests, through ``mig``, use it
        self.cpu_free = nodes.cpu_milli.copy()
        self.memory_free = nodes.memory_mib.copy()
        self.whole_free, self.largest_share, self.free_milli = gpu_summary(self.gpu_free)
        self._pending: dict[str, PendingJob] = {}
        self.pending_log = PendingLog()
        """The changes to ``pending`` (``ClusterSnapshot.pending_log``): a scheduler keeps its index of
        the queue from them rather than reading the whole queue at every cycle."""
        self.service: dict[str, tuple[float, float, float]] = {}
        """Run seconds kept by preempted jobs that resume, and when they stopped
        (``SimOptions.resume_preempted``)."""
        self.running: dict[str, RunningJob] = {}
        """Change it through :meth:`start` and :meth:`stop`, which keep the owners' counts."""
        self.serials = RunningSerials()
        """The running jobs' serial numbers in ``running``'s order, kept by :meth:`start` and
        :meth:`stop` for the snapshot (``ClusterSnapshot.running_serials``)."""
        self.queue_counts: Counter[str] = Counter()
        self.user_counts: Counter[str] = Counter()
        """Jobs pending or running per user (and below, per group), kept as jobs come and go:
        a fair-share order needs the owners with jobs at every cycle, and a large cluster runs
        thousands of jobs that a scheduler would otherwise read through to find a few dozen."""
        self.group_counts: Counter[str] = Counter()
        self.user_held: dict[str, list[int]] = {}
        """What each user's running jobs hold (``ClusterSnapshot.running_held``), and below each
        group's: kept by :meth:`start` and :meth:`stop`, for the same reason as the counts."""
        self.group_held: dict[str, list[int]] = {}
        self._views = tuple(
            _read_only(a)
            for a in (
                self.gpu_free,
                self.cpu_free,
                self.memory_free,
                self.whole_free,
                self.largest_share,
                self.free_milli,
            )
        )

    @property
    def pending(self) -> Mapping[str, PendingJob]:
        """The pending jobs by id, in submission order. Read only: change them through
        :meth:`add_pending`, :meth:`replace_pending`, :meth:`remove_pending` and :meth:`requeue`,
        which write each change to ``pending_log`` (a scheduler's index of the queue trusts it).
        A view made at each call, not kept: a cluster is copied whole (``copy.deepcopy``, as the
        RL environment's tests do), and a view cannot be."""
        return MappingProxyType(self._pending)

    def snapshot(self, now: float) -> ClusterSnapshot:
        """A view of the current state at ``now``, valid until the next change."""
        gpu, cpu, memory, whole, largest, total = self._views
        return ClusterSnapshot(
            nodes=self.nodes,
            gpu_free_milli=gpu,
            cpu_free_milli=cpu,
            memory_free_mib=memory,
            whole_free=whole,
            largest_share=largest,
            free_milli=total,
            running=self.running.values(),
            pending=self.pending.values(),
            pending_queues=frozenset(self.queue_counts),
            active_owners=(frozenset(self.user_counts), frozenset(self.group_counts)),
            running_held=(self.user_held, self.group_held),
            usage_gpu_s=self.usage.view(now),
            recent_runtimes_s=self.recent_runtimes,
            recent_limits_s=self.recent_limits,
            mig=self.mig,
            service_s=self.service,
            running_serials=self.serials,
            pending_log=self.pending_log,
        )

    def start_from(self, past: PastUsage) -> None:
        """Start with ``past``'s usage and run-time history (a replay of a live cluster)."""
        self.usage = past.ledger(self.usage.half_life_s)
        self.recent_runtimes, self.recent_limits = past.recent(self.history_jobs)

    def account(self, running: RunningJob, now: float, finished: bool) -> float:
        """Charge a job's GPU-seconds to its user and group (fair share); return them.

        Only a job that ``finished`` adds to its user's run-time history (a
        preempted run says nothing about how long the job takes).
        """
        milli = sum(
            p.gpu_milli * len(p.gpu_indices) + (p.mig.milli if p.mig else 0) for p in running.placements
        )
        gpus = milli / MILLI_PER_GPU
        gpu_s = gpus * (now - running.start_s)
        self.usage.charge(f"user/{running.job.user}", gpu_s, now)
        self.usage.charge(f"group/{running.job.group}", gpu_s, now)
        if finished:
            past = self.recent_runtimes.get(running.job.user, ())
            self.recent_runtimes[running.job.user] = (*past, now - running.start_s)[-self.history_jobs :]
            limits = self.recent_limits.get(running.job.user, ())
            self.recent_limits[running.job.user] = (*limits, running.job.time_limit_s)[-self.history_jobs :]
        return gpu_s

    def requeue(self, pending: PendingJob) -> None:
        """Put a preempted job back, keeping the pending jobs in submission order."""
        self.add_pending(pending)
        ordered = sorted(self._pending.values(), key=lambda p: (p.job.submit_s, p.job.id))
        self._pending = {p.job.id: p for p in ordered}
        self.pending_log.reorder()

    def add_pending(self, pending: PendingJob) -> None:
        self._pending[pending.job.id] = pending
        self.pending_log.add(pending)
        self.queue_counts[pending.job.queue] += 1
        self._count(pending.job, 1)

    def replace_pending(self, pending: PendingJob) -> None:
        """The pending job of ``pending``'s id is now ``pending`` (more of its tasks bound), in its place."""
        if pending.job.id not in self._pending:
            raise KeyError(f"replace_pending: {pending.job.id} is not pending")
        self._pending[pending.job.id] = pending
        self.pending_log.replace(pending)

    def remove_pending(self, job_id: str) -> PendingJob:
        pending = self._pending.pop(job_id)
        self.pending_log.remove(job_id)
        _less(self.queue_counts, pending.job.queue)
        self._count(pending.job, -1)
        return pending

    def start(self, running: RunningJob) -> None:
        """``running`` runs from now on (its job no longer pending)."""
        before = self.running.get(running.job.id)
        if before is not None:  # a new run of a job still running replaces its holdings
            self._hold(before, -1)
        self.running[running.job.id] = running
        self.serials.start(running.job.id, next_serial())
        self._count(running.job, 1)
        self._hold(running, 1)

    def stop(self, job_id: str) -> RunningJob | None:
        """``job_id`` no longer runs (it ended, was evicted or preempted): its run, or None."""
        running = self.running.pop(job_id, None)
        if running is not None:
            self.serials.stop(job_id)
            self._count(running.job, -1)
            self._hold(running, -1)
        return running

    def _hold(self, running: RunningJob, sign: int) -> None:
        """Add ``sign`` x what ``running`` holds to its user's and group's sums; an owner left
        holding nothing is dropped, so the sums stay the size of the running owners."""
        gpu = cpu = memory = 0
        for p in running.placements:
            gpu += p.gpu_milli * len(p.gpu_indices)
            cpu += p.cpu_milli
            memory += p.memory_mib
        for held, owner in ((self.user_held, running.job.user), (self.group_held, running.job.group)):
            sums = held.get(owner)
            if sums is None:
                sums = held[owner] = [0, 0, 0]
            sums[0] += sign * gpu
            sums[1] += sign * cpu
            sums[2] += sign * memory
            if not any(sums):
                del held[owner]

    def _count(self, job: Job, change: int) -> None:
        if change > 0:
            self.user_counts[job.user] += 1
            self.group_counts[job.group] += 1
        else:
            _less(self.user_counts, job.user)
            _less(self.group_counts, job.group)

    def take(self, placements: Sequence[TaskPlacement]) -> None:
        """Use the resources of a bind's placements; fails loudly if that would over-allocate.

        All of them at once: a job of 8 one-GPU tasks on one node is 8 placements, and the node's
        summary (whole GPUs, largest share, free milli-GPU) is computed once, not 8 times. Taking
        only lowers free resources, so a node over-allocated part way is over-allocated at the end.
        """
        for placement in placements:
            if placement.mig is not None:
                if self.mig is None:
                    raise SimulationError(f"{placement}: a MIG placement on a cluster with no MIG GPU")
                self.mig.occupy(placement.node, placement.mig)
        for node in self._apply(placements, -1):
            if (self.gpu_free[node] < 0).any() or self.cpu_free[node] < 0 or self.memory_free[node] < 0:
                on_node = ", ".join(str(p) for p in placements if p.node == node)
                raise SimulationError(f"node {self.nodes.nodes[node].name} over-allocated by {on_node}")

    def release(self, placements: Sequence[TaskPlacement]) -> None:
        """Give the resources of a job's placements back (each node's summary computed once)."""
        for placement in placements:
            if placement.mig is not None and self.mig is not None:
                self.mig.vacate(placement.node, placement.mig)
        self._apply(placements, +1)

    def _apply(self, placements: Sequence[TaskPlacement], sign: int) -> list[int]:
        """Add ``sign`` x each placement's resources; return the nodes touched, in first-touch order."""
        touched: dict[int, None] = {}
        for placement in placements:
            node = placement.node
            delta = sign * placement.gpu_milli
            row = self.gpu_free[node]  # a view: one scalar index per GPU, not a 2-D one
            for gpu in placement.gpu_indices:
                row[gpu] += delta
            self.cpu_free[node] += sign * placement.cpu_milli
            self.memory_free[node] += sign * placement.memory_mib
            touched[node] = None
        for node in touched:
            summary = node_gpu_summary(self.gpu_free[node])
            self.whole_free[node], self.largest_share[node], self.free_milli[node] = summary
        return list(touched)


def _less(counts: Counter[str], key: str) -> None:
    """One fewer of ``key``, dropped at none: the keys are those with jobs."""
    counts[key] -= 1
    if not counts[key]:
        del counts[key]
