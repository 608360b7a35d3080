"""The simulator stepped in wall-clock time: the live demo cluster behind ``loadmaster serve --demo``.

:class:`LiveSimulator` is :class:`~loadmaster.sim.Simulator` driven one
:meth:`~loadmaster.sim.Simulator.step` at a time, the same loop body
``Simulator.run`` uses (pop the due events, carry them out, run one cycle of
the same :class:`~loadmaster.scheduling.Scheduler`, bind):
:meth:`LiveSimulator.advance_to` steps only up to a time, so a background task can move simulated time
forward as the wall clock ticks. There is no second scheduler and no second
copy of the event handlers.

Beside the simulator's state it keeps what a dashboard needs and a batch run
does not: which job holds each GPU (``owner``), where every job that ever ran
was placed, and a ring of past ownership frames for the time scrubber.
"""

from __future__ import annotations

import math
from collections import deque
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.model import NodeTable, PendingJob, RunningJob, TaskPlacement, TraceJob
from loadmaster.scheduling import Scheduler, Status
from loadmaster.sim import SimOptions, Simulator

IntGrid = npt.NDArray[np.int32]

FREE = -1
"""``owner`` value of a GPU that no job holds."""


@dataclass(frozen=True)
class Frame:
    """Who held each GPU at one past time: ``owner[node, gpu]`` is a job number or :data:`FREE`."""

    time_s: float
    owner: IntGrid


@dataclass(frozen=True)
class JobRecord:
    """Where a job ran and when; kept after it ends so its telemetry can still be read."""

    number: int
    placements: tuple[TaskPlacement, ...]
    start_s: float
    end_s: float | None = None


class LiveSimulator(Simulator):
    """A :class:`Simulator` advanced step by step; see the module docstring.

    ``history_s`` of ownership frames are kept, one every ``frame_step_s``
    simulated seconds. Job numbers are indices into ``self.jobs`` (submission
    order), so an ``owner`` grid is a plain int32 array.
    """

    def __init__(
        self,
        nodes: NodeTable,
        scheduler: Scheduler,
        jobs: Sequence[TraceJob],
        options: SimOptions,
        *,
        history_s: float = 6 * 3600.0,
        frame_step_s: float = 300.0,
    ) -> None:
        super().__init__(nodes, scheduler, jobs, options)
        self.start()
        self.now_s = self.jobs[0].job.submit_s if self.jobs else 0.0
        self.owner: IntGrid = np.full((len(nodes), nodes.max_gpus), FREE, dtype=np.int32)
        self.records: dict[str, JobRecord] = {}
        self._open: set[str] = set()
        self.frame_step_s = frame_step_s
        self.frames: deque[Frame] = deque(maxlen=max(1, math.ceil(history_s / frame_step_s)) + 1)
        self.version = 0
        """Bumped whenever the visible state changes, so readers can cache what they derive from it."""

    def advance_to(self, until_s: float) -> int:
        """Carry out every event due up to ``until_s`` and move the clock there; return the steps run."""
        steps = 0
        while self.events and self.events.next_time() <= until_s:
            self._frame_until(self.events.next_time())
            self.now_s = self.step()
            steps += 1
        self._frame_until(until_s)
        if until_s > self.now_s:
            self.now_s = until_s
            self.version += 1
        if steps:
            self._refresh_owner()
        return steps

    def evict_now(self, job_id: str, reason: str) -> bool:
        """:meth:`Simulator.evict` at the live clock's now; the ownership grid follows at once."""
        if not self.evict(job_id, reason, self.now_s):
            return False
        self._refresh_owner()
        return True

    def _frame_until(self, time_s: float) -> None:
        """Record ownership frames for every frame time passed before ``time_s`` (state before it)."""
        last = self.frames[-1].time_s if self.frames else None
        next_s = self.now_s if last is None else last + self.frame_step_s
        if next_s <= time_s:
            self._refresh_owner()
            while next_s <= time_s:
                self.frames.append(Frame(next_s, self.owner.copy()))
                next_s += self.frame_step_s

    def _refresh_owner(self) -> None:
        owner = np.full_like(self.owner, FREE)
        for job_id, running in self.cluster.running.items():
            record = self._record(job_id, running)
            self._mark(owner, running.placements, record.number)
        for job_id, pending in self.cluster.pending.items():
            if pending.bound:
                self._mark(owner, pending.bound, self.index[job_id])
        for job_id in [j for j in self._open if j not in self.cluster.running]:
            record = self.records[job_id]
            end = float(self.log.end[record.number])
            self.records[job_id] = JobRecord(
                record.number, record.placements, record.start_s, self.now_s if math.isnan(end) else end
            )
            self._open.discard(job_id)
        self.owner = owner
        self.version += 1

    def _record(self, job_id: str, running: RunningJob) -> JobRecord:
        record = self.records.get(job_id)
        if record is None or record.start_s != running.start_s:
            record = JobRecord(self.index[job_id], running.placements, running.start_s)
            self.records[job_id] = record
            self._open.add(job_id)
        return record

    @staticmethod
    def _mark(owner: IntGrid, placements: Sequence[TaskPlacement], number: int) -> None:
        for p in placements:
            owner[p.node, list(p.gpu_indices)] = number

    def frame_at(self, time_s: float) -> Frame:
        """The ownership frame nearest before ``time_s`` (the oldest kept when it is older)."""
        if time_s >= self.now_s or not self.frames:
            return Frame(self.now_s, self.owner)
        frames = tuple(self.frames)  # a copy: the stepper may append while a request reads
        best = frames[0]
        for frame in frames:
            if frame.time_s > time_s:
                break
            best = frame
        return best

    def status(self, pending: PendingJob) -> Status | None:
        """Why a pending job waited in the last cycle (None before its first cycle)."""
        return self._status(pending.job)

    def estimated_start(self, job_id: str) -> float | None:
        """The start a reservation promised the job, if any."""
        pending = self.cluster.pending.get(job_id)
        status = self.status(pending) if pending is not None else None
        if status is not None and status.estimated_start_s is not None:
            return status.estimated_start_s
        value = float(self.log.estimated_start[self.index[job_id]])
        return None if math.isnan(value) else value
