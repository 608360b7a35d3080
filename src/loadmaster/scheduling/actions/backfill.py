"""backfill: start jobs in queue order where they delay no reservation, and reserve for those that wait.

With ``backfill`` in a profile, ``allocate`` leaves the placing to this walk,
so that no job starts, from the first one on, in a way that would delay a
reservation. Starving jobs are visited first (oldest first), then the queue
in order (strict queues included: backfill is what lets a later job pass a
blocked head without delaying it). For each job: try to place it now on the
cluster less every reservation its run would overlap; if that fails and the
reserve plugin grants it one (EASY: the first waiting job of each queue
lane), compute its earliest start and hold that capacity; its status then
says when it is expected to start.
"""

from __future__ import annotations

import bisect
from collections.abc import Collection, Hashable, Iterator, Sequence

from loadmaster.model import PendingJob, RunningJob, TaskPlacement
from loadmaster.scheduling.actions.allocate import admit, allowed_nodes, dominated, shape_of, try_place
from loadmaster.scheduling.actions.allocate import walk as allocate_walk
from loadmaster.scheduling.actions.promise import keep_promise, start_as_promised
from loadmaster.scheduling.decisions import Bind, Reserve
from loadmaster.scheduling.framework import ReservePlugin
from loadmaster.scheduling.placement import Scoring
from loadmaster.scheduling.reservation import (
    Future,
    HeldSums,
    Placer,
    ReleaseBook,
    ReleasePlan,
    Reservation,
    SearchMemo,
    earliest_start,
    releases,
    without,
)
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.state import WorkingState
from loadmaster.scheduling.status import Status, wait


class _Shadows:
    """Views of the cycle's state less sets of reservations, kept in step with every bind.

    A shadow is ``max(state - reserved, 0)``; taking a bind's placements from
    it (clamped) gives exactly the shadow of the new state, so shadows are
    built once per set of reservations rather than after every bind.
    """

    def __init__(self, session: Session, reservations: list[Reservation], sums: HeldSums) -> None:
        self.session = session
        self.reservations = reservations
        self.sums = sums
        """The walk's summed holdings: a shadow's set of reservations is summed as a search's is."""
        self._cache: dict[Hashable, WorkingState] = {}
        self._starts: list[float] = []
        self._order: list[int] = []
        """Indices of the reservations in start order (ties: in the order they were made)."""
        self._keys: dict[int, Hashable] = {}
        """Memo key of the shadow less the first k reservations in start order, by k (made when
        first asked for since the last reservation, not all of them at every reservation)."""
        session.bind_listeners.append(self.on_bind)

    def on_bind(self, placements: Sequence[TaskPlacement]) -> None:
        for state in self._cache.values():
            for placement in placements:
                state.take_clamped(placement)

    def view(self, end_s: float) -> tuple[Hashable, WorkingState]:
        """The state less the reservations overlapping a run from now to ``end_s``, and its memo key.

        Every reservation starts at or after now and ends after it, so the
        ones a run from now overlaps are those starting before ``end_s``: a
        prefix of the reservations in start order, found by bisection.
        """
        key = self.key(end_s)
        return key, self.session.ctx.state if key == "now" else self._state(key, end_s)

    def key(self, end_s: float) -> Hashable:
        """:meth:`view`'s memo key alone, without building the view."""
        if len(self._order) != len(self.reservations):
            # A new reservation goes after those that start at the same time (a stable sort's order).
            for i in range(len(self._order), len(self.reservations)):
                at = bisect.bisect_right(self._starts, self.reservations[i].start_s)
                self._starts.insert(at, self.reservations[i].start_s)
                self._order.insert(at, i)
            self._keys.clear()
        count = bisect.bisect_left(self._starts, end_s)
        if not count:
            return "now"
        key = self._keys.get(count)
        if key is None:
            key = self._keys[count] = ("shadow", tuple(sorted(self._order[:count])))
        return key

    def _state(self, key: Hashable, end_s: float) -> WorkingState:
        cached = self._cache.get(key)
        if cached is None:
            cached = without(
                self.session.ctx.state, self.reservations, self.session.ctx.now, end_s, self.sums
            )
            if cached is self.session.ctx.state:
                cached = cached.copy()
            self._cache[key] = cached
        # Binds only shrink a shadow, so failures memoised under this key stay true after them.
        return cached


class _Futures:
    """The cycle's Future: releases of running jobs and of jobs started in this cycle.

    The running jobs' plan is built once per cycle; when a reservation is
    needed after more jobs have started (they hold GPUs in the cycle's state,
    so they must also give them back in the future), their releases are
    merged into it.
    """

    def __init__(self, session: Session, plugin: ReservePlugin) -> None:
        self.session = session
        self.plugin = plugin
        self.jobs = {p.job.id: p.job for p in session.queue}
        self._plan: ReleasePlan | None = None
        self._seen = 0
        """Decisions already merged into the plan."""

    def current(self) -> Future:
        ctx, decisions = self.session.ctx, self.session.decisions
        book = self.session.release_book
        if self._plan is None and self.plugin.fixed_running_estimates and isinstance(book, ReleaseBook):
            self._plan = book.plan(
                ctx.snapshot.running,
                ctx.now,
                lambda r: self.plugin.running_estimate_s(r, ctx),
                serials=ctx.snapshot.serials(),  # the driver's numbers of the runs, if it keeps them
            )
        if self._plan is None:
            running = list(ctx.snapshot.running)
            estimates = {r.job.id: self.plugin.running_estimate_s(r, ctx) for r in running}
            cache = self.session.flat_placements
            self._plan = ReleasePlan(releases(running, ctx.now, estimates), cache)
            if len(cache) > 2 * len(running) + 1024:
                # Jobs that ended are never asked for again: keep the cache to the running ones.
                alive = {id(r.placements) for r in running}
                for key in [k for k in cache if k not in alive]:
                    del cache[key]
        if self._seen < len(decisions):
            binds = [d for d in decisions[self._seen :] if isinstance(d, Bind) and d.starts]
            started = [RunningJob(self.jobs[b.job_id], b.placements, ctx.now) for b in binds]
            estimates = {r.job.id: self.plugin.running_estimate_s(r, ctx) for r in started}
            self._plan = self._plan.plus(releases(started, ctx.now, estimates))
            self._seen = len(decisions)
        return Future(ctx.state, self._plan)


class _Walk:
    """One backfill walk: the reservations made so far and how they are counted."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.plugin: ReservePlugin = session.profile.reserve[0]
        self.scoring = Scoring(tuple(session.profile.scores))
        self.futures = _Futures(session, self.plugin)
        self.reservations: list[Reservation] = []
        self.held_sums = HeldSums(self.reservations)
        """Summed holdings of sets of reservations, by their indices: the list only grows in a walk."""
        self.shadows = _Shadows(session, self.reservations, self.held_sums)
        self.per_lane: dict[str, int] = {}
        self.starving_held = 0
        self.done: set[str] = set()
        self._noted: dict[int, tuple[Status, Status]] = {}
        """Each shadow failure with the note that reserved GPUs were not counted, made once."""
        self.visit_all = bool(session.admission) or self.plugin.ends_before_reservations
        """Every job goes through :meth:`visit` (see :meth:`answered`)."""

    def visit(self, pending: PendingJob, *, starving: bool) -> None:
        """Start ``pending`` now if that delays no reservation, else perhaps reserve for it."""
        session, ctx, job = self.session, self.session.ctx, pending.job
        self.done.add(job.id)
        if session.admission:
            status = admit(session, pending)
            if not status.ok:
                session.statuses[job.id] = status
                return
        lane = session.lane(job)
        held = self.per_lane.get(lane, 0)
        reserving = starving or self.plugin.wants_reservation(pending, held, ctx)
        shape = shape_of(session, job)
        known = None if pending.bound else session.failed_shapes.get(("now", shape))
        if known is not None and not reserving:
            session.statuses[job.id] = known  # it fails on the whole cluster, so on any shadow of it
            return
        run_s = self.plugin.estimate_s(job, ctx)
        key, view = self.shadows.view(ctx.now + run_s)
        known = None if pending.bound or reserving else session.failed_shapes.get((key, shape))
        status = (
            self._too_late(ctx.now + run_s)
            or start_as_promised(session, pending, view)
            or known  # failed on this very view before: the common case once the cluster is full
            or try_place(session, pending, self.scoring, view, key, job_shape=shape)
        )
        if status.ok:
            session.statuses.pop(job.id, None)
            return
        if key != "now" and not self.plugin.ends_before_reservations:
            status = self._note_reserved(status)
        if reserving:
            status = _reserve(
                session,
                pending,
                run_s=run_s,
                future=self.futures.current(),
                reservations=self.reservations,
                scoring=self.scoring,
                now_status=status,
                sums=self.held_sums,
            )
            if status.estimated_start_s is not None:
                self.per_lane[lane] = held + 1
                self.starving_held += starving
        session.statuses[job.id] = status

    def answered(self, pending: PendingJob) -> bool:
        """Give ``pending`` the status :meth:`visit` would where the cycle's memos decide it, without
        the visit; False (nothing done) where the visit must be made.

        The jobs a long queue's walk visits mostly fail on what failed before them in the cycle:
        their shape on the whole cluster or on their view, or a smaller request of their group
        (:func:`~loadmaster.scheduling.actions.allocate.dominated`). This asks the same memos in
        the same order as :meth:`visit` and :func:`try_place` do and records the same status (the
        dominating failure kept under the job's view and shape, the note that reserved GPUs were not
        counted), skipping only what does not change the answer: the view itself (a shadow built
        later, when a visit needs it, is the same state: binds are taken from it clamped), and the
        placement's set-up. Visits that may do more go through :meth:`visit`: admission, bound tasks,
        a reservation wanted, a promise to keep, and the rule that jobs end before reservations.
        """
        session, job = self.session, pending.job
        if self.visit_all or pending.bound or job.id in session.promised:
            return False
        ctx = session.ctx
        if self.plugin.wants_reservation(pending, self.per_lane.get(session.lane(job), 0), ctx):
            return False
        shape, failed = shape_of(session, job), session.failed_shapes
        status = failed.get(("now", shape))
        if status is None:
            key = self.shadows.key(ctx.now + self.plugin.estimate_s(job, ctx))
            status = failed.get((key, shape))
            if status is None:
                status = dominated(session, job, shape, key)
                if status is None:
                    return False
                failed[(key, shape)] = status  # as try_place keeps it
            if key != "now":
                status = self._note_reserved(status)
        self.done.add(job.id)
        session.statuses[job.id] = status
        return True

    def _note_reserved(self, status: Status) -> Status:
        """``status`` saying that GPUs held for reservations were not counted (one object per failure)."""
        found = self._noted.get(id(status))
        if found is not None and found[0] is status:  # the original is kept, so its id is not reused
            return found[1]
        reason = f"{status.reason} (GPUs held for reservations are not counted)"
        noted = Status(status.code, reason, status.plugin)
        self._noted[id(status)] = (status, noted)
        return noted

    def _too_late(self, end_s: float) -> Status | None:
        """With ``ends_before_reservations``: why a run ending at ``end_s`` may not start now (else None)."""
        if not self.plugin.ends_before_reservations or not self.reservations:
            return None
        first = min(r.start_s for r in self.reservations)
        if end_s < first:
            return None
        return wait(
            f"it would still run at t={first:.0f}s, when a reservation begins "
            "(only jobs that end before it may start now)",
            "backfill",
        )

    def order(self, queue: Collection[PendingJob]) -> Iterator[PendingJob]:
        """``queue`` in order; with ``backfill_by_submission``, by submission once a job has reserved.

        The sort is stable on submit time alone, so jobs submitted together stay in queue order,
        as in RLScheduler, whose backfill pass re-sorts its policy-sorted queue with Python's
        stable sort by submit time.
        """
        items = list(queue)
        for i, pending in enumerate(items):
            if self.reservations and self.plugin.backfill_by_submission:
                yield from sorted(items[i:], key=lambda p: p.job.submit_s)
                return
            yield pending


def run(session: Session) -> None:
    """Reserve and backfill over the whole queue; see the module docstring.

    Starving jobs (past the plugin's starvation threshold) go first, oldest
    first, so that no later job takes what they need; then the queue in order.
    Between two periodic walks, see :func:`_between_walks`.
    """
    if not session.backfill_walk:
        _between_walks(session)
        return
    walk = _Walk(session)
    if isinstance(session.searches, SearchMemo):
        session.searches.next_cycle()
    starving = sorted(
        (p for p in session.queue if p.job.id not in session.bound and walk.plugin.starving(p, session.ctx)),
        key=lambda p: (p.job.submit_s, p.job.id),
    )
    limit = walk.plugin.max_jobs_per_walk
    starving = starving[: walk.plugin.max_starving_per_cycle]
    for pending in starving if limit is None else starving[:limit]:
        walk.visit(pending, starving=True)
    for pending in walk.order(session.queue):
        if pending.job.id not in session.bound and pending.job.id not in walk.done:
            if limit is not None and len(walk.done) >= limit:
                _stop_testing(session, walk, limit)
                break
            if not walk.answered(pending):
                walk.visit(pending, starving=False)
    session.blocked.clear()  # every job now carries its own status from this walk
    session.promised.clear()
    session.promised.update((r.job_id, r) for r in walk.reservations)


def _stop_testing(session: Session, walk: _Walk, limit: int) -> None:
    """The walk has tried its most jobs (``max_job_test``): the others wait untried, as in Slurm,
    where a job past ``bf_max_job_test`` gets no expected start until a walk reaches it."""
    session.untested = wait(
        f"not tried by this backfill pass, which tries the first {limit} waiting jobs "
        "(max_job_test); jobs ahead of it are tried first",
        "backfill",
    )
    session.tested = frozenset(walk.done | session.bound)


def _between_walks(session: Session) -> None:
    """A cycle between two periodic backfill walks: Slurm's main scheduler.

    The queue in order, each lane stopping at its first job that cannot start
    (the ``strict`` walk of ``allocate``): no job passes a job ahead of it, so
    none can delay a job ahead, and no reservation is searched. A job ahead of
    the last walk's reservations may still start and delay them, as in Slurm,
    where the main scheduler does not read backfill's planned starts. The
    last walk's promises are kept for the next walk.
    """
    interval = session.profile.reserve[0].pass_interval_s
    allocate_walk(session, blocked_by=f"until the next backfill pass (every {interval:g} s)", strict=True)


def _reserve(
    session: Session,
    pending: PendingJob,
    *,
    run_s: float,
    future: Future,
    reservations: list[Reservation],
    scoring: Scoring,
    now_status: Status,
    sums: HeldSums,
) -> Status:
    allowed = allowed_nodes(session, pending.job)
    if isinstance(allowed, Status):
        return allowed
    placer = Placer(allowed, scoring, session.profile.place_gang)
    search = session.searches.earliest_start if isinstance(session.searches, SearchMemo) else earliest_start
    found = search(
        pending, run_s, ctx=session.ctx, future=future, reservations=reservations, placer=placer, sums=sums
    )
    found = keep_promise(session, pending, found, run_s=run_s, future=future, reservations=reservations)
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
