"""The discrete-event simulator: the pure scheduler driven in simulated time.

Each step pops every event due at the earliest time (completions first, then
arrivals, then periodic ticks), runs one scheduling cycle on the resulting
snapshot, carries out its binds and samples the timeline. A job that can
never fit is rejected when it arrives, with the reason; a job still waiting
when nothing more can happen keeps the reason of the last cycle.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np

from loadmaster.errors import SimulationError
from loadmaster.model import (
    MILLI_PER_GPU,
    Job,
    JobTable,
    NodeTable,
    PendingJob,
    RunningJob,
    TaskPlacement,
    TraceJob,
)
from loadmaster.scheduling import Bind, CycleResult, Scheduler
from loadmaster.sim.cluster import SimCluster
from loadmaster.sim.events import EventQueue, Kind
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


class _JobLog:
    """Per-job outcome columns, filled as the run goes."""

    def __init__(self, count: int) -> None:
        self.start = np.full(count, np.nan)
        self.end = np.full(count, np.nan)
        self.nodes_used = np.zeros(count, dtype=np.int64)
        self.node_names = [""] * count
        self.held_idle_gpu_s = np.zeros(count)
        self.reason = [""] * count


class Simulator:
    """Runs ``jobs`` on ``nodes`` under ``scheduler``; :meth:`run` may be called once."""

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
        self.cluster = SimCluster(nodes)
        self.recorder = TimelineRecorder(nodes)
        self.log = _JobLog(len(self.jobs))
        self.events = EventQueue()
        self.rng = np.random.default_rng(options.seed)
        self._bind_times: dict[str, list[tuple[float, float]]] = {}
        self._last: CycleResult | None = None

    def run(self) -> RunResult:
        """Simulate until no event is left; return the job table and the timeline."""
        for i, trace in enumerate(self.jobs):
            self.events.push(trace.job.submit_s, Kind.ARRIVAL, i)
        if self.options.period_s is not None and self.jobs:
            self.events.push(self.jobs[0].job.submit_s, Kind.TICK)
        while self.events:
            now = self.events.next_time()
            ticked = False
            for kind, index in self.events.pop_due(now):
                ticked |= self._handle(kind, index, now)
            self._cycle(now)
            if ticked and (self.cluster.running or self._arrivals_left(now)):
                # Decided after the cycle, which may have just started a job; with nothing
                # running and nothing left to arrive, no later cycle could change anything.
                self.events.push(now + (self.options.period_s or math.inf), Kind.TICK)
        self._close_pending(self._end_time())
        return RunResult(jobs=self._job_table(), timeline=self.recorder.timeline())

    def _handle(self, kind: Kind, index: int, now: float) -> bool:
        """Carry out one event; True if it was a periodic tick."""
        if kind is Kind.COMPLETION:
            self._complete(index, now)
        elif kind is Kind.ARRIVAL:
            self._arrive(index)
        return kind is Kind.TICK

    def _arrivals_left(self, now: float) -> bool:
        return bool(self.jobs) and self.jobs[-1].job.submit_s > now

    def _arrive(self, index: int) -> None:
        job = self.jobs[index].job
        verdict = self.scheduler.feasible(job, self.nodes)
        if not verdict.ok:
            self.log.reason[index] = verdict.reason
            self._report(1)
            return
        pending = PendingJob(job)
        self.cluster.add_pending(pending)
        self.recorder.enqueue(pending)

    def _complete(self, index: int, now: float) -> None:
        job = self.jobs[index].job
        running = self.cluster.running.pop(job.id)
        for placement in running.placements:
            self.cluster.release(placement)
        self.log.end[index] = now
        self._report(1)

    def _cycle(self, now: float) -> None:
        if not self.cluster.pending:
            self._sample(now)
            return
        result = self.scheduler.cycle(self.cluster.snapshot(), now, self.rng)
        for decision in result.decisions:
            if isinstance(decision, Bind):
                self._bind(decision, now)
        self._last = result
        self._sample(now)

    def _sample(self, now: float) -> None:
        self.recorder.sample(now, self.cluster.gpu_free, self.cluster.free_milli)

    def _bind(self, bind: Bind, now: float) -> None:
        pending = self.cluster.pending[bind.job_id]
        for placement in bind.placements:
            self.cluster.take(placement)
        gpus = sum(len(p.gpu_indices) * p.gpu_milli for p in bind.placements) / MILLI_PER_GPU
        self._bind_times.setdefault(bind.job_id, []).append((now, gpus))
        placements = pending.bound + bind.placements
        if not bind.starts:
            self.cluster.pending[bind.job_id] = PendingJob(pending.job, placements)
            return
        self.cluster.remove_pending(bind.job_id)
        self.recorder.dequeue(pending)
        self._start(pending.job, placements, now)

    def _start(self, job: Job, placements: tuple[TaskPlacement, ...], now: float) -> None:
        index = self.index[job.id]
        self.cluster.running[job.id] = RunningJob(job, placements, now)
        self.log.start[index] = now
        nodes = sorted({p.node for p in placements})
        self.log.nodes_used[index] = len(nodes)
        self.log.node_names[index] = ",".join(self.nodes.nodes[n].name for n in nodes)
        binds = self._bind_times.pop(job.id)
        self.log.held_idle_gpu_s[index] = sum((now - t) * g for t, g in binds)
        self.events.push(now + self.jobs[index].duration_s, Kind.COMPLETION, index)

    def _end_time(self) -> float:
        ends = self.log.end[~np.isnan(self.log.end)]
        last_submit = self.jobs[-1].job.submit_s if self.jobs else 0.0
        return float(max(ends.max(initial=last_submit), last_submit))

    def _close_pending(self, end_s: float) -> None:
        for job_id, pending in self.cluster.pending.items():
            binds = self._bind_times.pop(job_id, [])
            self.log.held_idle_gpu_s[self.index[job_id]] = sum((end_s - t) * g for t, g in binds)
            status = self._last.status_of(job_id, pending.job.queue) if self._last else None
            why = status.reason if status is not None else "never examined"
            self.log.reason[self.index[job_id]] = f"still pending when the run ended: {why}"

    def _report(self, count: int) -> None:
        if self.options.progress is not None:
            self.options.progress(count)

    def _job_table(self) -> JobTable:
        jobs = [t.job for t in self.jobs]
        log = self.log
        return JobTable(
            job_id=np.array([j.id for j in jobs], dtype=str),
            user=np.array([j.user for j in jobs], dtype=str),
            group=np.array([j.group for j in jobs], dtype=str),
            queue=np.array([j.queue for j in jobs], dtype=str),
            pool=np.array([j.pool or "*" for j in jobs], dtype=str),
            size_class=np.array([j.size_class for j in jobs], dtype=str),
            tasks=np.array([j.tasks for j in jobs], dtype=np.int64),
            gpus=np.array([j.gpus for j in jobs], dtype=float),
            submit_s=np.array([j.submit_s for j in jobs], dtype=float),
            start_s=log.start,
            end_s=log.end,
            duration_s=np.array([t.duration_s for t in self.jobs], dtype=float),
            time_limit_s=np.array([j.time_limit_s for j in jobs], dtype=float),
            nodes_used=log.nodes_used,
            node_names=np.array(log.node_names, dtype=str),
            held_idle_gpu_s=log.held_idle_gpu_s,
            reason=np.array(log.reason, dtype=str),
        )


def simulate(
    nodes: NodeTable, scheduler: Scheduler, jobs: Sequence[TraceJob], options: SimOptions | None = None
) -> RunResult:
    """Run one simulation; see :class:`Simulator`."""
    return Simulator(nodes, scheduler, jobs, options or SimOptions()).run()


__all__ = ["SimOptions", "Simulator", "simulate"]
