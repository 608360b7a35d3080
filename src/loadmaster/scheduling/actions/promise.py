"""Keeping backfill's promises: a job starts, and re-reserves, on the GPUs it was promised.

Reservations are recomputed every cycle, in queue order. Where any free GPU
is as good as another (whole GPUs on one node), the recomputed plan keeps
every earlier promise when run times are exact. With shared GPUs it need
not: a job placed greedily when its reserved time comes may pick other
GPUs than those it reserved (say a half-used one that a job started by
backfilling made attractive since), and take GPUs that a later job was
promised, which then starts late. So the scheduler remembers the last
cycle's reservations (:attr:`Session.promised`) and the backfill walk
prefers them: a job whose reserved time has come starts on its reserved
placements when they still fit, and a job that reserves again keeps its
reservation unless the search finds an earlier start.
"""

from __future__ import annotations

import bisect
from collections.abc import Sequence

import numpy as np

from loadmaster.model import PendingJob
from loadmaster.scheduling.actions.allocate import allowed_nodes, commit
from loadmaster.scheduling.reservation import Future, Reservation, without
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.state import Held, WorkingState
from loadmaster.scheduling.status import SUCCESS, Status


def _usable(session: Session, pending: PendingJob, promise: Reservation | None) -> Reservation | None:
    """The job's promise if it can be reused on this cycle's nodes (whole gangs, no MIG), else None."""
    if promise is None or pending.bound or promise.held.mig:
        return None
    if promise.held.gpu.shape != session.ctx.state.gpu_free.shape:
        return None  # another node table: the placements' indices mean nothing here
    allowed = allowed_nodes(session, pending.job)
    if isinstance(allowed, Status) or not all(allowed[p.node] for p in promise.placements):
        return None
    return promise


def _fits(view: WorkingState, held: Held) -> bool:
    return bool(
        np.all(held.gpu <= view.gpu_free)
        and np.all(held.cpu <= view.cpu_free)
        and np.all(held.memory <= view.memory_free)
    )


def start_as_promised(session: Session, pending: PendingJob, view: WorkingState) -> Status | None:
    """Start ``pending`` on its reserved placements if its reserved time has come and they fit
    ``view`` (the cycle's state less the reservations its run overlaps); None if it did not."""
    promise = session.promised.get(pending.job.id)
    if promise is None or promise.start_s > session.ctx.now:
        return None
    promise = _usable(session, pending, promise)
    if promise is None or not _fits(view, promise.held):
        return None
    for plugin in session.profile.permit:
        if not plugin.permit(pending, len(promise.placements)).ok:
            return None
    commit(session, pending, list(promise.placements))
    return SUCCESS


def keep_promise(
    session: Session,
    pending: PendingJob,
    found: Reservation | None,
    *,
    run_s: float,
    future: Future,
    reservations: Sequence[Reservation],
) -> Reservation | None:
    """``found`` (this cycle's earliest start), or the job's last reservation when that still fits
    the cluster as it will be then, less the reservations made so far, and is no later."""
    promise = session.promised.get(pending.job.id)
    if promise is None or promise.start_s < session.ctx.now:
        return found
    if found is not None and found.start_s < promise.start_s:
        return found  # jobs ended early: an earlier start is better than the promise
    if found is not None and found.start_s == promise.start_s and found.placements == promise.placements:
        return found  # the search found the promise again: the common case
    promise = _usable(session, pending, promise)
    if promise is None:
        return found
    start = promise.start_s
    then = future.after(bisect.bisect_right(future.times, start))
    if not _fits(without(then, reservations, start, start + run_s), promise.held):
        return found
    return Reservation(promise.job_id, start, start + run_s, promise.placements, promise.held)
