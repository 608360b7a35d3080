"""The queue by verdict class, kept across cycles: a non-strict walk whose cost does not grow with the queue.

The non-strict walk (``allocate._walk_runs``) gives every job of a class whose verdict is known the
class's verdict, and visits only the others. It still builds its class table from the whole queue
at every cycle and steps through every position: on an overloaded cluster (thousands of waiting
jobs, a few hundred distinct shapes) that pass is most of the cycle, and a long simulation grows
with the square of its jobs. :class:`QueueIndex` keeps the table instead: each class's waiting
jobs in queue order, changed only by what the driver's :class:`~loadmaster.model.PendingLog` says
came and went since the last cycle. The walk (``allocate._walk_indexed``) then takes, among the
classes not yet resolved, the earliest job in queue order (one ``argmin`` over each class's next
place); that is the job the full walk would visit next, since every position before it belongs to
a resolved class. A cycle costs the classes and the visits, not the queue.

Where the driver keeps no log (the Kubernetes binding), the scheduler walks the whole queue as
before. Where the log cannot take the index to the snapshot's queue (a reorder, a reader too far
behind, a length that does not match), the index is rebuilt from the whole queue: the old cost,
once. The index trusts the log for everything else: a driver must write every change (the
simulator's cluster lets nothing change its queue otherwise).

The verdicts of the jobs the walk did not visit are not written one by one either:
:class:`ClassStatuses` answers a job's status from its class's verdict in that cycle. It answers
for the cycle it was made in, whatever the index became since: each job's class is kept with the
cycles it was in the queue for (:class:`_Entry`), and the index never changes an entry in place.
"""

from __future__ import annotations

import bisect
from collections.abc import Callable, Hashable, Iterator, Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.model import ClusterSnapshot, PendingJob, PendingLog
from loadmaster.model.pending_log import Change
from loadmaster.scheduling.status import Status, as_for_smaller

IntArray = npt.NDArray[np.int64]

LOOSE = -1
"""The class of a job that has no class (some tasks already bound): visited at every cycle."""


@dataclass(frozen=True, slots=True)
class _Entry:
    """A job's class from cycle ``added`` until before cycle ``removed`` (None: still queued), and
    what it was before (a job whose tasks got bound changes class, keeping its place)."""

    number: int
    added: int
    removed: int | None
    before: _Entry | None

    def at(self, cycle: int) -> int | None:
        """The job's class at ``cycle``, or None if it was not in that cycle's queue."""
        entry: _Entry | None = self
        while entry is not None:
            if entry.added <= cycle and (entry.removed is None or cycle < entry.removed):
                return entry.number
            entry = entry.before
        return None


@dataclass(frozen=True, slots=True)
class ClassInfo:
    """What the walk needs of a class: its shape, its group for the dominance check
    (``allocate._request_group``, with the "now" view) and its request's size."""

    shape: int
    group: Hashable | None
    size: tuple[int, int, int, int]


NONE = np.iinfo(np.int64).max
"""The place of no job: a class with no job left to visit."""


class ClassVerdicts:
    """The verdict of each class in one cycle: its shape's failure, or the first failure compared
    with the classes (``compared``, in the walk's order) of a request of its group that asks no
    more on any resource, as the reason of a larger request; or none.

    The walk only records the failures it compares; a dominated class's verdict is found when it
    is read (once per class, then kept). A cycle's verdicts are read for a few jobs (the simulator
    reads a job's last status when it starts it), while the walk compares many failures with many
    classes at every cycle.
    """

    __slots__ = ("_found", "_info", "compared", "failed")

    def __init__(self, info: Mapping[int, ClassInfo]) -> None:
        self.failed: dict[int, Status] = {}
        self.compared: list[tuple[Hashable, tuple[int, int, int, int], Status]] = []
        """Each failure compared with its group's classes: the group, the request's size, the status."""
        self._info = info
        """The index's classes (a class's entry never changes; a rebuilt index makes a new dict)."""
        self._found: dict[int, Status | None] = {}

    def get(self, number: int) -> Status | None:
        found = self.failed.get(number)
        if found is not None:
            return found
        if number in self._found:
            return self._found[number]
        info = self._info.get(number)
        if info is not None and info.group is not None:
            group, size = info.group, info.size
            for kept_group, smaller, status in self.compared:
                if kept_group == group and all(have >= w for have, w in zip(size, smaller, strict=True)):
                    found = as_for_smaller(status)
                    break
        self._found[number] = found
        return found


_SLACK = 64
"""Slots of classes with no waiting job an index may hold beyond as many as those with some: past
that it is built afresh (amortised: that many new classes came since it was last built)."""

Classify = Callable[[PendingJob], tuple[int, ClassInfo | None]]
"""A job's verdict class number (LOOSE: none) and, for a class, what the walk needs of it."""


class QueueIndex:
    """The waiting jobs by verdict class, each class's in queue order, kept from the driver's log."""

    def __init__(self) -> None:
        self.cycle = 0
        """The number of the cycle the index is at (one more at each :meth:`sync`)."""
        self._log: PendingLog | None = None
        self._version = -1
        self._numbering: object = None
        """The identity of the class numbering the index was built with (the scheduler's dict)."""
        self._next = 0
        self.jobs: dict[int, PendingJob] = {}
        """Each waiting job by its place in the queue (a number that only grows along the queue)."""
        self._place: dict[str, int] = {}
        self._slots: dict[int, int] = {}
        """The index's own dense number (slot) of each verdict class it has seen since it was last
        built: the walk's arrays are by slot, so their length follows the classes of the queue,
        not every class the scheduler ever numbered."""
        self.members: dict[int, list[int]] = {}
        """Each class (by slot) with waiting jobs: their places, in queue order."""
        self.loose: set[int] = set()
        """The places of jobs with no class."""
        self.info: dict[int, ClassInfo] = {}
        self.of_shape: dict[int, int] = {}
        """The class of each shape (one each: without admission a class is its shape)."""
        self.first = np.full(0, NONE, dtype=np.int64)
        """Each class's first waiting job's place (NONE: none), by class number."""
        self.sizes = np.zeros((0, 4), dtype=np.int64)
        """Each class's request size (``allocate._request_size``), by class number."""
        self._groups: dict[Hashable, list[int]] = {}
        self._dominated: dict[tuple[Hashable, tuple[int, int, int, int]], IntArray] = {}
        self._dominated_keys: dict[Hashable, list[tuple[Hashable, tuple[int, int, int, int]]]] = {}
        self.entries: dict[str, _Entry] = {}
        """Each job's class over the cycles (see :class:`ClassStatuses`); a new dict when trimmed."""
        self.rebuilds = 0
        """Times the index was built from the whole queue (for tests and benchmarks)."""
        self.compactions = 0
        """Of those, the times it was built afresh to drop the slots of classes no job waits in."""

    def sync(self, snapshot: ClusterSnapshot, numbering: object, classify: Classify) -> bool:
        """Bring the index to ``snapshot``'s queue and start a new cycle; False without a log.

        ``numbering`` is the scheduler's class numbering (by identity: it is replaced when reset),
        ``classify`` the class of a job under it.
        """
        log = snapshot.pending_log
        if log is None:
            if self._log is not None or self.jobs:  # a driver without a log: hold none of its jobs
                self._log = None
                self._clear()
            return False
        self.cycle += 1
        changes = log.since(self._version) if log is self._log and numbering is self._numbering else None
        if changes is None or not self._apply(changes, classify) or len(self._place) != len(snapshot.pending):
            self._rebuild(snapshot, classify)
        elif len(self._slots) > 2 * len(self.members) + _SLACK:
            self.compactions += 1
            self._rebuild(snapshot, classify)
        self._log, self._version, self._numbering = log, log.version, numbering
        if len(self.entries) > 2 * len(self._place) + 1024:
            # A new dict: results of past cycles keep the one they were made with.
            self.entries = {job_id: self.entries[job_id] for job_id in self._place}
        return True

    def _apply(self, changes: Sequence[Change], classify: Classify) -> bool:
        """Apply the log's changes; False at the first the index cannot follow (then rebuild)."""
        for kind, item in changes:
            if kind == "add" and isinstance(item, PendingJob):
                if item.job.id in self._place:
                    return False
                self._add(item, self._next, classify)
                self._next += 1
            elif kind == "remove" and isinstance(item, str):
                if item not in self._place:
                    return False
                self._remove(item)
            elif kind == "replace" and isinstance(item, PendingJob):
                place = self._place.get(item.job.id)
                if place is None:
                    return False
                self._remove(item.job.id)
                self._add(item, place, classify)
            else:
                return False
        return True

    def _rebuild(self, snapshot: ClusterSnapshot, classify: Classify) -> None:
        self.rebuilds += 1
        self._clear()
        for pending in snapshot.pending:
            self._add(pending, self._next, classify)
            self._next += 1

    def _clear(self) -> None:
        self.jobs, self._place, self.members, self.loose, self._slots = {}, {}, {}, set(), {}
        self.info, self.of_shape, self.entries = {}, {}, {}
        self.first = np.full(0, NONE, dtype=np.int64)
        self.sizes = np.zeros((0, 4), dtype=np.int64)
        self._groups, self._dominated, self._dominated_keys = {}, {}, {}
        self._next = 0

    def _add(self, pending: PendingJob, place: int, classify: Classify) -> None:
        job_id = pending.job.id
        verdict_class, info = classify(pending)
        self.jobs[place] = pending
        self._place[job_id] = place
        number = LOOSE
        if verdict_class != LOOSE and info is not None:
            number = self._slots.get(verdict_class, -1)
            if number < 0:
                number = self._slots[verdict_class] = len(self._slots)
                self._register(number, info)
        if number == LOOSE:
            self.loose.add(place)
        else:
            members = self.members.setdefault(number, [])
            if not members or members[-1] < place:
                members.append(place)
            else:
                bisect.insort(members, place)
            self.first[number] = members[0]
        self.entries[job_id] = _Entry(number, self.cycle, None, self.entries.get(job_id))

    def _remove(self, job_id: str) -> None:
        place = self._place.pop(job_id)
        del self.jobs[place]
        entry = self.entries[job_id]
        self.entries[job_id] = _Entry(entry.number, entry.added, self.cycle, entry.before)
        if entry.number == LOOSE:
            self.loose.discard(place)
            return
        members = self.members[entry.number]
        if members[0] == place:  # the usual case: the first of its class started
            del members[0]
        else:
            del members[bisect.bisect_left(members, place)]
        if members:
            self.first[entry.number] = members[0]
        else:
            del self.members[entry.number]
            self.first[entry.number] = NONE

    def _register(self, number: int, info: ClassInfo) -> None:
        self.info[number] = info
        self.of_shape[info.shape] = number
        if number >= len(self.first):
            grown = max(2 * len(self.first), number + 1, 64)
            self.first = np.concatenate([self.first, np.full(grown - len(self.first), NONE, dtype=np.int64)])
            self.sizes = np.concatenate([self.sizes, np.zeros((grown - len(self.sizes), 4), dtype=np.int64)])
        self.sizes[number] = info.size
        if info.group is not None:
            self._groups.setdefault(info.group, []).append(number)
            for key in self._dominated_keys.pop(info.group, ()):
                del self._dominated[key]

    def dominated(self, group: Hashable, size: tuple[int, int, int, int]) -> IntArray | None:
        """The classes of dominance group ``group`` whose request is at least ``size`` on every
        resource (None: the group has no class). Kept per size until the group gains a class: a
        failure's size is its job's, so a long run asks for the same few sizes again and again."""
        key = (group, size)
        found = self._dominated.get(key)
        if found is None:
            numbers = self._groups.get(group)
            if numbers is None:
                return None
            slots = np.array(numbers, dtype=np.int64)
            found = slots[(self.sizes[slots] >= np.array(size, dtype=np.int64)).all(axis=1)]
            self._dominated[key] = found
            self._dominated_keys.setdefault(group, []).append(key)
        return found


class ClassStatuses(Mapping[str, Status]):
    """Every waiting job's status in one cycle: its own where the walk visited it, else its class's.

    ``explicit`` holds the statuses of the jobs visited; a job bound in the cycle has none; any
    other job of the cycle's queue belongs to a class whose verdict the walk knew when it reached
    the job (``verdicts``). Read at any later time, it answers for that cycle.
    """

    def __init__(
        self,
        explicit: Mapping[str, Status],
        bound: set[str],
        entries: Mapping[str, _Entry],
        cycle: int,
        verdicts: ClassVerdicts,
    ) -> None:
        self._explicit, self._bound, self._entries = explicit, bound, entries
        self._cycle, self._verdicts = cycle, verdicts

    def __getitem__(self, job_id: str) -> Status:
        found = self._explicit.get(job_id)
        if found is not None:
            return found
        entry = self._entries.get(job_id)
        if entry is None or job_id in self._bound:
            raise KeyError(job_id)
        number = entry.at(self._cycle)
        verdict = self._verdicts.get(number) if number is not None and number != LOOSE else None
        if verdict is None:
            raise KeyError(job_id)
        return verdict

    def __iter__(self) -> Iterator[str]:
        yield from self._explicit
        for job_id in self._entries:
            if job_id not in self._explicit and job_id in self:
                yield job_id

    def __len__(self) -> int:
        return sum(1 for _ in self)
