"""allocate: walk the queue in order and place each job's gang in one transaction."""

from __future__ import annotations

from collections.abc import Hashable

import numpy as np

from loadmaster.model import Job, PendingJob
from loadmaster.scheduling import fit
from loadmaster.scheduling.decisions import Bind
from loadmaster.scheduling.framework import BoolArray
from loadmaster.scheduling.placement import Scoring, place_job
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.status import Code, Status, unschedulable, wait


def run(session: Session) -> None:
    """Try each admitted job in queue order; bind what the permit plugins accept."""
    scoring = Scoring(tuple(session.profile.scores))
    for pending in session.queue:
        job = pending.job
        if job.queue in session.blocked or job.id in session.statuses:
            continue
        status = _try(session, pending, scoring)
        if status.ok:
            continue
        session.statuses[job.id] = status
        if session.strict:
            session.blocked[job.queue] = wait(
                f"queued behind {job.id} in {job.queue} (strict FIFO); it waits on: {status.reason}",
                "fifo",
            )
            if session.all_blocked():
                return


def _try(session: Session, pending: PendingJob, scoring: Scoring) -> Status:
    shape = _shape(session, pending.job)
    if not pending.bound and shape in session.failed_shapes:
        return session.failed_shapes[shape]
    allowed = _allowed(session, pending.job)
    if isinstance(allowed, Status):
        return allowed
    state = session.ctx.state
    mark = state.mark()
    placed, status = place_job(pending, allowed, session.ctx, scoring, session.profile.place_gang)
    permit = _permit(session, pending, len(placed))
    if not permit.ok or not placed:
        state.rollback(mark)
        failure = status if not status.ok else permit
        if not pending.bound:
            session.failed_shapes[shape] = failure
        return failure
    starts = len(pending.bound) + len(placed) >= pending.job.min_available
    session.decisions.append(Bind(pending.job.id, tuple(placed), starts))
    if starts:
        return status if status.ok else Status(Code.SUCCESS)
    return status


def _permit(session: Session, pending: PendingJob, placed: int) -> Status:
    for plugin in session.profile.permit:
        verdict = plugin.permit(pending, placed)
        if not verdict.ok:
            return verdict
    return Status(Code.SUCCESS)


def _shape(session: Session, job: Job) -> Hashable:
    extra = tuple(p.memo_key(job) for p in session.profile.filters)
    selector = tuple(sorted(job.node_selector.items()))
    return (job.pool, job.resource_type, selector, job.request, job.tasks, job.min_available, extra)


def _allowed(session: Session, job: Job) -> BoolArray | Status:
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
