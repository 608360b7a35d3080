"""Repeat cycles of a strict FIFO profile: the last cycle's result, when nothing it read changed.

A strict queue whose head cannot start is the steady state of an overloaded
FIFO cluster: cycle after cycle (each job that arrives runs one) the walk
retries the same head on the same free resources and fails with the same
reason. Such a cycle is a pure function of a few inputs, so the scheduler can
tell from the snapshot alone (nothing only a simulator knows) that it would
repeat the last one, and return the last result without the walk.

Which profiles: those whose cycle with no decision reads nothing but the
queue lanes' first jobs, the node table and the free resources
(:func:`skips_repeats`). For them, a cycle that bound nothing examined the
first job of each lane (each failed, so each lane blocked at it) and no other:
every other waiting job gets its lane's "queued behind" status. If the next
snapshot has the same node table, the same free resources (compared by value:
a driver may hand views of arrays it changes in place), the same lanes and,
in each, the same first job (the same job with the same bound tasks), the
walk would examine the same jobs in the same order on the same state, and
give the same statuses; a job that arrived since sits behind its lane's head
and gets the lane's status, as it would in a full cycle. Such a profile draws
nothing from the random stream in a cycle (no order key, pure scores and
filters), so a skipped cycle consumes what a full one does: nothing.
"""

from __future__ import annotations

from collections.abc import Collection, Hashable, Mapping
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.model import ClusterSnapshot, NodeTable, PendingJob, PendingLog
from loadmaster.scheduling.decisions import CycleResult
from loadmaster.scheduling.framework import GpuChoicePlugin
from loadmaster.scheduling.profile import Profile
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.status import Status

IntArray = npt.NDArray[np.int64]


def skips_repeats(profile: Profile) -> bool:
    """Whether ``profile``'s cycles that bind nothing depend only on what :class:`RepeatCycles` compares.

    * ``allocate`` alone: no admission (it keeps verdicts that change with binds and time), no
      backfill (reservations read running jobs and time), no preemption (reads running jobs).
    * a strict order that follows submission order, with no lanes of its own and no committed
      heads: the walk's first job of each lane is the lane's first pending job, and no order
      key is computed (none reads time or draws).
    * filters that read only the job and the node table (``FilterPlugin.reads_nodes_only``), pure
      scores (``ScorePlugin.pure``: the state and the job, no draws), none that chooses GPUs, and
      no topology plugin: a placement that fails is a function of the job and the state.
    Permit plugins see only the job and the count placed.
    """
    return any(p.strict for p in profile.order) and _fails_by_shape_and_state(profile)


def _fails_by_shape_and_state(profile: Profile) -> bool:
    """What :func:`skips_repeats` and :func:`carries_failures` both ask: ``allocate`` alone, a
    queue in submission order with no lanes of its own or committed heads, no admission, filters
    that read only the job and the node table, pure scores, no GPU choice and no topology plugin."""
    order = profile.order
    scores = [plugin for plugin, _ in profile.scores]
    return (
        tuple(profile.actions) == ("allocate",)
        and all(p.follows_submission_order for p in order)
        and not any(p.splits_queues or p.commits_head for p in order)
        and not profile.admit
        and all(p.reads_nodes_only for p in profile.filters)
        and all(p.pure and not isinstance(p, GpuChoicePlugin) for p in scores)
        and profile.place_gang is None
    )


@dataclass(frozen=True, eq=False, slots=True)
class _Last:
    """A cycle that bound nothing: what it read, and what it answered."""

    nodes: NodeTable
    free: tuple[tuple[tuple[int, ...], np.dtype[np.int64], bytes], ...]
    """The snapshot's free-resource arrays (see :func:`_free`): shape, type and contents of each."""
    queues: frozenset[str]
    heads: tuple[PendingJob, ...]
    """The first pending job of each lane, in queue order."""
    statuses: Mapping[str, Status]
    blocked: Mapping[str, Status]


class RepeatCycles:
    """The last cycle that bound nothing, and whether a snapshot would repeat it (one per scheduler)."""

    def __init__(self) -> None:
        self._last: _Last | None = None
        self.skipped = 0
        """Cycles answered with the last result (for benchmarks)."""

    def result(self, snapshot: ClusterSnapshot) -> CycleResult | None:
        """The last result if ``snapshot`` holds everything the last cycle read, unchanged; else None.

        The checks go from the cheapest to the costliest, and those that differ most often (a job
        ended or started) before the queue's heads. A new result object with its own mappings:
        a driver may keep or change what it is given.
        """
        last = self._last
        if last is None or snapshot.nodes is not last.nodes or snapshot.mig is not None:
            return None
        if snapshot.queues() != last.queues:
            return None
        if not _unchanged(_free(snapshot), last.free):
            return None
        if _heads(snapshot.pending, last.queues) != last.heads:
            return None
        self.skipped += 1
        return CycleResult((), dict(last.statuses), dict(last.blocked))

    def remember(self, snapshot: ClusterSnapshot, result: CycleResult) -> None:
        """Keep ``result`` for the next cycle if it bound nothing and examined only the lanes' heads.

        The second condition always holds for a profile of :func:`skips_repeats` (a job that fails
        blocks its lane); it is checked anyway, since the skip is exact only where it holds.
        """
        self._last = None
        if result.decisions or snapshot.mig is not None:
            return
        queues = snapshot.queues()
        heads = _heads(snapshot.pending, queues)
        if set(result.statuses) != {p.job.id for p in heads} or set(result.blocked) != queues:
            return
        self._last = _Last(
            snapshot.nodes, _kept(snapshot), queues, heads, dict(result.statuses), dict(result.blocked)
        )


def _free(snapshot: ClusterSnapshot) -> tuple[IntArray, ...]:
    """The snapshot's free resources, the per-node summaries first (smallest, and they change
    with nearly every start and end): what the cycle's working state is built from."""
    arrays = (
        snapshot.free_milli,
        snapshot.cpu_free_milli,
        snapshot.memory_free_mib,
        snapshot.whole_free,
        snapshot.largest_share,
        snapshot.gpu_free_milli,
    )
    return arrays if snapshot.pods_free is None else (*arrays, snapshot.pods_free)


def _kept(snapshot: ClusterSnapshot) -> tuple[tuple[tuple[int, ...], np.dtype[np.int64], bytes], ...]:
    """The snapshot's free resources as :func:`_unchanged` compares them later: shape, type, bytes."""
    return tuple((array.shape, array.dtype, array.tobytes()) for array in _free(snapshot))


def _unchanged(
    arrays: tuple[IntArray, ...], kept: tuple[tuple[tuple[int, ...], np.dtype[np.int64], bytes], ...]
) -> bool:
    """Whether ``arrays`` hold what ``kept`` says, stopping at the first that does not.

    Bytes rather than ``np.array_equal``: copying 1,000 x 8 values out and comparing them with
    ``memcmp`` costs a few microseconds; numpy's elementwise comparison and its reduction, several
    times that per array.
    """
    if len(arrays) != len(kept):
        return False
    for array, (shape, dtype, data) in zip(arrays, kept, strict=True):
        if array.shape != shape or array.dtype != dtype or array.tobytes() != data:
            return False
    return True


def _heads(pending: Collection[PendingJob], queues: frozenset[str]) -> tuple[PendingJob, ...]:
    """The first job of each queue in ``pending`` (submission order), in that order.

    Stops once every queue has its head: one job for a single queue.
    """
    heads: list[PendingJob] = []
    seen: set[str] = set()
    for item in pending:
        queue = item.job.queue
        if queue not in seen:
            seen.add(queue)
            heads.append(item)
            if len(seen) >= len(queues):
                break
    return tuple(heads)


def carries_failures(profile: Profile) -> bool:
    """Whether ``profile``'s failures of a cycle that bound nothing hold, unchanged, in the next one
    on the same free resources (:class:`CarriedFailures`): a non-strict queue in submission order
    (a strict one repeats whole cycles instead, :class:`RepeatCycles`), with everything else that
    :func:`skips_repeats` asks: no admission, backfill or preemption, filters that read only the
    job and the node table, pure scores, no GPU choice and no topology plugin."""
    return (
        not any(p.strict for p in profile.order)
        and not any(p.marks_cycle for p in profile.filters)  # such filters' masks are new each cycle
        and _fails_by_shape_and_state(profile)
    )


@dataclass(frozen=True, eq=False, slots=True)
class _Failures:
    """What a cycle that bound nothing read and what it found could not be placed."""

    nodes: NodeTable
    shape_ids: Mapping[Hashable, int]
    """The scheduler's numbering of shapes the memos' keys use (a new mapping when it is reset)."""
    free: tuple[tuple[tuple[int, ...], np.dtype[np.int64], bytes], ...]
    queue: list[PendingJob] | tuple[PendingLog, int, int]
    """The queue it walked, in order; or, where the driver logs its queue's changes, the log, its
    version and the queue's length then (a queue that only grew at its end since starts with it)."""
    failed_shapes: dict[Hashable, Status]
    failed_requests: dict[Hashable, list[tuple[tuple[int, int, int, int], Status]]]
    as_for_smaller: dict[int, tuple[Status, Status]]


class CarriedFailures:
    """The failure memos of the last cycle that bound nothing, handed to the next one where they hold.

    An overloaded cluster's steady state under a non-strict queue: a job arrives, the walk tries
    every shape of the queue on the same full cluster, each fails as it did in the last cycle, and
    only the new job's shape is new. A placement that fails is a function of the job's shape and
    the state (:func:`carries_failures`), and in a cycle that bound nothing the state never changed,
    so each failure that cycle found is the one a walk on the same state would find again; the
    order matters only for which smaller request a larger one is said to fail like
    (``allocate.dominated`` cites the first it kept), so the memos are handed over only if the
    last cycle's queue is the start of this one's, in the same order: the walk then meets the same
    jobs first, finds each failure in the memo, and reaches the new jobs with the memos a full walk
    would have by then. Same statuses, same decisions; only the placement attempts are saved.

    The memos are keyed by shape numbers (``failed_shapes``; ``failed_requests`` by their static
    part), so they are handed over only while the scheduler keeps the same numbering (its memos
    are reset together when they grow too large: ``Scheduler._trim``). The failed placements
    (``Session.place_failures``) are not handed over: they are keyed by the identity of a cycle's
    allowed-node masks, which a later cycle may give to other masks.
    """

    def __init__(self) -> None:
        self._last: _Failures | None = None
        self.carried = 0
        """Cycles that started with the last cycle's failures (for benchmarks and tests)."""

    def seed(self, snapshot: ClusterSnapshot, session: Session) -> None:
        """Start ``session`` with the last cycle's failure memos if everything they depend on holds."""
        last, self._last = self._last, None
        if last is None or snapshot.nodes is not last.nodes or snapshot.mig is not None:
            return
        if session.shape_ids is not last.shape_ids:  # renumbered: the keys name other shapes now
            return
        if not _unchanged(_free(snapshot), last.free):
            return
        if not _starts_with(snapshot, session, last.queue):
            return
        session.failed_shapes = last.failed_shapes
        session.failed_requests = last.failed_requests
        session.as_for_smaller = last.as_for_smaller
        self.carried += 1

    def remember(self, snapshot: ClusterSnapshot, session: Session) -> None:
        """Keep ``session``'s failure memos for the next cycle if it bound nothing (no decision at all)."""
        self._last = None
        if session.decisions or snapshot.mig is not None or session.state_version:
            return
        self._last = _Failures(
            snapshot.nodes,
            session.shape_ids,
            _kept(snapshot),
            _queue_now(snapshot, session),
            session.failed_shapes,
            session.failed_requests,
            session.as_for_smaller,
        )


def _queue_now(snapshot: ClusterSnapshot, session: Session) -> list[PendingJob] | tuple[PendingLog, int, int]:
    """What :func:`_starts_with` needs later of this cycle's queue: its log's version and its
    length, else a copy of it."""
    log = snapshot.pending_log
    return (log, log.version, len(snapshot.pending)) if log is not None else list(session.queue)


def _starts_with(
    snapshot: ClusterSnapshot, session: Session, last: list[PendingJob] | tuple[PendingLog, int, int]
) -> bool:
    """Whether this cycle's queue starts with ``last``'s, in the same order.

    With the driver's log, in time independent of the queue's length: every change since is a job
    added at the end, and the queue grew by as many (a log that no longer holds them all, or a
    queue that changed unlogged, says no). Else, elementwise: identity first (a list compares each
    pair with ``is`` before ``==``).
    """
    if isinstance(last, tuple):
        log, version, length = last
        if snapshot.pending_log is not log:
            return False
        changes = log.since(version)
        return (
            changes is not None
            and all(kind == "add" for kind, _ in changes)
            and len(snapshot.pending) == length + len(changes)
        )
    queue = session.queue if isinstance(session.queue, list | tuple) else list(session.queue)
    return len(queue) >= len(last) and list(queue[: len(last)]) == last
