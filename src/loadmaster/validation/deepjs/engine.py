"""The DeepJS event loop with the reference's clock (SimPy's event order), and its results per chunk."""

from __future__ import annotations

import heapq
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np

from loadmaster.errors import ModelError, SimulationError
from loadmaster.metrics.summary import bounded_slowdown, jain_index
from loadmaster.validation.deepjs.chooser import Chooser, Decision, MachineView, Snapshot, TaskView, fits
from loadmaster.validation.deepjs.trace import (
    MACHINE_CPU,
    MACHINE_DISK,
    MACHINE_MEMORY,
    MACHINES,
    BatchJob,
    BatchTask,
)

SEED = 41
"""``np.random.seed(41)`` in the reference launch scripts, set before each run."""
BOUND_S = 10.0
"""Bounded slowdown's floor on the run time, as elsewhere in loadmaster."""


@dataclass
class _Task:
    """A task's run-time state."""

    spec: BatchTask
    job: BatchJob
    started: int = 0
    finished: int = 0
    first_start: float | None = None
    last_end: float = 0.0

    cached: TaskView | None = None
    cached_key: tuple[int, float, int, int] = (-1, 0.0, 0, 0)

    @property
    def done(self) -> bool:
        return self.finished == self.spec.instances

    def view(self, index: int, now: float) -> TaskView:
        """The chooser's view, reused while nothing in it changed (the hot path: many calls per tick)."""
        key = (index, now, self.started, self.finished)
        if self.cached is not None and key == self.cached_key:
            return self.cached
        self.cached_key = key
        self.cached = TaskView(
            index=index,
            job_id=self.job.job_id,
            task_id=self.spec.task_id,
            cpu=self.spec.cpu,
            memory=self.spec.memory,
            disk=self.spec.disk,
            duration=self.spec.duration,
            instances=self.spec.instances,
            waiting_instances=self.spec.instances - self.started,
            running_instances=self.started - self.finished,
            submit=self.job.submit,
            waited=now - self.job.submit,
        )
        return self.cached


@dataclass
class _Machine:
    """Free resources, updated by the same float additions and subtractions as the reference's."""

    cpu: float = MACHINE_CPU
    memory: float = MACHINE_MEMORY
    disk: float = MACHINE_DISK


_URGENT, _NORMAL = 0, 1
"""SimPy's event priorities: a process starting now runs before timeouts due now."""


@dataclass
class _Clock:
    """SimPy's event queue: (time, priority, creation order), so ties break exactly as in the reference.

    The reference has three kinds of process: the broker (waits until the
    next job's submit time, adds it), the scheduler (decides, then waits one
    time unit) and one per started instance (starts urgently, waits its
    duration, frees its resources). Each wait is one entry here.
    """

    heap: list[tuple[float, int, int, str, int]] = field(default_factory=list)
    count: int = 0

    def at(self, time: float, priority: int, kind: str, ref: int = 0) -> None:
        heapq.heappush(self.heap, (time, priority, self.count, kind, ref))
        self.count += 1

    def pop(self) -> tuple[float, str, int]:
        time, _, _, kind, ref = heapq.heappop(self.heap)
        return time, kind, ref


@dataclass(frozen=True)
class TaskOutcome:
    """One task's times in a run (trace time units, submit rebased to the chunk)."""

    job_id: int
    task_id: int
    submit: int
    first_start: float
    last_end: float
    duration: float


@dataclass(frozen=True)
class ChunkResult:
    """One chooser on one chunk: the reference's three metrics, and ones that count queueing.

    * ``makespan``: the first scheduler tick that sees every job finished;
    * ``avg_completion``, ``avg_slowdown``: per task, last end - first start and
      that / instance duration (the reference's definitions; no queueing);
    * ``avg_wait``, ``max_wait``: per task, first start - job submit;
    * ``avg_response``: per task, last end - job submit;
    * ``avg_bounded_slowdown``: per task, max(1, response / max(duration, 10));
    * ``fairness``: Jain's index over the jobs' mean bounded slowdown (the
      trace has no users, so jobs stand in for them; 1 = all slowed alike).
    """

    chunk: int
    chooser: str
    makespan: float
    tasks: tuple[TaskOutcome, ...]

    def _array(self, attribute: str) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
        return np.array([getattr(task, attribute) for task in self.tasks], dtype=np.float64)

    @property
    def avg_completion(self) -> float:
        return sum(t.last_end - t.first_start for t in self.tasks) / len(self.tasks)

    @property
    def avg_slowdown(self) -> float:
        return sum((t.last_end - t.first_start) / t.duration for t in self.tasks) / len(self.tasks)

    @property
    def avg_wait(self) -> float:
        return float(np.mean(self._array("first_start") - self._array("submit")))

    @property
    def max_wait(self) -> float:
        return float(np.max(self._array("first_start") - self._array("submit")))

    @property
    def avg_response(self) -> float:
        return float(np.mean(self._array("last_end") - self._array("submit")))

    def _bounded_slowdowns(self) -> np.ndarray[tuple[int], np.dtype[np.float64]]:
        duration = self._array("duration")
        wait = self._array("last_end") - self._array("submit") - duration
        return bounded_slowdown(wait, duration, BOUND_S)

    @property
    def avg_bounded_slowdown(self) -> float:
        return float(np.mean(self._bounded_slowdowns()))

    @property
    def fairness(self) -> float:
        _, inverse = np.unique(self._array("job_id"), return_inverse=True)
        return jain_index(np.bincount(inverse, self._bounded_slowdowns()) / np.bincount(inverse))

    def metrics(self) -> dict[str, float]:
        """Every metric by name, for tables and JSON."""
        return {name: float(getattr(self, name)) for name in METRICS}


METRICS = (
    "makespan",
    "avg_completion",
    "avg_slowdown",
    "avg_wait",
    "max_wait",
    "avg_response",
    "avg_bounded_slowdown",
    "fairness",
)
"""The metrics of a :class:`ChunkResult`, in table order (the first three are the reference's)."""


def run_chunk(
    jobs: Sequence[BatchJob], chooser: Chooser, seed: int = SEED, chunk_index: int = 0
) -> ChunkResult:
    """Run one chunk to the end under ``chooser``, with the reference's clock; deterministic for a seed."""
    if not jobs:
        raise ModelError("a chunk needs at least one job")
    submits = [job.submit for job in jobs]
    if submits[0] < 0 or submits != sorted(submits):
        raise ModelError(f"a chunk's submit times must be >= 0 and non-decreasing, got {submits}")
    state = _Run(jobs, chooser, np.random.RandomState(seed))
    makespan = state.run()
    return ChunkResult(chunk_index, chooser.name, makespan, tuple(map(_outcome, state.tasks)))


def _outcome(task: _Task) -> TaskOutcome:
    """A finished task's times; every task has started once the run is over."""
    if task.first_start is None:
        raise SimulationError(f"task {task.job.job_id}-{task.spec.task_id} never started")
    job, spec = task.job, task.spec
    return TaskOutcome(job.job_id, spec.task_id, job.submit, task.first_start, task.last_end, spec.duration)


class _Run:
    """One episode: the broker, the scheduler and the instances, driven by a :class:`_Clock`."""

    def __init__(self, jobs: Sequence[BatchJob], chooser: Chooser, rng: np.random.RandomState) -> None:
        self.jobs, self.chooser, self.rng = jobs, chooser, rng
        self.machines = [_Machine() for _ in range(MACHINES)]
        self.tasks: list[_Task] = []
        self.running: list[tuple[int, _Task]] = []
        self.arrived = 0
        self.clock = _Clock()

    def run(self) -> float:
        """Process events until the scheduler sees everything finished; returns that time (the makespan)."""
        self.clock.at(0, _URGENT, "broker")
        self.clock.at(0, _URGENT, "tick")
        while True:
            now, kind, ref = self.clock.pop()
            if kind == "broker":
                self._wait_for_next_job()
            elif kind == "arrive":
                self._arrive()
                self._wait_for_next_job()
            elif kind == "tick":
                if self._finished():
                    return float(now)
                self._decide(now)
                self.clock.at(now + 1, _NORMAL, "tick")
            elif kind == "start":
                self.clock.at(now + self.running[ref][1].spec.duration, _NORMAL, "end", ref)
            else:
                self._end(now, ref)

    def _arrive(self) -> None:
        """The broker adds the job that is due (its wait for the submit time just ended)."""
        job = self.jobs[self.arrived]
        self.tasks.extend(_Task(spec, job) for spec in job.tasks)
        self.arrived += 1

    def _wait_for_next_job(self) -> None:
        """The broker waits until the next job's submit time; after the last job it is done."""
        if self.arrived < len(self.jobs):
            self.clock.at(self.jobs[self.arrived].submit, _NORMAL, "arrive")

    def _finished(self) -> bool:
        return self.arrived == len(self.jobs) and all(task.done for task in self.tasks)

    def _decide(self, now: float) -> None:
        """The scheduler's ``make_decision``: ask until the chooser says None, starting each pick."""
        while True:
            waiting = [task for task in self.tasks if task.started < task.spec.instances]
            snapshot = self._snapshot(now, waiting)
            decision = self.chooser.choose(snapshot, self.rng)
            if decision is None:
                self._check_progress(now, waiting)
                return
            self._start(now, snapshot, decision, waiting)

    def _snapshot(self, now: float, waiting: Sequence[_Task]) -> Snapshot:
        """Immutable views of the machines and waiting tasks, so a chooser cannot change the run."""
        machines = tuple(MachineView(i, m.cpu, m.memory, m.disk) for i, m in enumerate(self.machines))
        tasks = tuple(task.view(i, now) for i, task in enumerate(waiting))
        return Snapshot(now, machines, tasks)

    def _start(self, now: float, snapshot: Snapshot, decision: Decision, waiting: Sequence[_Task]) -> None:
        """Take the resources now and start the instance's process (an urgent event, as in SimPy)."""
        if not (0 <= decision.machine < len(self.machines) and 0 <= decision.task < len(waiting)):
            raise SimulationError(f"{self.chooser.name}: decision {decision} is out of range at t={now}")
        machine, task = self.machines[decision.machine], waiting[decision.task]
        if not fits(snapshot.machines[decision.machine], snapshot.tasks[decision.task]):
            message = f"{self.chooser.name}: task {task.job.job_id}-{task.spec.task_id} does not fit"
            raise SimulationError(f"{message} machine {decision.machine} at t={now}")
        machine.cpu -= task.spec.cpu
        machine.memory -= task.spec.memory
        machine.disk -= task.spec.disk
        task.started += 1
        if task.first_start is None:
            task.first_start = now
        self.running.append((decision.machine, task))
        self.clock.at(now, _URGENT, "start", len(self.running) - 1)

    def _end(self, now: float, ref: int) -> None:
        """An instance ends: free its resources, as ``Machine.stop_task_instance`` does."""
        index, task = self.running[ref]
        machine = self.machines[index]
        machine.cpu += task.spec.cpu
        machine.memory += task.spec.memory
        machine.disk += task.spec.disk
        task.finished += 1
        task.last_end = max(task.last_end, now)

    def _check_progress(self, now: float, waiting: Sequence[_Task]) -> None:
        """Fail instead of ticking forever: work waits, nothing runs and no job is left to arrive."""
        idle = all(task.started == task.finished for task in self.tasks)
        if waiting and idle and self.arrived == len(self.jobs):
            raise SimulationError(f"{self.chooser.name}: waited at t={now} with nothing running or due")


@dataclass(frozen=True)
class Evaluation:
    """One chooser over several chunks: per-chunk results and the mean of each metric."""

    chooser: str
    chunks: tuple[ChunkResult, ...]

    def mean(self) -> dict[str, float]:
        """Each metric of :data:`METRICS` averaged over the chunks (equal weight per chunk)."""
        return {name: float(np.mean([r.metrics()[name] for r in self.chunks])) for name in METRICS}


def evaluate(
    chooser: Chooser, runs: Sequence[tuple[int, Sequence[BatchJob]]], seed: int = SEED
) -> Evaluation:
    """``chooser`` on each ``(chunk index, jobs)``, each run seeded afresh (as the reference does)."""
    if not runs:
        raise ModelError("evaluate needs at least one chunk")
    results = tuple(run_chunk(jobs, chooser, seed, index) for index, jobs in runs)
    return Evaluation(chooser.name, results)
