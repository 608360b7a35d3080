"""The pure scheduler: a snapshot and a time in, decisions and reasons out."""

from __future__ import annotations

import functools
import gc
import itertools
import math
import operator
from collections.abc import Callable, Collection, Hashable, Mapping
from typing import Any

import numpy as np

from loadmaster.model import ClusterSnapshot, Job, NodeTable, PendingJob
from loadmaster.model.job import job_submit
from loadmaster.scheduling.actions import admit, allocate, backfill, preempt
from loadmaster.scheduling.decisions import Bind, CycleResult
from loadmaster.scheduling.framework import BoolArray, CycleContext
from loadmaster.scheduling.profile import Profile
from loadmaster.scheduling.queue_index import ClassStatuses, QueueIndex
from loadmaster.scheduling.repeat import CarriedFailures, RepeatCycles, carries_failures, skips_repeats
from loadmaster.scheduling.reservation import ReleaseBook, Reservation, SearchMemo
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.state import WorkingState
from loadmaster.scheduling.status import SUCCESS, Status, unresolvable
from loadmaster.scheduling.view_failures import ViewFailures

_MEMO_LIMIT = 65_536
"""Entries a memo of a pure function may hold before it is emptied (shapes seen, node tables seen)."""

_ACTIONS: dict[str, Callable[[Session], None]] = {
    "admit": admit.run,
    "allocate": allocate.run,
    "backfill": backfill.run,
    "preempt": preempt.run,
}


class Scheduler:
    """Runs a profile's actions over a snapshot. Same snapshot, time and seed: same result.

    It reads no clock, does no I/O and draws randomness only from the ``rng``
    it is handed. The only state it keeps between cycles are caches of pure
    functions of the node table: which job shapes can ever fit it, and which
    nodes match a job's pool, type and selector; and, when an order plugin
    ``commits_head``, the head job each queue lane committed to in the last
    cycle (the first job of the lane left waiting), which then goes first
    until it starts; and the last cycle's backfill reservations, so that a job
    starts on the GPUs it was promised (see ``actions.promise``); and, for a
    strict FIFO profile, the last cycle that bound nothing, with what it read,
    so that a cycle that would repeat it returns its result (``repeat``); for a
    non-strict one, that cycle's failures, which the next cycle on the same
    free resources starts with (``repeat.CarriedFailures``); and,
    where backfill runs periodically (``ReservePlugin.pass_interval_s``), when
    the next backfill walk is due and whether a cycle since the last one
    skipped it (:meth:`wake_s` then asks for a cycle at that time).
    """

    def __init__(self, profile: Profile) -> None:
        self.profile = profile
        self._feasible: dict[Hashable, Status] = {}
        self._static_masks: dict[Hashable, BoolArray] = {}
        self._shapes: dict[str, tuple[Job, int]] = {}
        self._shape_ids: dict[Hashable, int] = {}
        self._static_of: dict[int, int] = {}
        self._lanes: dict[str, tuple[Job, str]] = {}
        self._admit_keys: dict[str, tuple[Job, Hashable | None]] = {}
        self._verdict_keys: dict[str, tuple[Job, int]] = {}
        self._verdict_ids: dict[tuple[Hashable, int], int] = {}
        self._verdict_classes: list[tuple[Hashable, int]] = []
        self._flat: dict[int, Any] = {}
        self._keeps_allowed = all(p.reads_nodes_only and not p.marks_cycle for p in profile.filters)
        self._allowed: dict[Hashable, BoolArray | Status] = {}
        """Each shape's allowed nodes (``Session.allowed``), kept across cycles for the node table
        ``_allowed_for`` where every filter reads only the job and the node table: then a shape's
        mask is the same at every cycle, and a long queue's shapes are not filtered again each cycle
        (unless a filter leaves a note for the cycle when it runs: ``FilterPlugin.marks_cycle``)."""
        self._allowed_for: NodeTable | None = None
        self._book = ReleaseBook()
        self._searches = SearchMemo()
        self._commits = any(p.commits_head for p in profile.order)
        self._heads: dict[str, str] = {}
        self._promised: dict[str, Reservation] = {}
        """Job id -> the backfill reservation it got in the last cycle (``Session.promised``)."""
        """Lane -> id of the head job committed to in the last cycle (only when ``_commits``)."""
        self._repeats = RepeatCycles() if skips_repeats(profile) else None
        """The last cycle that bound nothing, where the profile's such cycles can be repeated exactly."""
        self._carried = CarriedFailures() if carries_failures(profile) else None
        """The failures of the last cycle that bound nothing, where the profile's hold in the next."""
        self._index = QueueIndex() if carries_failures(profile) else None
        """The queue by verdict class, kept from the driver's log of pending changes where the
        profile's walk is the non-strict one without admission in submission order (the profiles
        whose failures carry over: the same conditions make the indexed walk exact)."""
        self._view_failures = ViewFailures() if "backfill" in profile.actions else None
        """Failed placements kept by the free resources they were tried on (``view_failures``): for
        the backfilling profiles, whose shadows of the cluster come back from cycle to cycle."""
        self._victim_choices: dict[Hashable, tuple[tuple[int, ...], list[Any]]] | None = (
            {} if "preempt" in profile.actions else None
        )
        """The victims preemption chose, by what the choice reads (preempt._fewest_remembered)."""
        reserve = profile.reserve
        self._pass_interval_s = reserve[0].pass_interval_s if reserve else None
        self._next_pass_s = -math.inf
        """When the next backfill walk is due (with ``_pass_interval_s``; -inf: at the next cycle)."""
        self._pass_owed = False
        self.skipped_walks = 0
        """Cycles that skipped the backfill walk, a periodic one not being due (read by benchmarks)."""
        """A cycle since the last backfill walk skipped it: a cycle is wanted at ``_next_pass_s``."""
        self._wakers = [p for p in profile.order if p.wakes]

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        """Decide what to bind now, and say why every other pending job waits.

        Python's cyclic garbage collector is paused for the cycle. A cycle on a
        large cluster allocates tens of thousands of small objects (statuses,
        placements, views) that stay alive until it ends; the collector would
        promote them and run full collections over the whole heap in the middle
        of the cycle (about 45 ms each at 1,250 nodes and 7,000 jobs, every
        fourth or fifth cycle): the cycle's tail latency. Reference counting
        frees them anyway; the collector's work moves to between cycles, when
        the scheduler waits for the next event. Decisions do not change.

        A strict FIFO cycle that would repeat the last one (it bound nothing, and
        the free resources and each lane's first job are the same) returns the
        last result without walking the queue (``repeat``): same result.
        """
        if not snapshot.pending:
            return CycleResult(decisions=())
        repeats = self._repeats
        if repeats is not None:
            repeated = repeats.result(snapshot)
            if repeated is not None:
                return repeated
        # Not a context manager: creating one allocates, and the first allocation after a cycle
        # would start the collection that the previous cycle put off, inside this one.
        enabled = gc.isenabled()
        gc.disable()
        try:
            result = self._cycle(snapshot, now, rng)
            if repeats is not None:
                repeats.remember(snapshot, result)
        finally:
            if enabled:
                gc.enable()
        return result

    @property
    def wakes(self) -> bool:
        """Whether a cycle may be wanted with no event (a driver then asks :meth:`wake_s` after each)."""
        return bool(self._wakers) or self._pass_interval_s is not None

    def wake_s(self, snapshot: ClusterSnapshot, now: float) -> float:
        """The next time after ``now`` at which a cycle is wanted with no other event (inf: none).

        An order plugin's key that changes with time alone (``OrderPlugin.wake_s``), or a backfill
        walk that a cycle since the last one skipped, while jobs wait: Slurm runs its backfill
        every ``bf_interval`` whether or not anything happened, but a walk over an unchanged
        cluster and queue has nothing new to start, so only an owed walk asks for a cycle.
        """
        wake = min((p.wake_s(snapshot, now) for p in self._wakers), default=math.inf)
        if self._pass_owed and snapshot.pending:
            wake = min(wake, self._next_pass_s)
        return wake

    @property
    def skipped_cycles(self) -> int:
        """Cycles answered with the last cycle's result, as repeats of it (see ``repeat``)."""
        return self._repeats.skipped if self._repeats is not None else 0

    @property
    def search_counts(self) -> tuple[int, int]:
        """Backfill reservation searches made so far, and those answered from the last cycle's."""
        return self._searches.searched, self._searches.reused

    @property
    def settled_searches(self) -> int:
        """Searches made that tried only the candidate times up to the last change (SearchMemo)."""
        return self._searches.settled

    @property
    def placements_remembered(self) -> tuple[int, int]:
        """Failed placements answered from an earlier cycle's on the same free resources, and those
        tried and kept (``view_failures``; (0, 0) where the profile keeps none)."""
        memo = self._view_failures
        return (0, 0) if memo is None else (memo.hits, memo.misses)

    def _cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        self._trim(snapshot)
        session = self._session(snapshot, now, rng, snapshot.pending, snapshot.queues())
        session.promised = self._promised
        session.queue = self._ordered(snapshot.pending, session.ctx)
        if self._commits:
            session.queue = self._heads_first(session.queue)
        if self._pass_interval_s is not None:
            session.backfill_walk = now >= self._next_pass_s
            if session.backfill_walk:
                self._next_pass_s = now + self._pass_interval_s
            self._pass_owed = not session.backfill_walk
            self.skipped_walks += self._pass_owed
        if self._carried is not None:
            self._carried.seed(snapshot, session)
        if self._index is not None and self._index.sync(
            snapshot, self._verdict_ids, functools.partial(allocate.classify, session)
        ):
            session.queue_index = self._index
        for action in self.profile.actions:
            _ACTIONS[action](session)
        if self._carried is not None:
            self._carried.remember(snapshot, session)
        if self._commits:
            self._heads = _first_waiting(session)
        statuses: Mapping[str, Status] = session.statuses
        if session.queue_index is not None and session.class_verdicts is not None:
            index, verdicts = session.queue_index, session.class_verdicts
            statuses = ClassStatuses(statuses, session.bound, index.entries, index.cycle, verdicts)
        decisions = tuple(session.decisions)
        return CycleResult(decisions, statuses, session.blocked, session.untested, session.tested)

    def _trim(self, snapshot: ClusterSnapshot) -> None:
        """Keep the caches kept across cycles bounded (a long-running driver must not grow).

        Per-job entries are dropped once their job is no longer pending (only
        when they outnumber the pending jobs, so the check is amortised); the
        memos of pure functions are emptied when they pass a size no steady
        workload reaches. Caches only: decisions do not change.
        """
        pending = snapshot.pending
        limit = 2 * len(pending) + 1024
        kept = (self._shapes, self._lanes, self._admit_keys, self._verdict_keys)
        if any(len(cache) > limit for cache in kept):
            ids = {p.job.id for p in pending}
            self._shapes = {k: v for k, v in self._shapes.items() if k in ids}
            self._lanes = {k: v for k, v in self._lanes.items() if k in ids}
            self._admit_keys = {k: v for k, v in self._admit_keys.items() if k in ids}
            self._verdict_keys = {k: v for k, v in self._verdict_keys.items() if k in ids}
        if len(self._shape_ids) > _MEMO_LIMIT or len(self._verdict_ids) > _MEMO_LIMIT:
            # Shape numbers are interned: reset them all together, with the verdict classes,
            # which hold shape numbers.
            self._shapes, self._shape_ids, self._static_of, self._allowed = {}, {}, {}, {}
            self._verdict_keys, self._verdict_ids, self._verdict_classes = {}, {}, []
        for memo in (self._feasible, self._static_masks):
            if len(memo) > _MEMO_LIMIT:
                memo.clear()

    def _session(
        self,
        snapshot: ClusterSnapshot,
        now: float,
        rng: np.random.Generator,
        queue: Collection[PendingJob],
        queues: frozenset[str],
    ) -> Session:
        ctx = CycleContext(now=now, rng=rng, snapshot=snapshot, state=WorkingState.from_snapshot(snapshot))
        allowed: dict[Hashable, BoolArray | Status] = {}
        if self._keeps_allowed:
            if ctx.state.nodes is not self._allowed_for:  # a new node table (a live cluster changed)
                self._allowed, self._allowed_for = {}, ctx.state.nodes
            allowed = self._allowed
        return Session(
            ctx=ctx,
            profile=self.profile,
            queue=queue,
            queues_pending=queues,
            static_masks=self._static_masks,
            shapes=self._shapes,
            shape_ids=self._shape_ids,
            static_of=self._static_of,
            lane_cache=self._lanes,
            admit_keys=self._admit_keys,
            verdict_keys=self._verdict_keys,
            verdict_ids=self._verdict_ids,
            verdict_classes=self._verdict_classes,
            flat_placements=self._flat,
            release_book=self._book,
            searches=self._searches,
            allowed=allowed,
            view_failures=self._view_failures,
            victim_choices=self._victim_choices,
        )

    def _ordered(self, pending: Collection[PendingJob], ctx: CycleContext) -> Collection[PendingJob]:
        plugins = self.profile.order
        if all(p.follows_submission_order for p in plugins):
            return pending  # already in submission order: sorting would change nothing

        items = list(pending)
        jobs = [p.job for p in items]
        prefixes = plugins[0].order_prefixes(jobs, ctx)
        if prefixes is not None and _in_submission_order(jobs):
            # The first plugin's key ends with (submit_s, id), which no two jobs share: the keys of
            # the plugins after it, and the framework's own tie-break, never decide. A stable sort
            # by the prefix keeps equal prefixes in the queue's order, which is submission order.
            if isinstance(prefixes, np.ndarray):
                # A stable sort of floats, as Python's of one-float tuples (no NaN: -0.0 == 0.0).
                return list(map(items.__getitem__, np.argsort(prefixes, kind="stable").tolist()))
            order = sorted(range(len(items)), key=prefixes.__getitem__)
            return [items[i] for i in order]
        per_plugin = [plugin.order_keys(jobs, ctx) for plugin in plugins]
        keys: list[tuple[object, ...]]
        if len(per_plugin) == 1:  # the usual case: one unpacking per job, no generator
            keys = [(*key, job.submit_s, job.id) for key, job in zip(per_plugin[0], jobs, strict=True)]
        else:
            keys = [
                (*(part for keys in parts for part in keys), job.submit_s, job.id)
                for job, *parts in zip(jobs, *per_plugin, strict=True)
            ]
        order = sorted(range(len(items)), key=keys.__getitem__)
        return [items[i] for i in order]

    def _heads_first(self, queue: Collection[PendingJob]) -> Collection[PendingJob]:
        """``queue`` with the heads committed to in the last cycle moved to the front."""
        heads = set(self._heads.values())
        items = list(queue)
        if all(p.job.id in heads for p in items[: len(heads)]):
            return items  # no better job arrived: the heads are first already
        return [p for p in items if p.job.id in heads] + [p for p in items if p.job.id not in heads]

    def feasible(self, job: Job, nodes: NodeTable) -> Status:
        """Whether ``job`` could ever start on ``nodes`` if the whole cluster were free.

        A job that cannot is rejected at arrival with this reason rather than
        left waiting forever.
        """
        shape = (
            nodes,
            job.pool,
            job.resource_type,
            tuple(sorted(job.node_selector.items())),
            job.request,
            job.tasks,
            job.min_available,
            tuple(p.memo_key(job) for p in self.profile.filters),
        )
        cached = self._feasible.get(shape)
        if cached is None:
            cached = self._check_feasible(job, nodes)
            self._feasible[shape] = cached
        return cached

    def _check_feasible(self, job: Job, nodes: NodeTable) -> Status:
        if job.request.mig_profile is not None:
            # MIG layouts change at run time (re-planning, reboots) and are not part of the
            # node table: a MIG request waits, with its reason, rather than being rejected.
            return SUCCESS
        probe = PendingJob(job)
        empty = ClusterSnapshot.empty(nodes, [probe])
        # A fixed seed: feasibility must not depend on (or consume) the run's random stream.
        session = self._session(empty, 0.0, np.random.default_rng(0), [probe], frozenset({job.queue}))
        allocate.walk(session)  # placement alone: reservations cannot matter on an empty cluster
        if any(isinstance(d, Bind) and d.starts for d in session.decisions):
            return SUCCESS
        status = session.statuses.get(job.id)
        reason = status.reason if status is not None else "it cannot be placed"
        return unresolvable(
            f"rejected: {job.tasks} task(s) of {job.request.gpus:g} GPU(s) do not fit even on the "
            f"empty cluster ({reason})",
            "fit",
        )


def _in_submission_order(jobs: list[Job]) -> bool:
    """Whether ``jobs`` are sorted by (submit time, id), as drivers keep their pending jobs.

    On a long queue (thousands of jobs at every cycle) the submit times are compared as one array
    first: each strictly later than the one before is sorted whatever the ids, one earlier is not;
    only ties need the ids, compared as tuples.
    """
    if len(jobs) >= _ARRAY_CHECK_FROM:
        steps = np.diff(np.fromiter(map(job_submit, jobs), dtype=np.float64, count=len(jobs)))
        if (steps > 0).all():
            return True
        if (steps < 0).any():
            return False
    keys = [(job.submit_s, job.id) for job in jobs]
    return all(map(operator.lt, keys, itertools.islice(keys, 1, None)))


_ARRAY_CHECK_FROM = 64
"""Jobs from which :func:`_in_submission_order` compares arrays first (below, numpy's call costs more)."""


def _first_waiting(session: Session) -> dict[str, str]:
    """Each lane's first job in the cycle's order that is still waiting: the head it commits to."""
    heads: dict[str, str] = {}
    lanes = len(session.queues_pending)
    for pending in session.queue:
        if pending.job.id not in session.bound:
            heads.setdefault(session.lane(pending.job), pending.job.id)
            if len(heads) >= lanes:
                break
    return heads
