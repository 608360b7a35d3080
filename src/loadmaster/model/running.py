"""Serial numbers of running jobs: how a driver lets the scheduler's books find a job's row by array.

A scheduler keeps per-job rows from cycle to cycle (the release plan's flattened placements, the
learned policy's node features) and must find, every cycle, the row of each running job. Looking
each job up in a dict is a Python step per running job, thousands on a large cluster. A driver
that keeps its running jobs as they come and go (the simulator) instead numbers each run when it
starts and hands the scheduler the numbers in the snapshot's running order
(:attr:`ClusterSnapshot.running_serials`); a book then maps number to row with one gather.

Numbers come from one counter for the whole process, so two runs never share one, whichever
driver or simulation started them: a book kept across simulations (a scheduler reused) cannot
mistake one run for another. Only their identity matters, never their value.
"""

from __future__ import annotations

import itertools

import numpy as np
import numpy.typing as npt

IntArray = npt.NDArray[np.int64]

_SERIALS = itertools.count()


def next_serial() -> int:
    """A number no other run in this process has (each start of a job is a new run)."""
    return next(_SERIALS)


class RunningSerials:
    """A driver's running jobs' serial numbers, kept in its running order as jobs start and stop.

    A dict of serial by job id, changed by the same operations as the driver's dict of running
    jobs by id (a start of a job id already running keeps its place, a stop removes it), so its
    order is that dict's by construction, at the cost of a dict write per start and stop (a job
    runs for many cycles; a simulation that reads no serials, as strict FIFO, pays nothing else).
    :meth:`array` is made when asked for after a change (a snapshot carries the keeper, so a cycle
    that reads no serials builds nothing), in one C loop, and is the same object until the next
    change: a reader may keep it and compare it with a later one by identity first.
    """

    def __init__(self) -> None:
        self._serials: dict[str, int] = {}
        self._array: IntArray | None = None

    def __len__(self) -> int:
        return len(self._serials)

    def start(self, job_id: str, serial: int) -> None:
        """``job_id`` runs as ``serial``: at the end, or in its place if it was running already."""
        self._serials[job_id] = serial
        self._array = None

    def stop(self, job_id: str) -> None:
        """``job_id`` no longer runs (nothing if it did not)."""
        if self._serials.pop(job_id, None) is not None:
            self._array = None

    def array(self) -> IntArray:
        """The serials in running order, read-only; the same object until the next change."""
        if self._array is None:
            serials = self._serials
            array = np.fromiter(serials.values(), dtype=np.int64, count=len(serials))
            array.setflags(write=False)
            self._array = array
        return self._array


class SerialSlots:
    """A book's map from a run's serial number to its slot, as an array (one gather per cycle).

    The array covers the serials from the smallest held on; it grows by doubling at either end.
    Its size is the span of the serials the book has held since it was last cleared (books clear
    it when they drop the jobs that no longer run), not the number of jobs.
    """

    def __init__(self) -> None:
        self._base = 0
        self._slots = np.zeros(0, dtype=np.int64)

    def get(self, serials: IntArray) -> IntArray:
        """The slot of each serial, -1 where it has none (a new array)."""
        slots = self._slots
        if not len(serials) or not len(slots):
            return np.full(len(serials), -1, dtype=np.int64)
        at = serials - self._base
        if int(at.min()) >= 0 and int(at.max()) < len(slots):
            return slots[at]
        found = np.full(len(serials), -1, dtype=np.int64)
        inside = (at >= 0) & (at < len(slots))
        found[inside] = slots[at[inside]]
        return found

    def set(self, serial: int, slot: int) -> None:
        """``serial`` is held in ``slot``."""
        slots = self._slots
        if not len(slots):
            self._base, slots = serial, np.full(64, -1, dtype=np.int64)
        at = serial - self._base
        if at < 0:
            grow = max(len(slots), -at)
            slots = np.concatenate([np.full(grow, -1, dtype=np.int64), slots])
            self._base -= grow
            at += grow
        elif at >= len(slots):
            grow = max(len(slots), at + 1 - len(slots))
            slots = np.concatenate([slots, np.full(grow, -1, dtype=np.int64)])
        slots[at] = slot
        self._slots = slots
