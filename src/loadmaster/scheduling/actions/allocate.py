"""allocate: walk the queue in order and place each job's gang in one transaction."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from loadmaster.model import MILLI_PER_GPU, Job, PendingJob, TaskPlacement
from loadmaster.scheduling import fit
from loadmaster.scheduling.decisions import Bind
from loadmaster.scheduling.framework import BoolArray
from loadmaster.scheduling.placement import Scoring, place_job
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.state import WorkingState
from loadmaster.scheduling.status import SUCCESS, Status, unschedulable, wait


def run(session: Session) -> None:
    """Try each job in queue order; bind what admission and the permit plugins accept.

    With ``backfill`` in the profile this does nothing: the backfill walk
    places jobs itself, so that none starts in a way that delays a reservation.
    """
    if "backfill" not in session.profile.actions:
        walk(session)


def walk(session: Session) -> None:
    """Place each job of the queue in order, blocking strict lanes at the first job that cannot start."""
    scoring = Scoring(tuple(session.profile.scores))
    for pending in session.queue:
        job = pending.job
        lane = session.lane(job)
        if lane in session.blocked or job.id in session.statuses or job.id in session.bound:
            continue
        status = admit(session, pending)
        if status.ok:
            status = try_place(session, pending, scoring, session.ctx.state)
        if status.ok:
            continue
        session.statuses[job.id] = status
        if session.strict:
            session.blocked[lane] = wait(
                f"queued behind {job.id} in {lane} (strict FIFO); it waits on: {status.reason}", "fifo"
            )
            if session.all_blocked():
                return


def admit(session: Session, pending: PendingJob) -> Status:
    """The first refusal of an admit plugin, or SUCCESS (also when admission is off)."""
    if not session.admission:
        return SUCCESS
    for plugin in session.profile.admit:
        status = plugin.admit(pending, session.ctx)
        if not status.ok:
            return status
    return SUCCESS


def try_place(
    session: Session, pending: PendingJob, scoring: Scoring, state: WorkingState, view: Hashable = "now"
) -> Status:
    """Place ``pending`` on ``state`` and, if permitted, commit it to the cycle's state and bind it.

    ``state`` is the cycle's state, or a shadow of it with reserved capacity
    taken out (backfill), named by ``view`` for the memo of failed shapes; a
    placement that fits a shadow fits the real state.
    """
    job_shape = shape_of(session, pending.job)
    shape = (view, job_shape)
    if not pending.bound:
        # A shadow holds less than the cycle's state, so failing there means failing here too.
        known = session.failed_shapes.get(("now", job_shape)) or session.failed_shapes.get(shape)
        if known is not None:
            return known
    allowed = allowed_nodes(session, pending.job)
    if isinstance(allowed, Status):
        return allowed
    mark = state.mark()
    with session.ctx.viewing(state):
        placed, status = place_job(pending, allowed, session.ctx, scoring, session.profile.place_gang)
    permit = _permit(session, pending, len(placed))
    if not permit.ok or not placed:
        state.rollback(mark)
        failure = status if not status.ok else permit
        if not pending.bound:
            session.failed_shapes[shape] = failure
        return failure
    on_cycle_state = state is session.ctx.state
    if not on_cycle_state:
        state.rollback(mark)  # the shadow goes back as it was; the placement is taken on the real state
    commit(session, pending, placed, taken=on_cycle_state)
    return SUCCESS if len(pending.bound) + len(placed) >= pending.job.min_available else status


def commit(
    session: Session, pending: PendingJob, placed: list[TaskPlacement], *, taken: bool = False
) -> None:
    """Take ``placed`` on the cycle's state (unless already ``taken``); emit the Bind; tell admit plugins."""
    if not taken:
        for placement in placed:
            session.ctx.state.take(placement)
    starts = len(pending.bound) + len(placed) >= pending.job.min_available
    session.decisions.append(Bind(pending.job.id, tuple(placed), starts))
    session.bound.add(pending.job.id)
    session.state_version += 1
    for listener in session.bind_listeners:
        listener(placed)
    gpus = sum(p.gpu_milli * len(p.gpu_indices) for p in placed) / MILLI_PER_GPU
    for plugin in session.profile.admit:
        plugin.on_bind(pending.job, gpus, session.ctx)


def _permit(session: Session, pending: PendingJob, placed: int) -> Status:
    for plugin in session.profile.permit:
        verdict = plugin.permit(pending, placed)
        if not verdict.ok:
            return verdict
    return SUCCESS


def shape_of(session: Session, job: Job) -> int:
    """What decides whether a job fits, as a small int: equal shapes fit or fail together within a cycle.

    Cached by job object across cycles (a job never changes; the filters'
    memo keys are functions of the job alone). Shapes are interned to ints
    because the walks look them up at every visit, and hashing the full
    tuple (with its dataclasses) each time costs more than the lookup.
    """
    cached = session.shapes.get(id(job))
    if cached is not None and cached[0] is job:
        return cached[1]
    extra = tuple(p.memo_key(job) for p in session.profile.filters)
    selector = tuple(sorted(job.node_selector.items()))
    shape = (job.pool, job.resource_type, selector, job.request, job.tasks, job.min_available, extra)
    number = session.shape_ids.setdefault(shape, len(session.shape_ids))
    session.shapes[id(job)] = (job, number)
    return number


def allowed_nodes(session: Session, job: Job) -> BoolArray | Status:
    """Nodes the job may use: its pool, type and selector, then every filter (once per shape and cycle)."""
    shape = shape_of(session, job)
    found = session.allowed.get(shape)
    if found is None:
        found = _allowed_nodes(session, job)
        session.allowed[shape] = found
    return found


def _allowed_nodes(session: Session, job: Job) -> BoolArray | Status:
    key = (session.ctx.state.nodes, job.pool, job.resource_type, tuple(sorted(job.node_selector.items())))
    mask = session.static_masks.get(key)
    if mask is None:
        mask = fit.static_mask(session.ctx.state.nodes, job)
        session.static_masks[key] = mask
    if not mask.any():
        return unschedulable(f"no node matches {fit.describe_static(job)}", "fit")
    for plugin in session.profile.filters:
        result = plugin.filter(job, session.ctx)
        mask = mask & result.mask
        if not np.any(mask):
            return unschedulable(result.reason or "no node passes the filter", plugin.name)
    return mask
