"""preempt: evict the fewest eligible running jobs that let a waiting job start, then start it.

For each job still waiting (at most ``MAX_PREEMPTORS`` per cycle, in queue
order), the victim plugins name eligible running jobs, most preferred first.
The most preferred single victim that makes room is taken if there is one;
otherwise victims are added in that order until the job fits on the cluster
as it would be without them, then any victim the job can do without is
dropped again. So the fewest jobs are evicted, and among equals the most
preferred (lowest priority, then least work lost). A gang is evicted whole:
a victim is a whole job. A job with ``may_preempt`` False (Kubernetes
``preemptionPolicy: Never``) never preempts.
"""

from __future__ import annotations

from collections.abc import Sequence

from loadmaster.model import PendingJob, RunningJob
from loadmaster.scheduling.actions.allocate import admit, allowed_nodes, try_place
from loadmaster.scheduling.decisions import Preempt
from loadmaster.scheduling.placement import Scoring, place_job
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.state import WorkingState
from loadmaster.scheduling.status import Status

MAX_PREEMPTORS = 8
"""Waiting jobs that may preempt in one cycle: bounds the cycle's cost; the rest try next cycle."""


def run(session: Session) -> None:
    """Preempt for waiting jobs in queue order; see the module docstring."""
    if not session.profile.victims:
        return
    evicted: set[str] = set()
    tried = 0
    scoring = Scoring(tuple(session.profile.scores))
    for pending in session.queue:
        if tried >= MAX_PREEMPTORS:
            return
        if pending.job.id in session.bound or not pending.job.may_preempt or not admit(session, pending).ok:
            continue
        candidates = _candidates(session, pending, evicted)
        if not candidates or _fits_without(session, pending, [], scoring):
            continue  # nobody to evict, or room enough already: it waits on something eviction cannot fix
        tried += 1
        victims = _fewest(session, pending, candidates, scoring)
        if victims:
            _evict(session, pending, victims, evicted)
            try_place(session, pending, scoring, session.ctx.state, ("preempt", pending.job.id))


def _candidates(session: Session, pending: PendingJob, evicted: set[str]) -> list[RunningJob]:
    running = [r for r in session.ctx.snapshot.running if r.job.id not in evicted]
    seen: dict[str, RunningJob] = {}
    for plugin in session.profile.victims:
        for victim in plugin.select_victims(pending, running, session.ctx):
            seen.setdefault(victim.job.id, victim)
    return list(seen.values())


def _fits_without(
    session: Session, pending: PendingJob, victims: Sequence[RunningJob], scoring: Scoring
) -> bool:
    allowed = allowed_nodes(session, pending.job)
    if isinstance(allowed, Status):
        return False
    view: WorkingState = session.ctx.state.copy()
    for victim in victims:
        for placement in victim.placements:
            view.release(placement)
    with session.ctx.viewing(view):
        placed, status = place_job(pending, allowed, session.ctx, scoring, session.profile.place_gang)
    return status.ok or len(placed) >= pending.tasks_left


SINGLE_VICTIM_TRIES = 16
"""Candidates tried one at a time before victims are combined: one eviction beats several."""


def _fewest(
    session: Session, pending: PendingJob, candidates: list[RunningJob], scoring: Scoring
) -> list[RunningJob]:
    for victim in candidates[:SINGLE_VICTIM_TRIES]:
        if _fits_without(session, pending, [victim], scoring):
            return [victim]
    chosen: list[RunningJob] = []
    for victim in candidates:
        chosen.append(victim)
        if _fits_without(session, pending, chosen, scoring):
            break
    else:
        return []
    for victim in reversed(chosen[:-1]):  # drop what the job can do without, least preferred first
        rest = [v for v in chosen if v is not victim]
        if _fits_without(session, pending, rest, scoring):
            chosen = rest
    return chosen


def _evict(session: Session, pending: PendingJob, victims: list[RunningJob], evicted: set[str]) -> None:
    for victim in victims:
        for placement in victim.placements:
            session.ctx.state.release(placement)
        evicted.add(victim.job.id)
        session.decisions.append(Preempt(victim.job.id, f"preempted so that {pending.job.id} can start"))
    session.state_version += 1
    session.failed_shapes.clear()  # capacity grew: earlier failures in this cycle may fit now
    session.failed_requests.clear()
