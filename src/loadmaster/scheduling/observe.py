"""What a learned scheduler sees: node, job and global features of one cycle's snapshot.

One module for both sides of the learned policy: the Gymnasium environment
(``loadmaster.rl.env``) builds its observations here, and the ``learned``
ordering plugin builds the same arrays from the cycle's
:class:`~loadmaster.model.ClusterSnapshot`. Training and serving therefore
cannot drift apart on a feature. Everything here is pure numpy on the
snapshot; nothing reads a clock or a file.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.model import MILLI_PER_GPU, ClusterSnapshot, Job, RunningJob
from loadmaster.model.running import SerialSlots

F32 = npt.NDArray[np.float32]

JOB_FEATURES = ("present", "gpus", "time_limit", "wait", "user_usage", "fits")
"""Columns of a job row, in order."""
HISTORY_FEATURES = ("run_over_limit", "history")
"""Columns of a job's user-history row (:func:`history_features`), in order."""
HISTORY_SEEN = 5
"""Recent finished jobs of a user that ``history`` counts up to (the simulator keeps five)."""
GLOBAL_FEATURES = ("queue_length", "allocation", "day_sin", "day_cos", "jobs_left")
"""Entries of the global vector, in order."""

FEATURE_CAP = 1000.0
"""Upper bound of unbounded features (waits, time limits, queue length): they are clipped to it."""

DAY_S = 86_400.0


@dataclass(frozen=True, slots=True)
class ObservationSpec:
    """How far ahead the node features look and how waits are scaled (shared by env and plugin)."""

    window: int = 64
    """Queue length that counts as a full window (``queue_length`` = waiting / window)."""
    horizon_steps: int = 8
    """Future points of the node features (T)."""
    horizon_step_s: float = 1800.0
    """Spacing of those points; 8 x 30 min looks four hours ahead."""
    wait_scale_s: float = 3600.0
    """Scale of waits (one hour)."""


class NodeRows:
    """Running jobs' placements as flat arrays (node and GPUs of each), kept from cycle to cycle.

    Each job is flattened once, when first seen running, into arrays that grow by doubling; a
    cycle then gathers the rows of the jobs running now, in their order, with a few vectorised
    steps instead of walking every placement of every running job in Python (a large cluster runs
    thousands). Jobs are known by their run's serial number where the snapshot carries them
    (``ClusterSnapshot.running_serials``: all slots in one gather), else by the id of their object,
    which the book keeps alive; those no longer running are dropped once they outnumber the
    running ones.
    """

    def __init__(self) -> None:
        self._slot_of: dict[int, int] = {}
        self._slot_by_serial = SerialSlots()
        self._jobs: list[RunningJob] = []
        self._at = np.zeros(64, dtype=np.int64)
        self._count = np.zeros(64, dtype=np.int64)
        self._end = np.zeros(64, dtype=np.float64)
        self._rows = np.zeros(256, dtype=np.intp)
        self._weights = np.zeros(256, dtype=np.float64)
        self._used = 0

    def _add(self, job: RunningJob, serial: int | None = None) -> int:
        slot = len(self._jobs)
        if slot == len(self._at):
            self._at, self._count, self._end = (
                np.concatenate([a, np.zeros_like(a)]) for a in (self._at, self._count, self._end)
            )
        placements = job.placements
        if self._used + len(placements) > len(self._rows):
            size = max(2 * len(self._rows), self._used + len(placements))
            self._rows = np.concatenate([self._rows, np.zeros(size - len(self._rows), dtype=np.intp)])
            self._weights = np.concatenate([self._weights, np.zeros(size - len(self._weights))])
        used = self._used
        for i, p in enumerate(placements):
            self._rows[used + i] = p.node
            self._weights[used + i] = len(p.gpu_indices) * p.gpu_milli / MILLI_PER_GPU
        self._at[slot], self._count[slot], self._end[slot] = used, len(placements), job.expected_end_s
        self._used += len(placements)
        self._jobs.append(job)
        if serial is None:
            self._slot_of[id(job)] = slot
        else:
            self._slot_by_serial.set(serial, slot)
        return slot

    def arrays(
        self,
        running: list[RunningJob],
        serials: npt.NDArray[np.int64] | None = None,
        *,
        until: float = math.inf,
    ) -> tuple[npt.NDArray[np.intp], npt.NDArray[np.float64], npt.NDArray[np.intp], npt.NDArray[np.float64]]:
        """The placements of the jobs of ``running`` expected to end by ``until``, in order: node and
        GPUs of each, the index of the job each belongs to among those, and each one's expected
        end. ``serials``: the runs' serial numbers in the same order (the snapshot's
        ``running_serials``), when the driver gives them."""
        if len(self._jobs) > 2 * len(running) + 1024:
            self.__init__()  # type: ignore[misc]
        if serials is not None:
            index = self._slot_by_serial.get(serials)
            for i in np.flatnonzero(index < 0).tolist():  # jobs new to the book: a few per cycle
                index[i] = self._add(running[i], int(serials[i]))
        else:
            slots: list[int | None] = list(map(self._slot_of.get, map(id, running)))
            if None in slots:
                slots = [
                    self._add(job) if slot is None else slot for job, slot in zip(running, slots, strict=True)
                ]
            index = np.array(slots, dtype=np.int64)
        if until < math.inf:
            index = index[self._end[index] <= until]  # jobs in order, as every later step keeps them
        counts = self._count[index]
        upto = np.zeros(len(index) + 1, dtype=np.int64)
        np.cumsum(counts, out=upto[1:])
        rows_at = np.repeat(self._at[index] - upto[:-1], counts)
        rows_at += np.arange(upto[-1])
        owners = np.repeat(np.arange(len(index)), counts)
        return self._rows[rows_at], self._weights[rows_at], owners, self._end[index]


def node_features(
    snapshot: ClusterSnapshot, now: float, spec: ObservationSpec, book: NodeRows | None = None
) -> F32:
    """Free GPUs / GPUs of each node now and at now + h x step (h = 1..T), as running jobs
    reach their time limits (what a scheduler can know); shape (nodes, T + 1), in [0, 1].

    ``book`` (kept by the caller from cycle to cycle) holds the running jobs' placements as
    arrays (:class:`NodeRows`); without one, a fresh book is made for the call.
    """
    node_gpus = np.maximum(snapshot.nodes.gpus, 1).astype(np.float64)
    free = np.asarray(snapshot.free_milli, dtype=np.float64) / MILLI_PER_GPU
    points = now + spec.horizon_step_s * np.arange(spec.horizon_steps + 1)
    released = np.zeros((len(free), len(points)))
    running = list(snapshot.running)
    if running:
        # Serials only for a kept book: a fresh one adds every job anyway, and by object is cheaper.
        # Only placements of jobs that end within the horizon add anything (the others would add
        # +0.0, which changes no sum): on a large cluster, a small part of the running jobs, so the
        # book gathers only theirs, in the same order.
        horizon = float(points[-1])
        rows, weights, owners, ends = (
            book.arrays(running, snapshot.serials(), until=horizon)
            if book is not None
            else NodeRows().arrays(running, until=horizon)
        )
        after = (points >= ends[:, None]) & (points > now)
        added = after[owners] * weights[:, None]
        # One placement after another into each node's sum, in the jobs' and placements' order
        # (np.bincount accumulates its weights in input order, as a loop over them would): every
        # sum is made in the same order, to the bit, as adding the placements one by one.
        for column in range(len(points)):
            released[:, column] = np.bincount(rows, weights=added[:, column], minlength=len(free))
    features = (free[:, None] + released) / node_gpus[:, None]
    return np.clip(features, 0.0, 1.0).astype(np.float32)


def user_shares(usage_gpu_s: Mapping[str, float], users: set[str]) -> dict[str, float]:
    """Each user's share of the decayed past GPU use of all users, in [0, 1] (0 with no history)."""
    total = sum(v for k, v in usage_gpu_s.items() if k.startswith("user/"))
    if total <= 0:
        return dict.fromkeys(users, 0.0)
    return {u: min(max(usage_gpu_s.get(f"user/{u}", 0.0) / total, 0.0), 1.0) for u in users}


def job_features(
    jobs: Sequence[Job],
    snapshot: ClusterSnapshot,
    now: float,
    spec: ObservationSpec,
    *,
    fits: Sequence[bool] | npt.NDArray[np.bool_] | None = None,
    rows: int | None = None,
) -> F32:
    """One row per job (:data:`JOB_FEATURES`), zero-padded to ``rows`` (default: one per job).

    ``gpus`` is the job's GPUs over the largest node's GPUs, ``time_limit`` its
    requested time in hours (the scheduler never knows the true duration),
    ``wait`` its wait so far over ``wait_scale_s``, ``user_usage`` its user's
    share of decayed past use, ``fits`` whether it can start now (0 where the
    caller does not know).
    """
    largest = float(max(int(snapshot.nodes.gpus.max(initial=0)), 1))
    shares = user_shares(snapshot.usage_gpu_s, {job.user for job in jobs})
    out = np.zeros((len(jobs) if rows is None else rows, len(JOB_FEATURES)), dtype=np.float32)
    for i, job in enumerate(jobs):
        out[i] = (
            1.0,
            job.gpus / largest,
            job.time_limit_s / 3600.0,
            max(now - job.submit_s, 0.0) / spec.wait_scale_s,
            shares[job.user],
            float(fits[i]) if fits is not None else 0.0,
        )
    return np.minimum(out, FEATURE_CAP)


def history_features(jobs: Sequence[Job], snapshot: ClusterSnapshot) -> F32:
    """One row per job (:data:`HISTORY_FEATURES`): what its user's recent finished jobs say.

    ``run_over_limit`` is the median, over the user's recent finished jobs (at most
    :data:`HISTORY_SEEN`), of run time over requested time limit, clipped to [0, 1] (a job runs no
    longer than its limit); the median, because one crashed job should not make a user look
    short. ``history`` is how many such jobs are known, over :data:`HISTORY_SEEN` (a confidence).
    A user with none (or a driver that keeps no limits) gets the neutral row (1, 0): the limit is
    then the best guess of the run time, as for shortest-requested-time-first.
    """
    out = np.zeros((len(jobs), len(HISTORY_FEATURES)), dtype=np.float32)
    seen: dict[str, tuple[float, float]] = {}
    for i, job in enumerate(jobs):
        row = seen.get(job.user)
        if row is None:
            row = seen[job.user] = _user_history(
                snapshot.recent_runtimes_s.get(job.user, ()), snapshot.recent_limits_s.get(job.user, ())
            )
        out[i] = row
    return out


def _user_history(runs: Sequence[float], limits: Sequence[float]) -> tuple[float, float]:
    pairs = min(len(runs), len(limits), HISTORY_SEEN)
    if pairs == 0:
        return (1.0, 0.0)
    ratios = [r / max(lim, 1.0) for r, lim in zip(runs[-pairs:], limits[-pairs:], strict=True)]
    return (min(max(float(np.median(ratios)), 0.0), 1.0), pairs / HISTORY_SEEN)


def global_features(
    snapshot: ClusterSnapshot, now: float, spec: ObservationSpec, jobs_left: float = 0.0
) -> F32:
    """``queue_length`` (waiting / window), ``allocation`` (busy GPU fraction), time of day as
    sine and cosine, and ``jobs_left`` (an episode's unstarted fraction; 0 outside training)."""
    total = float(snapshot.nodes.gpus.sum())
    busy = total - float(np.sum(snapshot.free_milli)) / MILLI_PER_GPU
    angle = 2 * math.pi * (now % DAY_S) / DAY_S
    return np.array(
        [
            min(len(snapshot.pending) / spec.window, FEATURE_CAP),
            min(max(busy / total, 0.0), 1.0) if total > 0 else 0.0,
            math.sin(angle),
            math.cos(angle),
            jobs_left,
        ],
        dtype=np.float32,
    )
