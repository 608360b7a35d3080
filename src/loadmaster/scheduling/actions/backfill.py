"""backfill: after ``allocate``, reserve for jobs that cannot start and start later jobs around them.

Walks the queue in order (strict queues included: backfill is what lets a
later job pass a blocked head without delaying it). For each job not yet
bound: try to place it now on the cluster less every reservation its run
would overlap; if that fails and the reserve plugin grants it one, compute
its earliest start and hold that capacity; its status then says when it is
expected to start.
"""

from __future__ import annotations

from collections.abc import Hashable

from loadmaster.model import PendingJob
from loadmaster.scheduling.actions.allocate import admit, allowed_nodes, try_place
from loadmaster.scheduling.decisions import Reserve
from loadmaster.scheduling.framework import ReservePlugin
from loadmaster.scheduling.placement import Scoring
from loadmaster.scheduling.reservation import (
    Future,
    Placer,
    Release,
    ReleasePlan,
    Reservation,
    earliest_start,
    releases,
    without,
)
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.state import WorkingState
from loadmaster.scheduling.status import Status, wait


class _Shadows:
    """Views of the cycle's state less sets of reservations, rebuilt when a bind changes the state."""

    def __init__(self, session: Session, reservations: list[Reservation]) -> None:
        self.session = session
        self.reservations = reservations
        self._cache: dict[Hashable, tuple[int, WorkingState]] = {}

    def view(self, start_s: float, end_s: float) -> tuple[Hashable, WorkingState]:
        if not self.reservations:
            return "now", self.session.ctx.state
        overlapping = tuple(i for i, r in enumerate(self.reservations) if r.overlaps(start_s, end_s))
        if not overlapping:
            return "now", self.session.ctx.state
        version = self.session.state_version
        cached = self._cache.get(overlapping)
        if cached is None or cached[0] != version:
            state = without(self.session.ctx.state, self.reservations, start_s, end_s)
            cached = (version, state)
            self._cache[overlapping] = cached
        # Binds only shrink a shadow, so failures memoised under this key stay true across versions.
        return ("shadow", overlapping), cached[1]


class _Futures:
    """The cycle's Future: the release plan is built once, when first needed; the state follows binds."""

    def __init__(self, session: Session, ends: list[Release]) -> None:
        self.session = session
        self.ends = ends
        self._plan: ReleasePlan | None = None

    def current(self) -> Future:
        if self._plan is None:
            self._plan = ReleasePlan(self.ends, self.session.flat_placements)
        return Future(self.session.ctx.state, self._plan)


def run(session: Session) -> None:
    """Reserve and backfill over the whole queue; see the module docstring."""
    plugin: ReservePlugin = session.profile.reserve[0]
    ctx = session.ctx
    scoring = Scoring(tuple(session.profile.scores))
    estimates = {r.job.id: plugin.estimate_s(r.job, ctx) for r in ctx.snapshot.running}
    ends = releases(list(ctx.snapshot.running), ctx.now, estimates)
    futures = _Futures(session, ends)
    reservations: list[Reservation] = []
    shadows = _Shadows(session, reservations)
    for pending in session.queue:
        job = pending.job
        if job.id in session.bound:
            continue
        status = admit(session, pending)
        if not status.ok:
            session.statuses[job.id] = status
            continue
        run_s = plugin.estimate_s(job, ctx)
        key, view = shadows.view(ctx.now, ctx.now + run_s)
        status = try_place(session, pending, scoring, view, key)
        if status.ok:
            session.statuses.pop(job.id, None)
            continue
        if plugin.wants_reservation(pending, len(reservations), ctx):
            status = _reserve(
                session,
                pending,
                run_s=run_s,
                future=futures.current(),
                reservations=reservations,
                scoring=scoring,
                now_status=status,
            )
        session.statuses[job.id] = status
    session.blocked.clear()  # every job now carries its own status from this walk


def _reserve(
    session: Session,
    pending: PendingJob,
    *,
    run_s: float,
    future: Future,
    reservations: list[Reservation],
    scoring: Scoring,
    now_status: Status,
) -> Status:
    allowed = allowed_nodes(session, pending.job)
    if isinstance(allowed, Status):
        return allowed
    placer = Placer(allowed, scoring, session.profile.place_gang)
    found = earliest_start(
        pending, run_s, ctx=session.ctx, future=future, reservations=reservations, placer=placer
    )
    if found is None:
        return now_status
    reservations.append(found)
    nodes = tuple(sorted({p.node for p in found.placements}))
    session.decisions.append(Reserve(pending.job.id, found.start_s, nodes))
    names = ", ".join(session.ctx.state.nodes.nodes[n].name for n in nodes[:4])
    more = f" and {len(nodes) - 4} more" if len(nodes) > 4 else ""
    return wait(
        f"reserved from t={found.start_s:.0f}s on {names}{more}; now: {now_status.reason}",
        "backfill",
        estimated_start_s=found.start_s,
    )
