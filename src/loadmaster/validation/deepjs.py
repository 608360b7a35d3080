"""The DeepJS evaluation setup (CloudSimPy ``playground/Non_DAG``), re-implemented exactly.

DeepJS (Li et al., 2019) trains and compares job schedulers on chunks of 10
consecutive jobs of the Alibaba 2017 batch trace, on 5 machines of (64 CPU,
1 memory, 1 disk). A job is a list of tasks; a task is N identical *instances*
(CPU, memory, disk, duration). Every decision starts one instance of one task
on one machine. This module reruns that setup with the reference's exact
semantics, so that a learned scheduler can be compared on the same chunks with
the same numbers as CloudSimPy's Random, FirstFit and Tetris
(``data/reference/cloudsimpy/reference_runs_heuristics.json``).

It does not go through :mod:`loadmaster.sim`: the reference's clock (a
scheduler tick every time unit, SimPy's event order at equal times, float
resource bookkeeping) decides its numbers, and it is simpler to reproduce it
in a small loop than to bend the GPU simulator into it. docs/deepjs.md explains
the semantics and quirks; the points that decide the numbers are:

* jobs are grouped by ``job_id`` in order of first appearance, take the submit
  time of their *last* row, and are sorted stably by submit time; chunk ``k``
  is jobs ``10k .. 10k+9`` with submit times rebased to its first job;
* the scheduler runs at t = 0, 1, 2, ...; at each tick it asks the policy for
  a (machine, task) pair and starts the task's next instance until the policy
  says none; an instance finishes ``duration`` later (a float time) and frees
  its resources then;
* at equal times events run in SimPy order: (time, priority, creation order),
  which decides whether a job submitted at t, or an instance ending exactly at
  t, is seen by the tick at t (:class:`_Clock`);
* the run ends at the first tick that sees every job finished: that tick is
  the makespan;
* ``avg_completion`` and ``avg_slowdown`` are per *task*: (last instance end -
  first instance start) and that divided by the instance duration, so time
  queued before a task's first instance starts is not counted. We also report
  metrics that count it (``avg_response``, ``avg_wait``, ...).

The policy is a :class:`Chooser`; the reference's heuristics are
:class:`RandomChooser`, :class:`FirstFitChooser` and :class:`TetrisChooser`
with their quirks, and :class:`SJFChooser` is a job-ordering baseline.
"""

from __future__ import annotations

import csv
import heapq
import json
import math
import sys
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Protocol, TextIO

import numpy as np

from loadmaster.errors import ModelError, SimulationError
from loadmaster.metrics.summary import bounded_slowdown, jain_index
from loadmaster.traces import TraceError

MACHINES = 5
"""Machines in the DeepJS setup (``machines_number`` in CloudSimPy's launch scripts)."""
MACHINE_CPU = 64.0
"""CPU of each machine (``MachineConfig(64, 1, 1)``); task CPU is in cores (0.5, 1, ...)."""
MACHINE_MEMORY = 1.0
"""Memory of each machine, normalised: task memory is a fraction of a machine."""
MACHINE_DISK = 1.0
"""Disk of each machine, normalised (every task in the trace asks for 0)."""
CHUNK_JOBS = 10
"""Jobs per chunk (``jobs_len``)."""
REFERENCE_CHUNKS = 10
"""Chunks 0..9 are the ones the reference file covers."""
SEED = 41
"""``np.random.seed(41)`` in the reference launch scripts, set before each run."""
RANDOM_THRESHOLD = 0.8
"""RandomAlgorithm's default ``threshold``: a fitting pair is taken when a draw exceeds it."""
BOUND_S = 10.0
"""Bounded slowdown's floor on the run time, as elsewhere in loadmaster."""
TOLERANCE = 0.5e-4 + 1e-9
"""The reference rounds averages to 4 decimals: a difference up to half a unit there is a match."""

_COLUMNS = ("submit_time", "duration", "cpu", "memory", "job_id", "task_id", "instances_num", "disk")
"""Columns jobs.csv must have (an unnamed index column in front is ignored)."""


# ---------------------------------------------------------------- input


@dataclass(frozen=True, slots=True)
class TaskSpec:
    """One task: ``instances`` identical instances, each needing these resources for ``duration``."""

    task_id: int
    instances: int
    cpu: float
    memory: float
    disk: float
    duration: float


@dataclass(frozen=True, slots=True)
class JobSpec:
    """One job: submit time (trace time units; rebased to 0 in a chunk) and its tasks in file order."""

    job_id: int
    submit: int
    tasks: tuple[TaskSpec, ...]


def read_jobs(path: Path) -> tuple[JobSpec, ...]:
    """Every job of a CloudSimPy ``jobs.csv``, grouped and ordered as CloudSimPy's ``CSVReader`` does.

    Rows are grouped by ``job_id`` in order of first appearance; a job takes
    the submit time of its last row (the reference overwrites it row by row)
    and the jobs are sorted stably by submit time. Raises :class:`TraceError`
    naming the file, line and field for a missing column, an unparsable or
    out-of-range value, a task listed twice in a job, or a task that could not
    fit on an empty machine (the reference would loop forever on it).
    """
    source = str(path)
    try:
        with path.open(newline="") as handle:
            jobs = _group(source, _rows(source, handle))
    except OSError as error:
        raise TraceError(source, None, "", f"cannot read: {error.strerror or error}") from error
    if not jobs:
        raise TraceError(source, None, "", "no jobs in the file")
    return tuple(sorted(jobs, key=lambda job: job.submit))


def chunk(jobs: Sequence[JobSpec], index: int, size: int = CHUNK_JOBS) -> tuple[JobSpec, ...]:
    """Chunk ``index``: jobs ``index*size`` up to ``size`` of them, submit times rebased to the first.

    Like ``CSVReader.generate(index*size, size)``; the last chunk may be short.
    """
    offset = index * size
    if index < 0 or size < 1 or offset >= len(jobs):
        raise ModelError(f"chunk {index} of {size} jobs: the trace has {len(jobs)} jobs")
    part = jobs[offset : offset + size]
    base = part[0].submit
    return tuple(JobSpec(job.job_id, job.submit - base, job.tasks) for job in part)


def chunks(
    jobs: Sequence[JobSpec], indices: Sequence[int] = range(REFERENCE_CHUNKS)
) -> list[tuple[int, tuple[JobSpec, ...]]]:
    """``(index, chunk)`` for each index (default: the 10 the reference covers), as :func:`evaluate` takes."""
    return [(i, chunk(jobs, i)) for i in indices]


@dataclass(frozen=True, slots=True)
class _Row:
    line: int
    job_id: int
    submit: int
    task: TaskSpec


def _rows(source: str, handle: TextIO) -> Iterator[_Row]:
    """Parse and check each data row; the header decides the column positions."""
    reader = csv.reader(handle)
    header = next(reader, None)
    if header is None:
        raise TraceError(source, 1, "header", "empty file; expected a header with " + ", ".join(_COLUMNS))
    missing = [name for name in _COLUMNS if name not in header]
    if missing:
        raise TraceError(source, 1, "header", f"missing column(s) {', '.join(missing)}")
    at = {name: header.index(name) for name in _COLUMNS}
    for values in reader:
        line = reader.line_num
        if not values:
            continue
        if len(values) != len(header):
            raise TraceError(source, line, "", f"{len(values)} fields, the header has {len(header)}")
        yield _parse(source, line, {name: values[i] for name, i in at.items()})


def _parse(source: str, line: int, raw: Mapping[str, str]) -> _Row:
    """One row into typed values, with the reason when a value is not allowed."""

    def integer(name: str, low: int) -> int:
        try:
            value = int(raw[name])
        except ValueError:
            raise TraceError(source, line, name, f"{raw[name]!r} is not an integer") from None
        if value < low:
            raise TraceError(source, line, name, f"{value} is below the minimum {low}")
        return value

    def number(name: str, low: float, high: float, strict_low: bool = False) -> float:
        try:
            value = float(raw[name])
        except ValueError:
            raise TraceError(source, line, name, f"{raw[name]!r} is not a number") from None
        too_low = value <= low if strict_low else value < low
        if not math.isfinite(value) or too_low or value > high:
            allowed = f"{'>' if strict_low else '>='} {low:g} and <= {high:g}"
            raise TraceError(source, line, name, f"{raw[name]!r} is not allowed; must be {allowed}")
        return value

    task = TaskSpec(
        task_id=integer("task_id", 0),
        instances=integer("instances_num", 1),
        cpu=number("cpu", 0.0, MACHINE_CPU),
        memory=number("memory", 0.0, MACHINE_MEMORY),
        disk=number("disk", 0.0, MACHINE_DISK),
        duration=number("duration", 0.0, math.inf, strict_low=True),
    )
    return _Row(line, integer("job_id", 0), integer("submit_time", 0), task)


def _group(source: str, rows: Iterator[_Row]) -> list[JobSpec]:
    """Rows into jobs, in order of each job's first row; the last row's submit time wins."""
    tasks: dict[int, list[TaskSpec]] = {}
    submit: dict[int, int] = {}
    for row in rows:
        listed = tasks.setdefault(row.job_id, [])
        if any(task.task_id == row.task.task_id for task in listed):
            message = f"task {row.task.task_id} of job {row.job_id} is listed twice"
            raise TraceError(source, row.line, "task_id", message)
        listed.append(row.task)
        submit[row.job_id] = row.submit
    return [JobSpec(job_id, submit[job_id], tuple(listed)) for job_id, listed in tasks.items()]


# ---------------------------------------------------------------- the chooser interface


@dataclass(frozen=True, slots=True)
class MachineView:
    """A machine as a chooser sees it: free resources now (floats, as the reference keeps them)."""

    index: int
    cpu: float
    memory: float
    disk: float
    cpu_capacity: float = MACHINE_CPU
    memory_capacity: float = MACHINE_MEMORY
    disk_capacity: float = MACHINE_DISK


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task with instances still waiting; all its instances are alike, so a chooser picks the task.

    ``waited`` is now - the job's submit time, in trace time units.
    """

    index: int
    job_id: int
    task_id: int
    cpu: float
    memory: float
    disk: float
    duration: float
    instances: int
    waiting_instances: int
    running_instances: int
    submit: int
    waited: float


def fits(machine: MachineView, task: TaskView) -> bool:
    """Whether one instance of ``task`` fits the free resources of ``machine`` (``Machine.accommodate``)."""
    return machine.cpu >= task.cpu and machine.memory >= task.memory and machine.disk >= task.disk


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a chooser may look at: the time, every machine, and the tasks with waiting instances.

    Tasks come in the reference's order: jobs by arrival, tasks in file order.
    """

    now: float
    machines: tuple[MachineView, ...]
    tasks: tuple[TaskView, ...]

    def pairs(self) -> Iterator[tuple[MachineView, TaskView]]:
        """Every fitting (machine, task) pair, machine-major as the reference enumerates them."""
        for machine in self.machines:
            for task in self.tasks:
                if fits(machine, task):
                    yield machine, task


@dataclass(frozen=True, slots=True)
class Decision:
    """Start one instance of ``snapshot.tasks[task]`` on ``snapshot.machines[machine]`` (indices)."""

    machine: int
    task: int


class Chooser(Protocol):
    """A DeepJS policy: called again and again at each tick until it returns None.

    Every call after a decision sees the resources that decision took. It
    must return a pair that fits (checked; a misfit raises
    :class:`SimulationError`). ``rng`` is a legacy ``RandomState`` seeded per
    run, because the reference's Random draws from ``np.random`` after
    ``np.random.seed(41)``; a chooser that needs no randomness ignores it.
    """

    @property
    def name(self) -> str:
        """The name in result tables."""
        ...

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The next instance to start, or None to wait for the next tick."""
        ...


@dataclass(frozen=True)
class FirstFitChooser:
    """CloudSimPy's FirstFitAlgorithm: for each machine, the first task that fits; the LAST such machine wins.

    Its loop only breaks out of the inner (task) loop, so later machines
    overwrite the pick: in effect "last machine with room, first task there".
    """

    name: str = "FirstFit"

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The reference's pick, quirk included."""
        picked = None
        for machine in snapshot.machines:
            task = next((t for t in snapshot.tasks if fits(machine, t)), None)
            if task is not None:
                picked = Decision(machine.index, task.index)
        return picked


@dataclass(frozen=True)
class RandomChooser:
    """CloudSimPy's RandomAlgorithm: one ``rng.rand()`` per fitting pair, machine-major.

    Within a machine the first pair whose draw exceeds ``threshold`` is taken
    and the rest of that machine skipped; later machines may overwrite it
    (inner break only). If no draw exceeded it, one ``rng.randint`` picks
    uniformly among all fitting pairs. The draws are the reference's, in its
    order, so the same seed gives its exact choices.
    """

    threshold: float = RANDOM_THRESHOLD
    name: str = "Random"

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The reference's pick with the reference's draws."""
        candidates: list[Decision] = []
        picked = None
        for machine in snapshot.machines:
            for task in snapshot.tasks:
                if fits(machine, task):
                    candidates.append(Decision(machine.index, task.index))
                    if rng.rand() > self.threshold:
                        picked = candidates[-1]
                        break
        if not candidates or picked is not None:
            return picked
        return candidates[int(rng.randint(0, len(candidates)))]


@dataclass(frozen=True)
class TetrisChooser:
    """CloudSimPy's Tetris: the fitting pair with the largest free-(cpu, memory) . task-(cpu, memory).

    Ties go to the first pair in machine-major order (``np.argmax``). Disk is
    not in the score, as in the reference.
    """

    name: str = "Tetris"

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The best-aligned pair, or None when nothing fits."""
        best, best_score = None, -math.inf
        for machine, task in snapshot.pairs():
            score = machine.cpu * task.cpu + machine.memory * task.memory
            if score > best_score:
                best, best_score = Decision(machine.index, task.index), score
        return best


@dataclass(frozen=True)
class SJFChooser:
    """Shortest instance duration first, on the first machine it fits (not a reference policy).

    Among tasks that fit somewhere, the one with the shortest duration (ties:
    earlier job, then file order) goes to the lowest-numbered machine with
    room. Tasks that fit nowhere do not block the others. It is the
    job-ordering baseline a learned policy should beat.
    """

    name: str = "SJF"

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The shortest task that fits, first fit."""
        for task in sorted(snapshot.tasks, key=lambda t: t.duration):
            machine = next((m for m in snapshot.machines if fits(m, task)), None)
            if machine is not None:
                return Decision(machine.index, task.index)
        return None


def heuristics() -> tuple[Chooser, ...]:
    """The reference's three heuristics and the SJF baseline, in table order."""
    return (RandomChooser(), FirstFitChooser(), TetrisChooser(), SJFChooser())


# ---------------------------------------------------------------- the loop


@dataclass
class _Task:
    """A task's run-time state."""

    spec: TaskSpec
    job: JobSpec
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
    jobs: Sequence[JobSpec], chooser: Chooser, seed: int = SEED, chunk_index: int = 0
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

    def __init__(self, jobs: Sequence[JobSpec], chooser: Chooser, rng: np.random.RandomState) -> None:
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


def evaluate(chooser: Chooser, runs: Sequence[tuple[int, Sequence[JobSpec]]], seed: int = SEED) -> Evaluation:
    """``chooser`` on each ``(chunk index, jobs)``, each run seeded afresh (as the reference does)."""
    if not runs:
        raise ModelError("evaluate needs at least one chunk")
    results = tuple(run_chunk(jobs, chooser, seed, index) for index, jobs in runs)
    return Evaluation(chooser.name, results)


# ---------------------------------------------------------------- the reference


@dataclass(frozen=True)
class ReferenceRun:
    """One reference run: a CloudSimPy heuristic on one chunk (averages rounded to 4 decimals)."""

    chunk: int
    policy: str
    makespan: float
    avg_completion: float
    avg_slowdown: float


REFERENCE_METRICS = ("makespan", "avg_completion", "avg_slowdown")
"""The metrics the reference file gives."""


def read_reference(path: Path) -> dict[tuple[int, str], ReferenceRun]:
    """The reference runs keyed by (chunk, policy); :class:`TraceError` names a malformed entry."""
    source = str(path)
    try:
        document = json.loads(path.read_text())
    except OSError as error:
        raise TraceError(source, None, "", f"cannot read: {error.strerror or error}") from error
    except ValueError as error:
        raise TraceError(source, None, "", f"not JSON: {error}") from error
    runs = document.get("runs") if isinstance(document, dict) else None
    if not isinstance(runs, list) or not runs:
        raise TraceError(source, None, "runs", "expected a non-empty list of runs")
    parsed = [_reference_run(source, i, entry) for i, entry in enumerate(runs)]
    return {(run.chunk, run.policy): run for run in parsed}


def _reference_run(source: str, index: int, entry: object) -> ReferenceRun:
    """One entry of ``runs``, each field checked."""
    where = f"runs[{index}]"
    if not isinstance(entry, dict):
        raise TraceError(source, None, where, f"expected an object, got {entry!r}")

    def value(name: str) -> float:
        item = entry.get(name)
        if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
            raise TraceError(source, None, f"{where}.{name}", f"expected a finite number, got {item!r}")
        return float(item)

    policy = entry.get("policy")
    if not isinstance(policy, str):
        raise TraceError(source, None, f"{where}.policy", f"expected a name, got {policy!r}")
    metrics = [value(name) for name in REFERENCE_METRICS]
    return ReferenceRun(int(value("chunk")), policy, *metrics)


@dataclass(frozen=True)
class Comparison:
    """Ours against the reference for one (chunk, policy): the largest difference over the three metrics."""

    chunk: int
    policy: str
    ours: dict[str, float]
    reference: ReferenceRun

    @property
    def max_difference(self) -> float:
        return max(abs(self.ours[name] - float(getattr(self.reference, name))) for name in REFERENCE_METRICS)

    @property
    def matches(self) -> bool:
        """Makespan equal, averages within :data:`TOLERANCE` (the reference's rounding)."""
        return self.ours["makespan"] == self.reference.makespan and self.max_difference <= TOLERANCE


def compare(
    evaluations: Sequence[Evaluation], reference: Mapping[tuple[int, str], ReferenceRun]
) -> list[Comparison]:
    """Every run that the reference also has, in the order of ``evaluations``."""
    return [
        Comparison(result.chunk, result.chooser, result.metrics(), reference[result.chunk, result.chooser])
        for evaluation in evaluations
        for result in evaluation.chunks
        if (result.chunk, result.chooser) in reference
    ]


def reproduce(
    jobs_csv: Path,
    choosers: Sequence[Chooser] | None = None,
    indices: Sequence[int] = range(REFERENCE_CHUNKS),
) -> list[Evaluation]:
    """Each chooser (default: :func:`heuristics`) on the chunks at ``indices`` of ``jobs_csv``."""
    runs = chunks(read_jobs(jobs_csv), indices)
    return [evaluate(chooser, runs) for chooser in choosers or heuristics()]


def table(evaluations: Sequence[Evaluation], comparisons: Sequence[Comparison]) -> str:
    """A Markdown table: mean of each metric per chooser, and matched reference runs."""
    header = ["chooser", *METRICS, "matches reference"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for evaluation in evaluations:
        mine = [c for c in comparisons if c.policy == evaluation.chooser]
        matched = f"{sum(c.matches for c in mine)}/{len(mine)}" if mine else "n/a"
        means = [f"{value:.4f}" for value in evaluation.mean().values()]
        lines.append("| " + " | ".join([evaluation.chooser, *means, matched]) + " |")
    return "\n".join(lines)


def reference_table(comparisons: Sequence[Comparison]) -> str:
    """A Markdown table of the reference's three metrics, mean over chunks: ours / reference, per policy."""
    lines = [
        "| policy | " + " | ".join(REFERENCE_METRICS) + " |",
        "|" + "---|" * (len(REFERENCE_METRICS) + 1),
    ]
    for policy in dict.fromkeys(c.policy for c in comparisons):
        mine = [c for c in comparisons if c.policy == policy]
        ours = [np.mean([c.ours[name] for c in mine]) for name in REFERENCE_METRICS]
        theirs = [np.mean([getattr(c.reference, name) for c in mine]) for name in REFERENCE_METRICS]
        cells = [f"{a:.4f} / {b:.4f}" for a, b in zip(ours, theirs, strict=True)]
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)


def main(argv: Sequence[str]) -> int:
    """``python -m loadmaster.validation.deepjs [DATA_DIR]``: the table, then any mismatching run."""
    data = Path(argv[0]) if argv else Path("data/reference/cloudsimpy")
    evaluations = reproduce(data / "jobs.csv")
    comparisons = compare(evaluations, read_reference(data / "reference_runs_heuristics.json"))
    print(table(evaluations, comparisons), reference_table(comparisons), sep="\n\n")
    for c in comparisons:
        if not c.matches:
            print(f"chunk {c.chunk} {c.policy}: ours {c.ours} reference {c.reference}")
    return 0 if all(c.matches for c in comparisons) else 1


if __name__ == "__main__":
    sys.exit(main(sys.argv[1:]))
