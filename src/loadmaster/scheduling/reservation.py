"""Reservations in time: when a waiting job can start at the earliest, and on which GPUs.

The future is read from running jobs' expected ends (start + estimated run
time) and from reservations already made: a reservation holds its resources
over [start, end). Finding a job's earliest start scans candidate times
(now, each expected end, each reservation end) in order and places the job on
the cluster as it will be then, less the reservations that overlap the job's
own run.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadmaster.model import PendingJob, RunningJob, TaskPlacement
from loadmaster.scheduling import fit
from loadmaster.scheduling.framework import BoolArray, CycleContext, PlaceGangPlugin
from loadmaster.scheduling.placement import Scoring, place_job
from loadmaster.scheduling.state import WorkingState


@dataclass(frozen=True, slots=True)
class Reservation:
    """Resources held for ``job_id`` over [start_s, end_s)."""

    job_id: str
    start_s: float
    end_s: float
    placements: tuple[TaskPlacement, ...]

    def overlaps(self, start_s: float, end_s: float) -> bool:
        """True if the reservation holds its resources at some time in [start_s, end_s)."""
        return self.start_s < end_s and start_s < self.end_s


@dataclass(frozen=True, slots=True)
class Release:
    """A running job's resources coming back at ``end_s`` (its expected end, never before now)."""

    end_s: float
    placements: tuple[TaskPlacement, ...]


def releases(running: Sequence[RunningJob], now: float, estimate: dict[str, float]) -> list[Release]:
    """Running jobs' expected ends in time order; an overdue job is expected to end now."""
    ends = [
        Release(max(r.start_s + estimate.get(r.job.id, r.job.time_limit_s), now), r.placements)
        for r in running
    ]
    ends.sort(key=lambda release: release.end_s)
    return ends


def without(
    state: WorkingState, reservations: Sequence[Reservation], start_s: float, end_s: float
) -> WorkingState:
    """A copy of ``state`` less the reservations that overlap [start_s, end_s)."""
    view = state.copy()
    for reservation in reservations:
        if reservation.overlaps(start_s, end_s):
            view.subtract(reservation.placements)
    return view


@dataclass(frozen=True, slots=True)
class Placer:
    """What placing a job needs besides the state: its allowed nodes, the scoring and the topology rule."""

    allowed: BoolArray
    scoring: Scoring
    topology: PlaceGangPlugin | None


def earliest_start(
    pending: PendingJob,
    run_s: float,
    *,
    ctx: CycleContext,
    ends: Sequence[Release],
    reservations: Sequence[Reservation],
    placer: Placer,
) -> Reservation | None:
    """The first time from ``ctx.now`` at which ``pending`` fits for ``run_s`` seconds, or None.

    Scans the candidate times in order on a copy of the cycle's state that
    gains each release as its time passes; a cheap capacity count rules out
    most candidates before a full gang placement is tried.
    """
    future = ctx.state.copy()
    request = pending.job.request
    need = pending.tasks_left
    times = sorted({e.end_s for e in ends} | {r.end_s for r in reservations if r.end_s > ctx.now})
    next_release = 0
    for time_s in times:
        while next_release < len(ends) and ends[next_release].end_s <= time_s:
            for placement in ends[next_release].placements:
                future.release(placement)
            next_release += 1
        view = without(future, reservations, time_s, time_s + run_s)
        capacity = np.where(placer.allowed, fit.capacity(view, request), 0)
        if int(capacity.sum()) < need:
            continue
        with ctx.viewing(view):
            placed, status = place_job(pending, placer.allowed, ctx, placer.scoring, placer.topology)
        if status.ok or len(placed) >= need:
            return Reservation(pending.job.id, time_s, time_s + run_s, tuple(placed))
    return None
