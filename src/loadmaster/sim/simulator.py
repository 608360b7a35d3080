"""The discrete-event simulator: the pure scheduler driven in simulated time.

Each step pops every event due at the earliest time (completions first, then
arrivals, then periodic ticks; or, with ``SimOptions.cycle_per_event``, only
the earliest event), runs one scheduling cycle on the resulting
snapshot, carries out its decisions (evictions before binds) and samples the
timeline. A job that can never fit is rejected when it arrives, with the
reason; a job still waiting when nothing more can happen keeps the reason of
the last cycle. A preempted job is requeued at its original submit time and
restarts from the beginning; the GPU time it lost is counted (with
``SimOptions.resume_preempted`` it resumes where it stopped and loses nothing).
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from loadmaster.errors import SimulationError
from loadmaster.model import MILLI_PER_GPU, Job, NodeTable, PendingJob, RunningJob, TaskPlacement, TraceJob
from loadmaster.model.usage import HALF_LIFE_S, PastUsage
from loadmaster.scheduling import Bind, CycleResult, Preempt, Reserve, Scheduler, Status
from loadmaster.sim.cluster import SimCluster
from loadmaster.sim.events import EventQueue, Kind
from loadmaster.sim.joblog import JobLog
from loadmaster.sim.mig import MigDriver, MigSimOptions, build_mig_pool
from loadmaster.sim.recorder import TimelineRecorder
from loadmaster.sim.result import RunResult


@dataclass(frozen=True, slots=True)
class SimOptions:
    """How to run a simulation."""

    seed: int = 0
    """Seed of the generator handed to every scheduling cycle (random placement, tie-breaks)."""
    period_s: float | None = None
    """Also run a cycle every ``period_s`` seconds, like a live scheduler; None: only on events."""
    progress: Callable[[int], None] | None = None
    """Called with the number of jobs that reached a final state since the previous call."""
    fair_share_half_life_s: float = HALF_LIFE_S
    """Half-life of past usage in the fair-share ledger (Slurm's PriorityDecayHalfLife; 7 days)."""
    explain: frozenset[str] = field(default_factory=frozenset)
    """Job ids whose every change of status is recorded in ``RunResult.explanations``."""
    cycle_per_event: bool = False
    """Run a cycle after every single event instead of once per distinct time (the RLScheduler
    simulator decides after each arrival and each completion, even at equal times)."""
    arrivals_first: bool = False
    """At equal times, handle arrivals before completions (the RLScheduler simulator's order)."""
    mig: MigSimOptions | None = None
    """MIG pools, reconfiguration time, reboots and re-planning (see :mod:`loadmaster.sim.mig`)."""
    past_usage: PastUsage | None = None
    """Fair-share usage and run-time history the run starts from (None: nobody has used anything)."""
    resume_preempted: bool = False
    """A preempted job keeps its progress (checkpointed, as Tiresias' simulator assumes) and resumes
    for the rest of its duration, so no work is lost; False: it restarts from the beginning."""


class Simulator:
    """Runs ``jobs`` on ``nodes`` under ``scheduler``: :meth:`run` once, or :meth:`start` then steps."""

    def __init__(
        self, nodes: NodeTable, scheduler: Scheduler, jobs: Sequence[TraceJob], options: SimOptions
    ) -> None:
        self.nodes = nodes
        self.scheduler = scheduler
        self.jobs = sorted(jobs, key=lambda t: (t.job.submit_s, t.job.id))
        self.options = options
        self.index = {t.job.id: i for i, t in enumerate(self.jobs)}
        if len(self.index) != len(self.jobs):
            raise SimulationError("job ids must be unique within a workload")
        mig_pool = build_mig_pool(nodes, options.mig.pools) if options.mig is not None else None
        self.cluster = SimCluster(nodes, options.fair_share_half_life_s, mig=mig_pool)
        if options.past_usage is not None:
            self.cluster.start_from(options.past_usage)
        self.recorder = TimelineRecorder(nodes)
        self.log = JobLog(len(self.jobs))
        self.events = EventQueue(options.arrivals_first)
        self.rng = np.random.default_rng(options.seed)
        self._bind_times: dict[str, list[tuple[float, float]]] = {}
        self._last: CycleResult | None = None
        self._wakes = scheduler.wakes
        self._wake_at = math.inf
        self._wakes_queued: set[float] = set()
        self.now = math.nan
        """Time of the last :meth:`step` (NaN before the first)."""
        self.explanations: dict[str, list[tuple[float, str]]] = {j: [] for j in options.explain}
        self.mig = (
            MigDriver(
                nodes,
                options.mig,
                cluster=self.cluster,
                schedule=lambda t, token: self.events.push(t, Kind.MIG, token),
                preempt=self._stop,
                active=lambda now: bool(self.cluster.running or self._arrivals_left(now)),
            )
            if options.mig is not None
            else None
        )

    def run(self) -> RunResult:
        """Simulate until no event is left; return the job table and the timeline."""
        self.start()
        while self.events:
            self.step()
        self._close_pending(self._end_time())
        return RunResult(
            jobs=self.log.table(self.jobs),
            timeline=self.recorder.timeline(),
            explanations=self.explanations,
            mig=self.mig.finish() if self.mig is not None else None,
        )

    def start(self) -> None:
        """Queue every arrival (and the first periodic tick); call once, before the first :meth:`step`."""
        for i, trace in enumerate(self.jobs):
            self.events.push(trace.job.submit_s, Kind.ARRIVAL, i)
        if self.options.period_s is not None and self.jobs:
            self.events.push(self.jobs[0].job.submit_s, Kind.TICK)
        if self.mig is not None:
            self.mig.start(self.jobs[0].job.submit_s if self.jobs else 0.0)

    def step(self) -> float:
        """One pass of the event loop: the events due next, one cycle, the next tick; return its time.

        :meth:`run` is ``start`` then ``step`` until no event is left; a driver
        in wall-clock time (the live demo) calls it while ``events.next_time()``
        is due. Needs at least one event left.
        """
        now = self.events.next_time()
        self.now = now
        ticked = False
        due = self.events.pop_next() if self.options.cycle_per_event else self.events.pop_due(now)
        for kind, index in due:
            ticked |= self._handle(kind, index, now)
        if self._wakes and self._stale_wakes_only(due, now):
            return now  # a wake no longer asked for (its job ended, or the walk it was for ran): no cycle
        self._cycle(now)
        if self._wakes:
            self._wake(now)
        if ticked and (self.cluster.running or self._arrivals_left(now)):
            # Decided after the cycle, which may have just started a job; with nothing
            # running and nothing left to arrive, no later cycle could change anything.
            self.events.push(now + (self.options.period_s or math.inf), Kind.TICK)
        return now

    def _wake(self, now: float) -> None:
        snapshot = self.cluster.snapshot(now)
        wake = self.scheduler.wake_s(snapshot, now)
        self._wake_at = wake  # the latest answer rules: an earlier wake still queued is stale
        if now < wake < math.inf and wake not in self._wakes_queued:
            self._wakes_queued.add(wake)
            self.events.push(wake, Kind.WAKE)

    def _stale_wakes_only(self, due: list[tuple[Kind, int]], now: float) -> bool:
        """True when every event due is a wake and none is the one last asked for."""
        wakes = all(kind is Kind.WAKE for kind, _ in due)
        self._wakes_queued.discard(now)
        return wakes and now != self._wake_at

    def cycle_again(self) -> None:
        """Run one more scheduling cycle at the time of the last :meth:`step`, with no new event.

        For a driver that makes one decision per cycle and then looks again at
        the same instant (the RL environment, :mod:`loadmaster.rl.env`). Needs
        a :meth:`step` first.
        """
        if math.isnan(self.now):
            raise SimulationError("cycle_again needs a step first")
        self._cycle(self.now)

    def _handle(self, kind: Kind, index: int, now: float) -> bool:
        """Carry out one event; True if it was a periodic tick."""
        if kind is Kind.COMPLETION:
            self._complete(index, now)
        elif kind is Kind.ARRIVAL:
            self._arrive(index, now)
        elif kind is Kind.MIG and self.mig is not None:
            self.mig.handle(index, now)
        return kind is Kind.TICK

    def _arrivals_left(self, now: float) -> bool:
        return bool(self.jobs) and self.jobs[-1].job.submit_s > now

    def _arrive(self, index: int, now: float) -> None:
        job = self.jobs[index].job
        verdict = self.scheduler.feasible(job, self.nodes)
        if not verdict.ok:
            self.log.reason[index] = verdict.reason
            self._explain(job.id, now, f"rejected at arrival: {verdict.reason}")
            self._report(1)
            return
        self._explain(job.id, now, "submitted")
        self._enqueue(PendingJob(job))

    def _enqueue(self, pending: PendingJob) -> None:
        self.cluster.add_pending(pending)
        self.recorder.enqueue(pending)

    def _complete(self, index: int, now: float) -> None:
        trace = self.jobs[index]
        running = self.cluster.running.get(trace.job.id)
        if running is None or running.start_s + self._left_s(index) != now:
            return  # the run this event was for was preempted
        self.cluster.service.pop(trace.job.id, None)
        self.cluster.stop(trace.job.id)
        self._release(running)
        self.cluster.account(running, now, finished=True)
        self.log.end[index] = now
        self._explain(trace.job.id, now, "finished")
        self._report(1)

    def _release(self, running: RunningJob) -> None:
        self.cluster.release(running.placements)

    def _cycle(self, now: float) -> None:
        if self.cluster.pending:
            result = self.scheduler.cycle(self.cluster.snapshot(now), now, self.rng)
            for decision in result.decisions:
                if isinstance(decision, Preempt):
                    self._preempt(decision, now)
                elif isinstance(decision, Bind):
                    self._bind(decision, now)
                elif isinstance(decision, Reserve):
                    self._reserved(decision)
            self._last = result
            self._explain_cycle(result, now)
        cluster = self.cluster
        self.recorder.sample(now, cluster.gpu_free, cluster.free_milli, cluster.mig, cluster.whole_free)

    def _reserved(self, reserve: Reserve) -> None:
        index = self.index[reserve.job_id]
        if math.isnan(self.log.estimated_start[index]):
            self.log.estimated_start[index] = reserve.start_s

    def evict(self, job_id: str, reason: str, now: float) -> bool:
        """End a running job at ``now`` for a reason outside the scheduler (reclaim evicted its idle
        GPUs); False when it is not running. It is not requeued, as a Kubernetes eviction of a job's
        pods ends it unless its owner (or a controller) submits it again; a cycle gives its GPUs to the
        queue at once."""
        running = self.cluster.stop(job_id)
        if running is None:
            return False
        self.cluster.service.pop(job_id, None)
        self._release(running)
        self.cluster.account(running, now, finished=False)
        index = self.index[job_id]
        self.log.end[index] = now
        self.log.reason[index] = f"evicted: {reason}"
        self._explain(job_id, now, f"evicted: {reason}")
        self._report(1)
        self._cycle(now)
        return True

    def _stop(self, job_id: str, reason: str, now: float) -> None:
        """Preempt a running job for a reason outside the scheduler (a node reboot)."""
        self._preempt(Preempt(job_id, reason), now)

    def _preempt(self, preempt: Preempt, now: float) -> None:
        running = self.cluster.stop(preempt.job_id)
        if running is None:
            raise KeyError(f"preempt: {preempt.job_id} is not running")
        self._release(running)
        index = self.index[preempt.job_id]
        gpu_s = self.cluster.account(running, now, finished=False)
        if self.options.resume_preempted:
            ran = self.cluster.service.get(preempt.job_id, (0.0, now, 0.0))[0]
            self.cluster.service[preempt.job_id] = (ran + now - running.start_s, now, now - running.start_s)
        else:
            self.log.lost_gpu_s[index] += gpu_s
        self.log.preemptions[index] += 1
        self.log.start[index] = np.nan
        self._explain(preempt.job_id, now, f"preempted and requeued: {preempt.reason}")
        pending = PendingJob(running.job)
        self.cluster.requeue(pending)
        self.recorder.enqueue(pending)

    def _bind(self, bind: Bind, now: float) -> None:
        pending = self.cluster.pending[bind.job_id]
        self.cluster.take(bind.placements)
        gpus = sum(len(p.gpu_indices) * p.gpu_milli for p in bind.placements) / MILLI_PER_GPU
        self._bind_times.setdefault(bind.job_id, []).append((now, gpus))
        placements = pending.bound + bind.placements
        if not bind.starts:
            self.cluster.replace_pending(PendingJob(pending.job, placements))
            return
        self.cluster.remove_pending(bind.job_id)
        self.recorder.dequeue(pending)
        self._start(pending.job, placements, now)

    def _start(self, job: Job, placements: tuple[TaskPlacement, ...], now: float) -> None:
        index = self.index[job.id]
        self.cluster.start(RunningJob(job, placements, now))
        self.log.start[index] = now
        self.log.mig_milli[index] = sum(p.mig.milli for p in placements if p.mig is not None)
        nodes = sorted({p.node for p in placements})
        self.log.nodes_used[index] = len(nodes)
        self.log.node_names[index] = ",".join(self.nodes.nodes[n].name for n in nodes)
        binds = self._bind_times.pop(job.id)
        self.log.held_idle_gpu_s[index] += sum((now - t) * g for t, g in binds)
        status = self._status(job)
        if status is not None and now > job.submit_s:
            self.log.wait_reason[index] = str(status)
        self._explain(job.id, now, f"started on {self.log.node_names[index]}")
        self.events.push(now + self._left_s(index), Kind.COMPLETION, index)

    def _left_s(self, index: int) -> float:
        """Run time the job needs from its current start: its duration less what a resumed job kept."""
        trace = self.jobs[index]
        kept = self.cluster.service.get(trace.job.id)
        return trace.duration_s if kept is None else trace.duration_s - kept[0]

    def _status(self, job: Job) -> Status | None:
        """Why ``job`` waited in the last cycle (None before any cycle or if it was bound)."""
        return self._last.status_of(job.id, self.scheduler.profile.lane(job)) if self._last else None

    def _explain_cycle(self, result: CycleResult, now: float) -> None:
        for job_id in self.explanations:
            pending = self.cluster.pending.get(job_id)
            if pending is not None:
                status = result.status_of(job_id, self.scheduler.profile.lane(pending.job))
                self._explain(job_id, now, f"waiting: {status}" if status is not None else "waiting")

    def _explain(self, job_id: str, now: float, text: str) -> None:
        trail = self.explanations.get(job_id)
        if trail is not None and (not trail or trail[-1][1] != text):
            trail.append((now, text))

    def _end_time(self) -> float:
        ends = self.log.end[~np.isnan(self.log.end)]
        last_submit = self.jobs[-1].job.submit_s if self.jobs else 0.0
        return float(max(ends.max(initial=last_submit), last_submit))

    def _close_pending(self, end_s: float) -> None:
        for job_id, pending in self.cluster.pending.items():
            binds = self._bind_times.pop(job_id, [])
            index = self.index[job_id]
            self.log.held_idle_gpu_s[index] += sum((end_s - t) * g for t, g in binds)
            status = self._status(pending.job)
            why = status.reason if status is not None else "never examined"
            self.log.reason[index] = f"still pending when the run ended: {why}"

    def _report(self, count: int) -> None:
        if self.options.progress is not None:
            self.options.progress(count)


def simulate(
    nodes: NodeTable, scheduler: Scheduler, jobs: Sequence[TraceJob], options: SimOptions | None = None
) -> RunResult:
    """Run one simulation; see :class:`Simulator`."""
    return Simulator(nodes, scheduler, jobs, options or SimOptions()).run()
