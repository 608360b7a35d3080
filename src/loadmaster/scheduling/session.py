"""One cycle's working session: the ordered queue, the decisions so far and every job's status."""

from __future__ import annotations

from collections.abc import Callable, Collection, Hashable, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

from loadmaster.model import Job, PendingJob, TaskPlacement
from loadmaster.scheduling.decisions import Decision
from loadmaster.scheduling.framework import BoolArray, CycleContext
from loadmaster.scheduling.profile import Profile
from loadmaster.scheduling.status import Status

if TYPE_CHECKING:
    from loadmaster.scheduling.queue_index import ClassVerdicts, QueueIndex
    from loadmaster.scheduling.reservation import Reservation
    from loadmaster.scheduling.state import WorkingState
    from loadmaster.scheduling.view_failures import ViewFailures


@dataclass(eq=False)
class Session:
    """Shared by the actions of one cycle, in the order the profile lists them.

    ``statuses`` holds the verdict on each examined job that is still
    pending; ``blocked`` maps a strict queue to the status of the job that
    blocks it; ``failed_shapes`` remembers job shapes that could not be placed
    this cycle (capacity only shrinks within a cycle, so they cannot fit later
    in it either).
    """

    ctx: CycleContext
    profile: Profile
    queue: Collection[PendingJob]
    queues_pending: frozenset[str]
    decisions: list[Decision] = field(default_factory=list)
    statuses: dict[str, Status] = field(default_factory=dict)
    blocked: dict[str, Status] = field(default_factory=dict)
    failed_shapes: dict[Hashable, Status] = field(default_factory=dict)
    static_masks: dict[Hashable, BoolArray] = field(default_factory=dict)
    shapes: dict[str, tuple[Job, int]] = field(default_factory=dict)
    """Each job's shape number, by job id, with the job object it was computed for (kept across cycles)."""
    shape_ids: dict[Hashable, int] = field(default_factory=dict)
    """Shape number of each distinct shape (kept across cycles by the scheduler)."""
    static_of: dict[int, int] = field(default_factory=dict)
    lane_cache: dict[str, tuple[Job, str]] = field(default_factory=dict)
    """Each job's lane by job id, with the job object it was computed for (kept across cycles)."""
    """For each shape number, the number of its static part: pool, type, selector, filter keys."""
    failed_requests: dict[Hashable, list[tuple[tuple[int, int, int, int], Status]]] = field(
        default_factory=dict
    )
    """Requests that could not be placed, by view and group (see allocate.dominated), this cycle."""
    flat_placements: dict[int, Any] = field(default_factory=dict)
    """Running jobs' placements flattened to arrays (reservation.FlatCache), kept across cycles."""
    promised: dict[str, Reservation] = field(default_factory=dict)
    """The last cycle's backfill reservations by job id, kept across cycles by the scheduler and
    replaced by the backfill walk (see actions.promise)."""
    release_book: Any = None
    """Running jobs' releases kept across cycles (reservation.ReleaseBook), or None."""
    searches: Any = None
    """The last cycle's reservation searches (reservation.SearchMemo), kept across cycles, or None."""
    allowed: dict[Hashable, BoolArray | Status] = field(default_factory=dict)
    """Allowed nodes per job shape (filters do not read free resources): for this cycle, or kept
    across cycles by the scheduler where every filter reads only the job and the node table."""
    admit_keys: dict[str, tuple[Job, Hashable | None]] = field(default_factory=dict)
    """Each job's admission key (see allocate.admit), by job id, with the job object it was computed
    for (kept across cycles; only for jobs without bound tasks)."""
    verdict_keys: dict[str, tuple[Job, int]] = field(default_factory=dict)
    """Each job's verdict class for the non-strict walk (allocate._Classes; -1: none), by job id,
    with the job object it was computed for (kept across cycles)."""
    verdict_ids: dict[tuple[Hashable, int], int] = field(default_factory=dict)
    """The number of each (admission key, shape) seen (kept across cycles)."""
    verdict_classes: list[tuple[Hashable, int]] = field(default_factory=list)
    """(admission key, shape) of each number."""
    admitted: dict[Hashable, Status] = field(default_factory=dict)
    """Admission verdicts by key since the last bind of the cycle (see allocate.admit)."""
    place_failures: dict[Hashable, tuple[int, Status]] = field(default_factory=dict)
    """Placements on the cycle's state that placed nothing, with the ``state_version`` they were
    made at (see allocate._place_on_cycle_state)."""
    view_failures: ViewFailures | None = None
    """Failed placements kept across cycles by the free resources they were tried on
    (``view_failures``; allocate._place_remembered), or None where the scheduler keeps none."""
    view_content: dict[int, tuple[WorkingState, int, Hashable]] = field(default_factory=dict)
    """The free resources of each state placed on in the cycle, as a key, with the state and the
    ``state_version`` they were read at (allocate.state_content)."""
    mask_bytes: dict[int, tuple[BoolArray, bytes]] = field(default_factory=dict)
    """Each allowed-node mask of the cycle as bytes, with the mask (allocate.mask_content)."""
    as_for_smaller: dict[int, tuple[Status, Status]] = field(default_factory=dict)
    """Each failure (by id, with the object) as the reason of a larger request (allocate.dominated)."""
    victim_choices: dict[Hashable, tuple[tuple[int, ...], list[Any]]] | None = None
    """The victims preemption chose (indices in its candidates) by what the choice reads, kept
    across cycles by the scheduler (preempt._fewest_remembered), or None where it keeps none."""
    fits_now: dict[Hashable, tuple[int, bool]] = field(default_factory=dict)
    """Whether a request fits the cycle's state with no eviction, with the ``state_version``
    it was found at (preempt._fits_now)."""
    walk_classes: Any = None
    """The non-strict walk's verdict classes of the queue (allocate._Classes), for later actions."""
    queue_index: QueueIndex | None = None
    """The scheduler's index of the queue by verdict class, brought to this cycle's queue
    (``queue_index``), where the profile's walk can use it; else None."""
    dominance_resolved: bool = False
    """True during the indexed walk, which resolves every class a kept failure dominates before it
    visits one: a visit then needs no dominance check of its own (``allocate.try_place``)."""
    class_verdicts: ClassVerdicts | None = None
    """The verdict of each class the indexed walk resolved (``allocate._walk_indexed``): the status
    of its jobs that the walk did not visit. None where that walk did not run."""
    admission: bool = False
    """Set by the ``admit`` action: ask the admit plugins before placing each job."""
    state_version: int = 0
    """Bumped at every bind, so views derived from the cycle's state know they are stale."""
    bind_listeners: list[Callable[[Sequence[TaskPlacement]], None]] = field(default_factory=list)
    """Called with the placements of every bind committed in the cycle (views kept in step)."""
    bound: set[str] = field(default_factory=set)
    """Jobs bound (started or partly placed) in this cycle."""
    backfill_walk: bool = True
    """False in a cycle between two periodic backfill walks (``ReservePlugin.pass_interval_s``): the
    ``backfill`` action then starts jobs in queue order up to each lane's first that cannot start."""
    untested: Status | None = None
    """Set by a backfill walk that stopped at its most jobs (``ReservePlugin.max_jobs_per_walk``):
    the status of every pending job not in ``tested`` (``CycleResult.untested``)."""
    tested: frozenset[str] = frozenset()
    """With ``untested``: the jobs that walk tried or bound."""
    strict: bool = field(init=False, default=False)
    """True when a job that cannot start blocks its queue."""
    _split: bool = field(init=False, default=False)
    _lanes: dict[str, str] = field(init=False, default_factory=dict)
    """Each pending job's lane, computed once per cycle: the walks ask for it at every visit."""

    def __post_init__(self) -> None:
        self.strict = any(p.strict for p in self.profile.order)
        self._split = any(p.splits_queues for p in self.profile.order)
        if self._split:
            self._lanes = {p.job.id: self._lane_of(p.job) for p in self.queue}
            self.queues_pending = frozenset(self._lanes.values())

    def _lane_of(self, job: Job) -> str:
        """The profile's lane for ``job``, remembered by job object across cycles (a pure function of it)."""
        cached = self.lane_cache.get(job.id)
        if cached is not None and cached[0] is job:
            return cached[1]
        lane = self.profile.lane(job)
        self.lane_cache[job.id] = (job, lane)
        return lane

    def lane(self, job: Job) -> str:
        """The queue ``job`` competes in (see :meth:`Profile.lane`)."""
        if not self._split:
            return job.queue
        lane = self._lanes.get(job.id)
        return lane if lane is not None else self.profile.lane(job)

    def all_blocked(self) -> bool:
        """True once every queue with pending jobs is blocked: the rest of the cycle is moot."""
        return bool(self.blocked) and len(self.blocked) >= len(self.queues_pending)
