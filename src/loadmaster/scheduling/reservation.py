"""Reservations in time: when a waiting job can start at the earliest, and on which GPUs.

The future is read from running jobs' expected ends (start + estimated run
time) and from reservations already made: a reservation holds its resources
over [start, end). Finding a job's earliest start scans candidate times
(now, each expected end, each reservation end) in order and places the job on
the cluster as it will be then, less the reservations that overlap the job's
own run.
"""

from __future__ import annotations

import bisect
import collections
import copy
import itertools
import math
from collections.abc import Callable, Collection, Iterator, Sequence
from dataclasses import dataclass
from typing import cast, overload

import numpy as np
import numpy.typing as npt

from loadmaster.model import (
    MILLI_PER_GPU,
    Job,
    PendingJob,
    RunningJob,
    TaskPlacement,
    TaskRequest,
    gpu_summary,
    per_node,
)
from loadmaster.model.running import SerialSlots
from loadmaster.scheduling import fit
from loadmaster.scheduling.fit import IntArray
from loadmaster.scheduling.framework import BoolArray, CycleContext, PlaceGangPlugin
from loadmaster.scheduling.placement import Scoring, place_job
from loadmaster.scheduling.scan_kernel import KERNELS
from loadmaster.scheduling.state import Held, WorkingState

JUMP = 16
"""Releases applied one by one in a scan; more at once are summed in a single vectorised step."""

CUMULATIVE_CELLS = 250_000
"""Largest (releases x nodes) matrix a plan builds to find a job's first fit in one step (three of
them, 6 MB in all); beyond it the search bisects, a few per-node sums per step."""


@dataclass(frozen=True, slots=True)
class Reservation:
    """Resources held for ``job_id`` over [start_s, end_s)."""

    job_id: str
    start_s: float
    end_s: float
    placements: tuple[TaskPlacement, ...]
    held: Held

    def overlaps(self, start_s: float, end_s: float) -> bool:
        """True if the reservation holds its resources at some time in [start_s, end_s)."""
        return self.start_s < end_s and start_s < self.end_s


@dataclass(frozen=True, slots=True)
class Release:
    """A running job's resources coming back at ``end_s`` (its expected end, never before now)."""

    end_s: float
    placements: tuple[TaskPlacement, ...]


def releases(running: Sequence[RunningJob], now: float, estimate: dict[str, float]) -> list[Release]:
    """Running jobs' expected ends in time order; an overdue job is expected to end now."""
    ends = [
        Release(max(r.start_s + estimate.get(r.job.id, r.job.time_limit_s), now), r.placements)
        for r in running
    ]
    ends.sort(key=lambda release: release.end_s)
    return ends


def without(
    state: WorkingState,
    reservations: Sequence[Reservation],
    start_s: float,
    end_s: float,
    sums: HeldSums | None = None,
) -> WorkingState:
    """``state`` less the reservations overlapping [start_s, end_s): a copy, or ``state`` if none do.

    ``sums`` (of the same ``reservations``) keeps each set's summed holdings for the next caller."""
    overlapping = tuple(i for i, r in enumerate(reservations) if r.overlaps(start_s, end_s))
    if not overlapping:
        return state
    if sums is None or sums.reservations is not reservations:
        sums = HeldSums(reservations)
    held = sums.of(overlapping)
    assert held is not None
    return state.less(held)


class HeldSums:
    """Summed holdings of sets of reservations, by their indices in ``reservations``: a list that only
    grows (one backfill walk's), so a set's sum, made once, stays right for every later search.

    A set of several is summed in one numpy step from the reservations' :attr:`Held.flat` vectors,
    stacked once per reservation, not as a chain of pairwise additions (three arrays each).
    """

    def __init__(self, reservations: Sequence[Reservation]) -> None:
        self.reservations = reservations
        self._sums: dict[tuple[int, ...], Held] = {}
        self._built = 0
        """Reservations whose rows are in the buffers below (the first ``_built``)."""
        self._flat: IntArray | None = None
        """Row i: ``reservations[i].held.flat``; rows beyond ``_built`` are room to grow into."""
        self._starts = np.zeros(0, dtype=np.float64)
        self._ends = np.zeros(0, dtype=np.float64)
        self._nodes = np.zeros(0, dtype=np.int64)
        """The nodes each reservation holds anything of, back to back (see :meth:`arrays`)."""
        self._upto = np.zeros(1, dtype=np.int64)
        """Where each reservation's nodes start in ``_nodes``, with a leading 0, for the rows whose
        nodes were found (:meth:`_find_nodes`)."""
        self._floats: npt.NDArray[np.float64] | None = None
        """The rows as float64, for :meth:`rows`."""
        self._spans: (
            tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], IntArray, IntArray, IntArray] | None
        ) = None
        """:meth:`arrays`, for the first ``_built`` reservations."""

    def _grow(self) -> None:
        """Add the rows of the reservations appended since the last call (the list only grows).

        The buffers double when full, so a walk's searches, each of which finds one more
        reservation than the last, add one row each rather than rebuilding every array."""
        reservations, built = self.reservations, self._built
        count = len(reservations)
        if built == count:
            return
        flat = self._flat
        if flat is None or len(flat) < count:
            room = max(8, 2 * count)
            grown = np.zeros((room, len(reservations[0].held.flat)), dtype=np.int64)
            starts, ends = np.zeros(room), np.zeros(room)
            if flat is not None:
                grown[:built], starts[:built], ends[:built] = (
                    flat[:built],
                    self._starts[:built],
                    self._ends[:built],
                )
            self._flat, self._starts, self._ends = grown, starts, ends
            flat = grown
        for i in range(built, count):
            reservation = reservations[i]
            flat[i] = reservation.held.flat
            self._starts[i], self._ends[i] = reservation.start_s, reservation.end_s
        self._built = count

    def _find_nodes(self, gpus: int) -> None:
        """Find the nodes of the rows added since the last call (only :meth:`arrays` reads them)."""
        flat, known = self._flat, len(self._upto) - 1
        assert flat is not None
        nodes = flat.shape[1] // (gpus + 2)  # Held.flat: GPUs, then CPU and memory per node
        found, upto = [self._nodes], [int(self._upto[-1])]
        for row in flat[known : self._built]:
            on_gpus = np.flatnonzero(row[: nodes * gpus]) // gpus
            found.append(np.unique(np.concatenate([on_gpus, np.flatnonzero(row[nodes * gpus :]) % nodes])))
            upto.append(upto[-1] + len(found[-1]))
        self._nodes = np.concatenate(found)
        self._upto = np.concatenate([self._upto, np.array(upto[1:], dtype=np.int64)])

    def _stacked(self) -> IntArray:
        """Row i: ``reservations[i].held.flat`` (a view of the buffer)."""
        self._grow()
        assert self._flat is not None
        return self._flat[: self._built]

    def arrays(
        self, width: int, gpus: int
    ) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], IntArray, IntArray, IntArray]:
        """The reservations' starts, ends and :attr:`Held.flat` rows (``width`` long, for none; ``gpus``
        per node), and the nodes each row holds anything of (reservation i's are ``nodes[upto[i]:
        upto[i + 1]]``), kept and grown with the list (a walk's searches read them all)."""
        spans = self._spans
        count = len(self.reservations)
        if spans is None or len(spans[0]) != count:
            stack = np.zeros((0, width), dtype=np.int64)  # no reservation: no row (the buffers are empty)
            if count:
                stack = self._stacked()
                self._find_nodes(gpus)
            spans = self._spans = (self._starts[:count], self._ends[:count], stack, self._nodes, self._upto)
        return spans

    def rows(self, hits: BoolArray) -> IntArray:
        """The summed holdings (:attr:`Held.flat`) of the reservations of each row of ``hits`` (rows:
        candidate times; columns: reservations, all of them), in one matrix product.

        The product is in float64 (BLAS; numpy's integer product is a slow loop) and exact: every
        term is 0 or 1 times an integer, and every partial sum an integer far below 2**53."""
        stack = self._stacked()
        floats = self._floats
        if floats is None or len(floats) != len(stack):
            floats = self._floats = stack.astype(np.float64)
        return (hits @ floats).astype(np.int64)

    def of(self, overlapping: tuple[int, ...]) -> Held | None:
        """The summed holdings of the reservations ``overlapping`` (indices in order), None if none."""
        if not overlapping:
            return None
        held = self._sums.get(overlapping)
        if held is None:
            reservations = self.reservations
            if len(overlapping) == 1:
                held = reservations[overlapping[0]].held
            else:
                flat = np.add.reduce(self._stacked().take(overlapping, axis=0), axis=0)
                mig = tuple(p for i in overlapping for p in reservations[i].held.mig)
                held = Held.of_flat(flat, reservations[overlapping[0]].held.gpu.shape, mig)
            self._sums[overlapping] = held
        return held


def _room(state: WorkingState, allowed: BoolArray, request: TaskRequest) -> int:
    """How many tasks of ``request`` the allowed nodes of ``state`` can take in all."""
    return int(np.add.reduce(fit.capacity(state, request)[allowed]))


def _room_less(state: WorkingState, held: Held, allowed: BoolArray, request: TaskRequest) -> int:
    """``_room`` of ``state`` less ``held`` (clamped at zero, as :meth:`WorkingState.subtract` does),
    without building that state: only the arrays the request's capacity reads. No MIG pool.

    Called at most candidate times of every reservation search, so each term is computed only
    when the request has it (no array of "unlimited" to take the minimum with).
    """
    cap: IntArray | None = None
    if request.whole_gpus:
        # max(free - held, 0) is a whole GPU exactly when the GPU is wholly free and nothing of it
        # is held (held >= 0, free <= a whole GPU): the state's count of wholly free GPUs less those
        # that are held, found among the few GPUs the reservations hold rather than over all of them.
        cells = held.gpu_cells
        gpus = state.gpu_free.shape[1]
        taken = cells[state.gpu_free.ravel()[cells] == MILLI_PER_GPU] // gpus
        cap = state.whole_free - np.bincount(taken, minlength=len(state.whole_free))
        cap //= request.whole_gpus
    elif request.is_fractional:
        cap = np.add.reduce(np.maximum(state.gpu_free - held.gpu, 0) // request.gpu_milli, axis=1)
    elif request.mig_profile is not None:
        return 0 if state.mig is None else _room(without_held(state, held), allowed, request)
    if request.cpu_milli:
        cpu = np.maximum(state.cpu_free - held.cpu, 0) // request.cpu_milli
        cap = cpu if cap is None else np.minimum(cap, cpu)
    if request.memory_mib:
        memory = np.maximum(state.memory_free - held.memory, 0) // request.memory_mib
        cap = memory if cap is None else np.minimum(cap, memory)
    if cap is None:
        return int(np.count_nonzero(allowed)) * int(fit.UNLIMITED)
    return int(np.add.reduce(cap[allowed]))  # the ufunc itself: ndarray.sum's wrapper costs as much


def without_held(state: WorkingState, held: Held) -> WorkingState:
    """A copy of ``state`` less ``held`` (clamped at zero)."""
    return state.less(held)


@dataclass(frozen=True, slots=True)
class Placer:
    """What placing a job needs besides the state: its allowed nodes, the scoring and the topology rule."""

    allowed: BoolArray
    scoring: Scoring
    topology: PlaceGangPlugin | None

    @property
    def pure(self) -> bool:
        """Whether a placement reads nothing but the view: no topology plugin, no GPU-choice plugin,
        and only scores that read the state alone (``ScorePlugin.pure``)."""
        return (
            self.topology is None
            and self.scoring.gpu_choice is None
            and all(plugin.pure for plugin, _ in self.scoring.plugins)
        )


FlatCache = dict[int, tuple[tuple[TaskPlacement, ...], npt.NDArray[np.int64], npt.NDArray[np.int64]]]
"""Placements flattened to arrays, by the id of their tuple (kept across cycles by the scheduler)."""


def _flat(
    placements: tuple[TaskPlacement, ...], cache: FlatCache
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    hit = cache.get(id(placements))
    if hit is not None and hit[0] is placements:
        return hit[1], hit[2]
    gpu = np.array(
        [(p.node, g, p.gpu_milli) for p in placements for g in p.gpu_indices], dtype=np.int64
    ).reshape(-1, 3)
    node = np.array([(p.node, p.cpu_milli, p.memory_mib) for p in placements], dtype=np.int64).reshape(-1, 3)
    cache[id(placements)] = (placements, gpu, node)
    return gpu, node


PlanKey = tuple[tuple[float, ...], tuple[tuple[TaskPlacement, ...], ...]]
"""A plan's times and each release's placements in order: equal keys, equal plans."""


class ReleasePlan:
    """Every expected release flattened into arrays, in time order, once per cycle.

    ``gpu`` rows are (node, GPU index, milli-GPU) and ``node`` rows are
    (node, milli-CPU, MiB); the first ``k`` releases own the first
    ``gpu_upto[k]`` and ``node_upto[k]`` rows.
    """

    def __init__(self, ends: Sequence[Release], cache: FlatCache) -> None:
        flats = [_flat(e.placements, cache) for e in ends]
        empty = np.zeros((0, 3), dtype=np.int64)
        self.ends: Sequence[Release] = ends
        self.times = [e.end_s for e in ends]
        self.gpu = np.concatenate([g for g, _ in flats]) if flats else empty
        self.node = np.concatenate([n for _, n in flats]) if flats else empty
        self.gpu_upto = _upto([len(g) for g, _ in flats])
        self.node_upto = _upto([len(n) for _, n in flats])
        self._per_node: dict[
            int, tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]
        ] = {}
        self._cumulative: (
            tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]] | None
        ) = None
        self._fingerprint: PlanKey | None = None
        self._tail_arrays: tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]] | None = None
        self._cumulative_gpu: IntArray | None = None
        self._cumulative_flat: IntArray | None = None
        self._released: dict[int, tuple[IntArray, IntArray, IntArray]] = {}
        self._times_array: npt.NDArray[np.float64] | None = None

    @classmethod
    def of(
        cls,
        ends: Sequence[Release],
        *,
        times: list[float],
        gpu: npt.NDArray[np.int64],
        gpu_upto: npt.NDArray[np.int64],
        node: npt.NDArray[np.int64],
        node_upto: npt.NDArray[np.int64],
    ) -> ReleasePlan:
        """A plan from its parts, already flattened and in time order (see :class:`ReleaseBook`)."""
        plan = cls.__new__(cls)
        plan.ends, plan.times, plan.gpu, plan.gpu_upto = ends, times, gpu, gpu_upto
        plan.node, plan.node_upto, plan._per_node = node, node_upto, {}
        plan._cumulative = None
        plan._fingerprint = None
        plan._tail_arrays = None
        plan._cumulative_gpu = None
        plan._cumulative_flat = None
        plan._released = {}
        plan._times_array = None
        return plan

    def times_array(self) -> npt.NDArray[np.float64]:
        """:attr:`times` as an array (kept)."""
        if self._times_array is None:
            self._times_array = np.array(self.times, dtype=np.float64)
        return self._times_array

    def fingerprint(self) -> PlanKey:
        """What the plan is made of: its times and each release's placements, in order. Two plans
        with equal fingerprints have the same rows, so every search reads the same future from them."""
        if self._fingerprint is None:
            self._fingerprint = (tuple(self.times), _placements_of(self.ends))
        return self._fingerprint

    def tail_arrays(self) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.intp]]:
        """The fingerprint as arrays: the times, and the identity of each release's placements
        (kept: :func:`_common_tail` compares a plan with several others in a cycle)."""
        if self._tail_arrays is None:
            times, placements = self.fingerprint()
            self._tail_arrays = (
                np.array(times, dtype=np.float64),
                np.fromiter(map(id, placements), dtype=np.intp, count=len(placements)),
            )
        return self._tail_arrays

    def per_node(
        self, k: int, size: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
        """GPUs, milli-CPU and MiB the first ``k`` releases give back, per node (kept: every
        reservation's search of the cycle probes the same ``k``s first)."""
        found = self._per_node.get(k)
        if found is None:
            g, n = self.gpu[: self.gpu_upto[k]], self.node[: self.node_upto[k]]
            found = (
                np.bincount(g[:, 0], minlength=size),
                np.bincount(n[:, 0], weights=n[:, 1], minlength=size).astype(np.int64),
                np.bincount(n[:, 0], weights=n[:, 2], minlength=size).astype(np.int64),
            )
            self._per_node[k] = found
        return found

    def released(self, k: int, shape: tuple[int, ...]) -> tuple[IntArray, IntArray, IntArray]:
        """Milli-GPU per GPU (``shape``: the state's GPU array), milli-CPU and MiB per node that the
        first ``k`` releases give back (kept: a cycle's searches ask for the same few ``k``s)."""
        found = self._released.get(k)
        if found is None or found[0].shape != shape:
            g, n = self.gpu[: self.gpu_upto[k]], self.node[: self.node_upto[k]]
            gpu = np.zeros(shape, dtype=np.int64)
            cpu = np.zeros(shape[0], dtype=np.int64)
            memory = np.zeros(shape[0], dtype=np.int64)
            np.add.at(gpu, (g[:, 0], g[:, 1]), g[:, 2])
            np.add.at(cpu, n[:, 0], n[:, 1])
            np.add.at(memory, n[:, 0], n[:, 2])
            found = self._released[k] = (gpu, cpu, memory)
        return found

    def cumulative(
        self, size: int
    ) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]] | None:
        """:meth:`per_node` for every ``k`` at once, as (releases + 1, nodes) matrices; None when
        they would be large (over :data:`CUMULATIVE_CELLS` cells: a big cluster's long plan)."""
        if self._cumulative is not None:
            return self._cumulative
        steps = len(self.times) + 1
        if steps * size > CUMULATIVE_CELLS:
            return None
        gpu_block = np.repeat(np.arange(1, steps), np.diff(self.gpu_upto))
        node_block = np.repeat(np.arange(1, steps), np.diff(self.node_upto))
        gpus = np.zeros((steps, size), dtype=np.int64)
        cpus = np.zeros((steps, size), dtype=np.int64)
        memories = np.zeros((steps, size), dtype=np.int64)
        np.add.at(gpus, (gpu_block, self.gpu[:, 0]), 1)
        np.add.at(cpus, (node_block, self.node[:, 0]), self.node[:, 1])
        np.add.at(memories, (node_block, self.node[:, 0]), self.node[:, 2])
        self._cumulative = (gpus.cumsum(axis=0), cpus.cumsum(axis=0), memories.cumsum(axis=0))
        return self._cumulative

    def cumulative_gpu(self, shape: tuple[int, ...]) -> IntArray | None:
        """Milli-GPU the first ``k`` releases give back per GPU, for every ``k``, as a (releases + 1,
        nodes, GPUs) array (``shape``: the state's GPU array); None over :data:`CUMULATIVE_CELLS`."""
        if self._cumulative_gpu is not None:
            return self._cumulative_gpu
        steps = len(self.times) + 1
        if steps * shape[0] * shape[1] > CUMULATIVE_CELLS:
            return None
        block = np.repeat(np.arange(1, steps), np.diff(self.gpu_upto))
        gpus = np.zeros((steps, *shape), dtype=np.int64)
        np.add.at(gpus, (block, self.gpu[:, 0], self.gpu[:, 1]), self.gpu[:, 2])
        self._cumulative_gpu = gpus.cumsum(axis=0)
        return self._cumulative_gpu

    def cumulative_flat(self, shape: tuple[int, ...]) -> IntArray | None:
        """:meth:`cumulative_gpu` and :meth:`cumulative`'s CPU and memory side by side, a row per ``k``
        in :attr:`Held.flat`'s layout; None where either is None."""
        if self._cumulative_flat is not None:
            return self._cumulative_flat
        gpu = self.cumulative_gpu(shape)
        matrices = self.cumulative(shape[0])
        if gpu is None or matrices is None:
            return None
        self._cumulative_flat = np.concatenate([gpu.reshape(len(gpu), -1), matrices[1], matrices[2]], axis=1)
        return self._cumulative_flat

    def plus(self, extra: Sequence[Release]) -> ReleasePlan:
        """This plan with ``extra`` releases merged in, in time order (ties: this plan's first).

        The extra releases (jobs started in this cycle) are flattened in one
        step rather than one array per job, and the merge is a reordering of
        row blocks: far cheaper than rebuilding the plan from every job.
        """
        if not extra:
            return self
        gpu = np.array(
            [(p.node, g, p.gpu_milli) for e in extra for p in e.placements for g in p.gpu_indices],
            dtype=np.int64,
        ).reshape(-1, 3)
        node = np.array(
            [(p.node, p.cpu_milli, p.memory_mib) for e in extra for p in e.placements], dtype=np.int64
        ).reshape(-1, 3)
        gpu_counts = [sum(len(p.gpu_indices) for p in e.placements) for e in extra]
        every_time = [*self.times, *(e.end_s for e in extra)]
        time_array = np.array(every_time, dtype=np.float64)
        order = np.argsort(time_array, kind="stable")
        merged = copy.copy(self)
        merged._per_node = {}
        merged._cumulative = None
        merged._fingerprint = None
        merged._tail_arrays = None
        merged._cumulative_gpu = None
        merged._cumulative_flat = None
        merged._released = {}
        merged._times_array = time_array[order]
        # The releases are not made one by one (a plan from the book holds thousands, most never
        # read): the merged plan reads each one's time and placements through the order, on demand.
        everyone = [*_placements_of(self.ends), *(e.placements for e in extra)]
        chosen = order.tolist()
        merged.times = [every_time[i] for i in chosen]
        merged.ends = _Ends(merged.times, everyone, chosen)
        if self._tail_arrays is not None:  # kept in step where this plan has them, else made on demand
            extra_ids = np.fromiter((id(e.placements) for e in extra), dtype=np.intp, count=len(extra))
            merged._tail_arrays = (
                time_array[order],
                np.concatenate([self._tail_arrays[1], extra_ids])[order],
            )
        merged.gpu, merged.gpu_upto = _merge_blocks(self.gpu, self.gpu_upto, gpu, _upto(gpu_counts), order)
        counts = [len(e.placements) for e in extra]
        merged.node, merged.node_upto = _merge_blocks(self.node, self.node_upto, node, _upto(counts), order)
        return merged


def _placements_of(ends: Sequence[Release]) -> tuple[tuple[TaskPlacement, ...], ...]:
    """Each release's placements, in order (from a book's plan without making its releases)."""
    return ends.placements() if isinstance(ends, _Ends) else tuple(e.placements for e in ends)


class _Ends(Sequence[Release]):
    """A plan's releases in time order, made on demand from the book's rows (most are never read)."""

    def __init__(
        self, times: list[float], placements: list[tuple[TaskPlacement, ...]], slots: list[int]
    ) -> None:
        self._times = times
        self._placements = placements
        self._slots = slots

    def __len__(self) -> int:
        return len(self._times)

    def placements(self) -> tuple[tuple[TaskPlacement, ...], ...]:
        """Each release's placements, in time order (without making the releases)."""
        return tuple(map(self._placements.__getitem__, self._slots))

    @overload
    def __getitem__(self, index: int) -> Release: ...
    @overload
    def __getitem__(self, index: slice) -> list[Release]: ...
    def __getitem__(self, index: int | slice) -> Release | list[Release]:
        if isinstance(index, slice):
            return [self[i] for i in range(*index.indices(len(self)))]
        return Release(self._times[index], self._placements[self._slots[index]])


class ReleaseBook:
    """The running jobs' releases kept from cycle to cycle, for plugins whose estimate of a running
    job depends on the job alone (``ReservePlugin.fixed_running_estimates``).

    Each running job is flattened and its expected end computed once, when it
    is first seen, into arrays that grow by doubling; a cycle's plan is then a
    stable sort of the ends (clamped to now, ties in the snapshot's order of
    running jobs, exactly as :func:`releases` sorts them) and a gather of rows,
    all vectorised. Jobs no longer running are dropped once they outnumber the
    running ones, so the book stays the size of the cluster's running set.

    A job's slot is found by its run's serial number when the snapshot carries them
    (``ClusterSnapshot.running_serials``: one gather for all jobs), else by the id of its object.
    """

    def __init__(self) -> None:
        self._slot_of: dict[int, int] = {}
        """Slot of each running job, by the id of its object (``_jobs`` keeps the objects alive)."""
        self._slot_by_serial = SerialSlots()
        """Slot of each running job, by its run's serial number (where the snapshot gives them)."""
        self._jobs: list[RunningJob] = []
        self._placements: list[tuple[TaskPlacement, ...]] = []
        self._natural = np.zeros(64, dtype=float)
        self._ids = np.zeros(64, dtype=np.intp)
        """The identity of each slot's placements (``_placements`` keeps them alive): a plan's
        :meth:`ReleasePlan.tail_arrays` is a gather of it."""
        self._gpu_at = np.zeros(64, dtype=np.int64)
        self._gpu_count = np.zeros(64, dtype=np.int64)
        self._node_at = np.zeros(64, dtype=np.int64)
        self._node_count = np.zeros(64, dtype=np.int64)
        self._gpu_rows = np.zeros((256, 3), dtype=np.int64)
        self._node_rows = np.zeros((256, 3), dtype=np.int64)
        self._gpu_used = 0
        self._node_used = 0
        self._last: tuple[list[RunningJob] | IntArray, float, float, ReleasePlan] | None = None
        """The last plan made, with its running jobs (or their serials), their earliest expected end
        and the time then."""

    def __len__(self) -> int:
        """Jobs the book holds (running now or lately)."""
        return len(self._placements)

    def _add(
        self,
        running: RunningJob,
        natural_end_s: float,
        gpu: IntArray2,
        node: IntArray2,
        serial: int | None = None,
    ) -> int:
        slot = len(self._placements)
        if slot == len(self._natural):
            for name in ("_natural", "_ids", "_gpu_at", "_gpu_count", "_node_at", "_node_count"):
                column = getattr(self, name)
                setattr(self, name, np.concatenate([column, np.zeros_like(column)]))
        self._gpu_rows, self._gpu_at[slot] = _append(self._gpu_rows, self._gpu_used, gpu), self._gpu_used
        self._node_rows, self._node_at[slot] = (
            _append(self._node_rows, self._node_used, node),
            self._node_used,
        )
        self._gpu_used += len(gpu)
        self._node_used += len(node)
        self._gpu_count[slot], self._node_count[slot] = len(gpu), len(node)
        self._natural[slot] = natural_end_s
        self._ids[slot] = id(running.placements)
        self._placements.append(running.placements)
        self._jobs.append(running)
        if serial is None:
            self._slot_of[id(running)] = slot
        else:
            self._slot_by_serial.set(serial, slot)
        return slot

    def _compact(self, slots: list[int], serials: IntArray | None) -> None:
        """Keep only the jobs running now, in their order (slot i is the i-th, ``slots[i]`` before),
        known from then on by their serials when given, else by their objects."""
        jobs = self._jobs
        old = (self._natural, self._gpu_at, self._gpu_count, self._node_at, self._node_count)
        gpu_rows, node_rows, placements = self._gpu_rows, self._node_rows, self._placements
        self.__init__()  # type: ignore[misc]
        numbers: list[int | None] = [None] * len(slots) if serials is None else serials.tolist()
        for slot, serial in zip(slots, numbers, strict=True):
            gpu = gpu_rows[old[1][slot] : old[1][slot] + old[2][slot]]
            node = node_rows[old[3][slot] : old[3][slot] + old[4][slot]]
            self._add(jobs[slot], float(old[0][slot]), gpu, node, serial)
            self._placements[-1] = placements[slot]
            self._ids[len(self._placements) - 1] = id(placements[slot])

    def plan(
        self,
        running: Collection[RunningJob],
        now: float,
        estimate_s: Callable[[RunningJob], float],
        serials: IntArray | None = None,
    ) -> ReleasePlan:
        """The plan ``ReleasePlan(releases(running, now, estimates), cache)`` would be.

        The last plan itself when the same jobs run (the same objects, in the same order) and
        no expected end is before now, then or now (no end is clamped): it is the same plan,
        and the sums it keeps for searches stay valid. With ``serials`` (the snapshot's
        ``running_serials``), "the same jobs" is equal serial arrays (the same array, usually)
        and the slots are one gather; without, each job's slot is looked up by the id of its
        object in one pass of C loops.
        """
        key: list[RunningJob] | IntArray
        if serials is not None:
            found = self._slots_by_serial(running, estimate_s, serials, now)
            if isinstance(found, ReleasePlan):
                return found
            index, key = found, serials
        else:
            jobs = list(running)
            last = self._last
            if (
                last is not None
                and isinstance(last[0], list)
                and last[0] == jobs
                and max(now, last[2]) <= last[1]
            ):
                return last[3]
            slots: list[int | None] = list(map(self._slot_of.get, map(id, jobs)))
            if None in slots:
                for i, slot in enumerate(slots):
                    if slot is None:
                        job = jobs[i]
                        gpu, node = _flat(job.placements, {})
                        slots[i] = self._add(job, job.start_s + estimate_s(job), gpu, node)
            if len(self._placements) > 2 * len(jobs) + 1024:
                self._compact(cast(list[int], slots), None)
                slots = list(range(len(jobs)))
            index, key = np.array(slots, dtype=np.int64), jobs
        natural = self._natural[index]
        ends = np.maximum(natural, now)
        order = np.argsort(ends, kind="stable")  # as releases() sorts: by end, ties in running order
        chosen = index[order]
        gpu, gpu_upto = _gather(self._gpu_rows, self._gpu_at[chosen], self._gpu_count[chosen])
        node, node_upto = _gather(self._node_rows, self._node_at[chosen], self._node_count[chosen])
        ordered_ends = ends[order]
        times: list[float] = ordered_ends.tolist()
        ordered = _Ends(times, self._placements, chosen.tolist())
        plan = ReleasePlan.of(
            ordered, times=times, gpu=gpu, gpu_upto=gpu_upto, node=node, node_upto=node_upto
        )
        plan._tail_arrays = (ordered_ends, self._ids[chosen])
        earliest = float(natural.min()) if len(natural) else float("inf")
        self._last = (key, earliest, now, plan)
        return plan

    def _slots_by_serial(
        self,
        running: Collection[RunningJob],
        estimate_s: Callable[[RunningJob], float],
        serials: IntArray,
        now: float,
    ) -> IntArray | ReleasePlan:
        """:meth:`plan`'s slots of the running jobs through their ``serials``, or the last plan where
        it holds. Jobs new to the book (a few per cycle) are added one by one, the rest gathered."""
        last = self._last
        if (
            last is not None
            and isinstance(last[0], np.ndarray)
            and (last[0] is serials or np.array_equal(last[0], serials))
            and max(now, last[2]) <= last[1]
        ):
            return last[3]
        index = self._slot_by_serial.get(serials)
        missing = np.flatnonzero(index < 0)
        if len(missing):
            jobs = list(running)
            for i in missing.tolist():
                job = jobs[i]
                gpu, node = _flat(job.placements, {})
                index[i] = self._add(job, job.start_s + estimate_s(job), gpu, node, int(serials[i]))
        if len(self._placements) > 2 * len(serials) + 1024:
            self._compact(index.tolist(), serials)
            index = np.arange(len(serials), dtype=np.int64)
        return index


IntArray2 = npt.NDArray[np.int64]
"""Rows of three integers."""


def _append(rows: IntArray2, used: int, more: IntArray2) -> IntArray2:
    """``rows`` (of which ``used`` are in use) with ``more`` written after them, grown by doubling."""
    if used + len(more) > len(rows):
        grown = np.zeros((max(2 * len(rows), used + len(more)), 3), dtype=np.int64)
        grown[:used] = rows[:used]
        rows = grown
    rows[used : used + len(more)] = more
    return rows


def _gather(
    rows: npt.NDArray[np.int64], starts: npt.NDArray[np.int64], counts: npt.NDArray[np.int64]
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Blocks ``rows[starts[i] : starts[i] + counts[i]]`` one after another, and where each begins.

    Row k of the result, in block i, is ``rows[starts[i] - upto[i] + k]``: one offset per block,
    repeated over its rows and added to 0..total-1 (half the index arithmetic of repeating the
    block numbers and gathering both offsets through them; a plan gathers thousands of rows)."""
    upto = _upto(counts)
    index = np.repeat(starts - upto[:-1], counts)
    index += np.arange(upto[-1])
    return rows.take(index, axis=0), upto


def _upto(counts: Sequence[int] | npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """Prefix sums with a leading 0: where each block of rows starts, and the total at the end."""
    upto = np.zeros(len(counts) + 1, dtype=np.int64)
    np.cumsum(counts, dtype=np.int64, out=upto[1:])
    return upto


def _merge_blocks(
    rows_a: npt.NDArray[np.int64],
    upto_a: npt.NDArray[np.int64],
    rows_b: npt.NDArray[np.int64],
    upto_b: npt.NDArray[np.int64],
    order: npt.NDArray[np.intp],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Blocks of rows of a then b (block i of a is rows upto_a[i]:upto_a[i+1]), reordered by ``order``."""
    rows = np.concatenate([rows_a, rows_b])
    starts = np.concatenate([upto_a[:-1], upto_a[-1] + upto_b[:-1]])
    counts = np.concatenate([np.diff(upto_a), np.diff(upto_b)])[order]
    upto = _upto(counts)
    block_of_row = np.repeat(np.arange(len(order)), counts)
    index = starts[order][block_of_row] + (np.arange(upto[-1]) - upto[:-1][block_of_row])
    return rows[index], upto


class Future:
    """The cluster as it will be after the first ``k`` expected releases, for any ``k``, quickly.

    The state after ``k`` releases is the current state plus a vectorised
    sum of the plan's first entries: a binary search over ``k`` then costs a
    few such sums rather than a walk through every running job.
    """

    def __init__(self, state: WorkingState, plan: ReleasePlan) -> None:
        self.state = state
        self.plan = plan
        self.ends = plan.ends
        self.times = plan.times

    def after(self, k: int) -> WorkingState:
        """A new state: the current one after the first ``k`` releases."""
        state = self.state
        if not k:
            return state.copy()  # nothing released: the copy keeps the summaries, exact after every change
        # The plan's sums for k (kept: a cycle's searches start from the same few k), added in one
        # step per array rather than scattered into a copy release by release.
        gpu, cpu, memory = self.plan.released(k, state.gpu_free.shape)
        gpu_free = state.gpu_free + gpu
        whole_free, largest_share, free_milli = gpu_summary(gpu_free)
        view = WorkingState(
            nodes=state.nodes,
            gpu_free=gpu_free,
            cpu_free=state.cpu_free + cpu,
            memory_free=state.memory_free + memory,
            whole_free=whole_free,
            largest_share=largest_share,
            free_milli=free_milli,
            mig=state.mig.copy() if state.mig is not None else None,
            pods_free=state.pods_free.copy() if state.pods_free is not None else None,
        )
        if view.mig is not None:  # MIG instances are not in the flat arrays: free them one by one
            view.vacate_mig(p for release in self.ends[:k] for p in release.placements)
        return view

    def room_at_most(self, k: int, allowed: BoolArray, request: TaskRequest) -> int:
        """An upper bound of how many tasks of a whole-GPU (or GPU-less) request fit after ``k`` releases.

        Counts every released GPU as wholly free (exact unless GPUs are shared),
        without building the state: cheap enough for every step of a search.
        """
        state = self.state
        gpus, cpus, memories = self.plan.per_node(k, len(state.nodes))
        cap = _task_cap(state, request, gpus, cpus, memories)
        if cap is None:
            return int(np.count_nonzero(allowed)) * (np.iinfo(np.int64).max // 2)
        return int(cap[allowed].sum())

    def rooms_at_most(self, allowed: BoolArray, request: TaskRequest) -> IntArray | None:
        """:meth:`room_at_most` for every ``k``, from the plan's cumulative matrices; None where the
        plan has none (too large) or the request asks for no GPU, CPU or memory."""
        state = self.state
        matrices = self.plan.cumulative(len(state.nodes))
        if matrices is None:
            return None
        gpus, cpus, memories = matrices
        cap = _task_cap(state, request, gpus, cpus, memories)
        return None if cap is None else cap[:, allowed].sum(axis=1)


def earliest_start(
    pending: PendingJob,
    run_s: float,
    *,
    ctx: CycleContext,
    future: Future,
    reservations: Sequence[Reservation],
    placer: Placer,
    sums: HeldSums | None = None,
) -> Reservation | None:
    """The first time from ``ctx.now`` at which ``pending`` fits for ``run_s`` seconds, or None.

    ``sums`` keeps the summed holdings of each set of overlapping reservations (by their indices
    in ``reservations``); a caller whose ``reservations`` only grow (one backfill walk) passes the
    same :class:`HeldSums` of that list to every search, so each sum is made once per walk rather
    than once per search.

    Without reservations, capacity only grows as jobs end, so a binary search
    over the releases finds the first time the job could fit. From there the
    candidate times (later releases and reservation ends) are scanned in
    order, each on the cluster less the reservations overlapping the job's
    run, until a full gang placement succeeds.
    """
    first = _first_fit(future, pending.tasks_left, placer, pending.job.request)
    if first is None:
        return None
    return _scan(
        pending, run_s, first, ctx=ctx, future=future, reservations=reservations, placer=placer, sums=sums
    )


def _scan(
    pending: PendingJob,
    run_s: float,
    first: int,
    *,
    ctx: CycleContext,
    future: Future,
    reservations: Sequence[Reservation],
    placer: Placer,
    sums: HeldSums | None,
    settled: tuple[float, Reservation | None] | None = None,
) -> Reservation | None:
    """:func:`earliest_start` from its first candidate on: after ``first`` releases (``now`` if none).

    ``settled`` (a time and an answer; see :meth:`SearchMemo.earliest_start`): candidates after
    that time are known to give that answer, so only those up to it are tried.
    """
    if sums is None or sums.reservations is not reservations:
        sums = HeldSums(reservations)
    counting = _countable(future, pending.job.request)
    if counting is not None:
        return _counted_scan(
            pending,
            run_s,
            first,
            ctx=ctx,
            future=future,
            placer=placer,
            sums=sums,
            settled=settled,
            counting=counting,
        )
    need = pending.tasks_left
    start = future.times[first - 1] if first else ctx.now
    candidates = _candidate_times(
        start, future.times, first, [r.end_s for r in reservations if r.end_s > start]
    )
    if settled is not None:
        until = settled[0]
        candidates = itertools.takewhile(lambda time_s: time_s <= until, candidates)
    index = first
    state = future.after(first)
    request = pending.job.request
    rooms: _Rooms | None = None
    overlaps = _Overlaps(reservations, run_s)
    size = SCAN_FIRST
    while chunk := list(itertools.islice(candidates, size)):
        uptos = [bisect.bisect_right(future.times, time_s, lo=index) for time_s in chunk]
        if size == SCAN_CHUNK and rooms is None:
            rooms = _Rooms.of(future, placer.allowed, request)
        # The first candidates, tried one by one, are looked at only as far as the scan gets
        subsets = overlaps.of(chunk) if size == SCAN_CHUNK else None
        enough = None
        if rooms is not None and subsets is not None:
            enough = rooms.enough_flat(uptos, _held_rows(sums, overlaps, subsets), need)
        size = SCAN_CHUNK
        for j, time_s in enumerate(chunk):
            if enough is not None and not enough[j]:
                continue  # fewer tasks fit than the job has, counted on every candidate at once
            upto = uptos[j]
            held = sums.of(overlaps.at(time_s) if subsets is None else subsets[j])
            state, index = _advance(future, state, index, upto), upto
            if (
                held is not None
                and enough is None
                and state.mig is None
                and _room_less(state, held, placer.allowed, request) < need
            ):
                continue  # the view would not hold the job: not worth building (most candidate times)
            view = state if held is None else without_held(state, held)
            found = _placed_at(pending, time_s, run_s, view, ctx=ctx, placer=placer)
            if found is not None:
                return found
    return None if settled is None else settled[1]


def _advance(future: Future, state: WorkingState, index: int, upto: int) -> WorkingState:
    """``state``, the future after ``index`` releases, after ``upto`` of them (updated in place, or
    a new state for many releases at once: overdue jobs all end "now", and one sum is cheaper)."""
    if upto - index > JUMP:
        return future.after(upto)
    for release in future.ends[index:upto]:
        for placement in release.placements:
            state.release(placement)
    return state


def _placed_at(
    pending: PendingJob,
    time_s: float,
    run_s: float,
    view: WorkingState,
    *,
    ctx: CycleContext,
    placer: Placer,
    counted: bool = False,
) -> Reservation | None:
    """The reservation from ``time_s`` if the job's tasks are placed on ``view`` (the cluster then,
    less the reservations the run overlaps), else None.

    The view's count of tasks is asked first, to skip placements that cannot succeed; ``counted``:
    the caller has counted ``view`` itself already (the compiled count of :func:`_counted_scan`),
    where the placement, which succeeds only where the tasks fit, is all that is left to try."""
    need = pending.tasks_left
    if not counted and _room(view, placer.allowed, pending.job.request) < need:
        return None
    with ctx.viewing(view):
        placed, status = place_job(pending, placer.allowed, ctx, placer.scoring, placer.topology)
    if status.ok or len(placed) >= need:
        taken = ctx.state.held(placed)
        return Reservation(pending.job.id, time_s, time_s + run_s, tuple(placed), taken)
    return None


def _countable(future: Future, request: TaskRequest) -> Callable[..., tuple[float, int]] | None:
    """The compiled count of :func:`_counted_scan`, or None where the search counts with numpy: the
    process has not loaded the count (numba is not installed, or too few scans so far:
    :class:`scan_kernel.Loader`), a MIG pool, or a request of no GPU."""
    if future.state.mig is not None or not (request.whole_gpus or request.is_fractional):
        return None
    kernels = KERNELS.get()
    return None if kernels is None else kernels.first_roomy


def _counted_scan(
    pending: PendingJob,
    run_s: float,
    first: int,
    *,
    ctx: CycleContext,
    future: Future,
    placer: Placer,
    sums: HeldSums,
    settled: tuple[float, Reservation | None] | None,
    counting: Callable[..., tuple[float, int]],
) -> Reservation | None:
    """:func:`_scan` with the count at each candidate made by :func:`scan_kernel.first_roomy_py`,
    compiled (``counting``, as :func:`_countable` gave it).

    The compiled loop skips the candidates at which fewer tasks fit by count than the job has, the
    same upper bound by which :func:`_scan` skips them; each time it stops at is then tried exactly
    as there (the view's own count, then the placement), so the answer is the same. It reads the
    plan's release rows as they are, from the state after the first releases, so a large
    cluster's long plan is counted as a small one's is.
    """
    first_roomy, plan = counting, future.plan
    state, request = future.state, pending.job.request
    need = pending.tasks_left
    start = future.times[first - 1] if first else ctx.now
    width, gpus = state.gpu_free.size + 2 * len(state.cpu_free), int(state.gpu_free.shape[1])
    res_starts, res_ends, res_flat, res_nodes, res_nodes_upto = sums.arrays(width, gpus)
    asked = np.array(
        [
            request.whole_gpus,
            0 if request.whole_gpus else request.gpu_milli,
            request.cpu_milli,
            request.memory_mib,
        ],
        dtype=np.int64,
    )
    times, ends = future.plan.times_array(), np.sort(res_ends)
    until = math.inf if settled is None else settled[0]
    overlaps = _Overlaps(sums.reservations, run_s)
    index, view_state, after = first, future.after(first), -math.inf
    # Counted from the state after the first releases as it is now, before any placement: a
    # placement that fails may keep the tasks it placed on the view it was given (``view_state``
    # itself, where nothing is held), which the count must not read (a later view built afresh,
    # after many releases, has them back).
    base = np.concatenate([view_state.gpu_free.ravel(), view_state.cpu_free, view_state.memory_free])
    while True:
        time_s, upto = first_roomy(  # the compiled signature's types (scan_kernel._compiled)
            float(start), times, int(first), ends, float(after), float(until), plan.gpu, plan.gpu_upto,
            plan.node, plan.node_upto, base, res_starts, res_ends, res_flat, res_nodes, res_nodes_upto,
            placer.allowed, gpus, asked, int(need), float(run_s),
        )  # fmt: skip
        if upto < 0:
            return None if settled is None else settled[1]
        after = time_s
        view_state, index = _advance(future, view_state, index, upto), upto
        held = sums.of(overlaps.at(time_s))
        view = view_state if held is None else without_held(view_state, held)
        # Counted with the view's own free resources except task slots, which the count leaves out
        found = _placed_at(
            pending, time_s, run_s, view, ctx=ctx, placer=placer, counted=view.pods_free is None
        )
        if found is not None:
            return found


def _candidate_times(start: float, times: Sequence[float], first: int, ends: list[float]) -> Iterator[float]:
    """``start``, then every release time from ``times[first]`` on and every reservation end in
    ``ends`` (all at or after ``start``; ``times`` ascending), ascending and once each.

    Made a block of releases at a time, each block with the ends up to its last time sorted as a
    set in C: most searches stop within their first few candidates, and on a large cluster the
    plan holds thousands of releases, which a sort of them all at every search would read.
    """
    yield start
    last = start
    ends = sorted(ends)
    taken = 0
    while first < len(times) or taken < len(ends):
        if first < len(times):
            block = times[first : first + _CANDIDATE_BLOCK]
            first += len(block)
            upto = bisect.bisect_right(ends, block[-1], lo=taken)
            merged = sorted({*block, *ends[taken:upto]})
            taken = upto
        else:
            merged, taken = sorted(set(ends[taken:])), len(ends)
        for time_s in merged:
            if time_s > last:  # a time equal to the last block's last one was yielded already
                yield time_s
                last = time_s


_CANDIDATE_BLOCK = 64
"""Release times a search's candidates are made of at once (see :func:`_candidate_times`)."""


SCAN_FIRST = 4
"""Candidate times a search first tries one by one: many searches end there, before a vectorised
count (and the plan's per-GPU sums it needs) would pay for itself."""
SCAN_CHUNK = 16
"""Candidate times a search then counts room at in one vectorised step."""


def _held_rows(sums: HeldSums, overlaps: _Overlaps, subsets: list[tuple[int, ...]]) -> IntArray | None:
    """Each candidate's summed holdings as a matrix (see :meth:`_Rooms.enough_flat`): from the
    vectorised overlaps in one product when :meth:`_Overlaps.of` made them, else row by row."""
    if overlaps.hits is not None:
        return sums.rows(overlaps.hits)
    helds = [sums.of(subset) for subset in subsets]
    if all(held is None for held in helds):
        return None
    zero = np.zeros_like(next(held for held in helds if held is not None).flat)
    return np.stack([zero if held is None else held.flat for held in helds])


class _Overlaps:
    """Which reservations a run of ``run_s`` from each candidate time overlaps, for many times at once."""

    def __init__(self, reservations: Sequence[Reservation], run_s: float) -> None:
        self.reservations = reservations
        self.run_s = run_s
        self._vector = 0 < len(reservations) <= 62  # a bit per reservation in an int64
        self._arrays: tuple[npt.NDArray[np.float64], npt.NDArray[np.float64], IntArray] | None = None
        """Starts, ends and bits of the reservations: made at the first vectorised call (most
        searches end within their first few candidates, which never need them)."""
        self._subsets: dict[int, tuple[int, ...]] = {}
        self._spans: list[tuple[float, float]] | None = None
        """Each reservation's start and end, for the candidates tried one by one."""
        self.hits: BoolArray | None = None
        """The last call's overlaps as a (times, reservations) matrix, when it was vectorised."""

    def at(self, time_s: float) -> tuple[int, ...]:
        """:meth:`of` for one time."""
        return self.of([time_s])[0]

    def of(self, times: list[float]) -> list[tuple[int, ...]]:
        """For each time, the indices of the reservations overlapping [time, time + run_s) in order
        (as :meth:`Reservation.overlaps` says: the same float sums, elementwise)."""
        self.hits = None
        if not self._vector or len(times) <= SCAN_FIRST:
            spans, run_s = self._spans, self.run_s
            if spans is None:
                spans = self._spans = [(r.start_s, r.end_s) for r in self.reservations]
            # Reservation.overlaps(t, t + run_s), unrolled: no method call per reservation and time
            return [tuple(i for i, (s, e) in enumerate(spans) if s < t + run_s and t < e) for t in times]
        if self._arrays is None:
            reservations = self.reservations
            self._arrays = (
                np.array([r.start_s for r in reservations]),
                np.array([r.end_s for r in reservations]),
                np.left_shift(1, np.arange(len(reservations), dtype=np.int64)),
            )
        starts, ends, bits = self._arrays
        column = np.array(times)[:, None]
        hits = self.hits = (starts < column + self.run_s) & (column < ends)
        subsets = self._subsets
        found = []
        for mask in (hits @ bits).tolist():
            subset = subsets.get(mask)
            if subset is None:
                subset = subsets[mask] = tuple(i for i in range(len(bits)) if mask >> i & 1)
            found.append(subset)
        return found


@dataclass(frozen=True, slots=True)
class _Rooms:
    """:func:`_room_less` at many candidate times at once, from the plan's cumulative per-GPU and per-node
    releases: what the scan's own state would hold after each candidate's releases, less its holdings.

    Everything is in :attr:`Held.flat`'s layout (GPUs row by row, then CPU, then memory per node),
    so that a chunk of candidates costs one gather, one addition and one subtraction of stacked
    holdings, whatever the number of distinct sets of reservations among them."""

    state: WorkingState
    released: IntArray
    """:meth:`ReleasePlan.cumulative_flat`: what the first k releases give back, for every k."""
    base: IntArray
    """The state's free GPU, CPU and memory, flat."""
    allowed: BoolArray
    request: TaskRequest

    @classmethod
    def of(cls, future: Future, allowed: BoolArray, request: TaskRequest) -> _Rooms | None:
        """None where it does not apply (MIG, a request of no GPU, or a plan too long to sum up front)."""
        state = future.state
        if state.mig is not None or not (request.whole_gpus or request.is_fractional):
            return None
        released = future.plan.cumulative_flat(state.gpu_free.shape)
        if released is None:
            return None
        base = np.concatenate([state.gpu_free.ravel(), state.cpu_free, state.memory_free])
        return cls(state, released, base, allowed, request)

    def enough(self, uptos: list[int], helds: list[Held | None], need: int) -> list[bool]:
        """For each candidate (releases so far, holdings it overlaps): whether :func:`_room_less`
        (``_room``'s upper bound, without pods, where nothing is held) reaches ``need``."""
        held = None
        if any(held is not None for held in helds):
            zero = np.zeros_like(self.base)
            held = np.stack([zero if held is None else held.flat for held in helds])
        return self.enough_flat(uptos, held, need)

    def enough_flat(self, uptos: list[int], held: IntArray | None, need: int) -> list[bool]:
        """:meth:`enough` with the holdings as a matrix, a :attr:`Held.flat` row per candidate
        (None: nothing held at any)."""
        request = self.request
        free = self.released[uptos] + self.base
        if held is not None:
            free -= held
        nodes, gpus = self.state.gpu_free.shape
        cells = nodes * gpus
        gpu = free[:, :cells].reshape(len(uptos), nodes, gpus)
        if request.whole_gpus:
            cap = per_node(np.add, gpu == MILLI_PER_GPU, dtype=np.int64) // request.whole_gpus
        else:
            cap = np.add.reduce(np.maximum(gpu, 0) // request.gpu_milli, axis=2)
        if request.cpu_milli:
            cap = np.minimum(cap, np.maximum(free[:, cells : cells + nodes], 0) // request.cpu_milli)
        if request.memory_mib:
            cap = np.minimum(cap, np.maximum(free[:, cells + nodes :], 0) // request.memory_mib)
        rooms = np.add.reduce(cap[:, self.allowed], axis=1)
        return (rooms >= need).tolist()  # type: ignore[no-any-return]


def _first_fit(
    future: Future, need: int, placer: Placer, request: TaskRequest, rooms: IntArray | None = None
) -> int | None:
    """Releases after which the job's tasks may first fit by count (ignoring reservations), or None.

    For whole-GPU requests the count is an upper bound, so the answer is never
    later than the true one; the scan that follows checks each time exactly.
    ``rooms``: :meth:`Future.rooms_at_most` of this search, when the caller has it already.
    """
    if request.is_fractional:

        def room(k: int) -> int:
            return _room(future.after(k), placer.allowed, request)

    else:
        if rooms is None:
            rooms = future.rooms_at_most(placer.allowed, request)
        if rooms is not None:  # every k at once; room only grows with k, so the first is the answer
            enough = rooms >= need
            return int(np.argmax(enough)) if enough[-1] else None
        kernels = KERNELS.loaded()
        if kernels is not None and (request.whole_gpus or request.cpu_milli or request.memory_mib):
            return _compiled_first_fit(kernels.first_fit, future, need, placer.allowed, request)

        def room(k: int) -> int:
            return future.room_at_most(k, placer.allowed, request)

    low, high = 0, len(future.times)
    if room(high) < need:
        return None
    while low < high:
        middle = (low + high) // 2
        if room(middle) >= need:
            high = middle
        else:
            low = middle + 1
    return low


def _compiled_first_fit(
    first_fit: Callable[..., int], future: Future, need: int, allowed: BoolArray, request: TaskRequest
) -> int | None:
    """:func:`_first_fit`'s bisection over :meth:`Future.room_at_most`, as :func:`scan_kernel.first_fit_py`
    walks it (compiled): the same count, so the same first ``k``."""
    state, plan = future.state, future.plan
    asked = np.array([request.whole_gpus, request.cpu_milli, request.memory_mib], dtype=np.int64)
    node_gpus = np.array(state.nodes.gpus, dtype=np.int64)  # a copy: the node table's is read-only
    k = first_fit(
        state.whole_free.astype(np.int64, copy=False), node_gpus,
        state.cpu_free, state.memory_free, plan.gpu, plan.gpu_upto, plan.node, plan.node_upto, allowed,
        asked, int(need),
    )  # fmt: skip
    return None if k < 0 else int(k)


def _task_cap(
    state: WorkingState, request: TaskRequest, gpus: IntArray, cpus: IntArray, memories: IntArray
) -> IntArray | None:
    """Tasks of ``request`` each node holds once ``gpus``, ``cpus`` and ``memories`` are released on
    top of what is free (per node, or a row per ``k`` when given as matrices, by broadcasting); None
    when the request asks for no GPU, CPU or memory. Released GPUs count as wholly free."""
    cap: IntArray | None = None
    if request.whole_gpus:
        cap = np.minimum(state.whole_free + gpus, state.nodes.gpus) // request.whole_gpus
    if request.cpu_milli:
        cpu = (state.cpu_free + cpus) // request.cpu_milli
        cap = cpu if cap is None else np.minimum(cap, cpu)
    if request.memory_mib:
        memory = (state.memory_free + memories) // request.memory_mib
        cap = memory if cap is None else np.minimum(cap, memory)
    return cap


BookedEntry = tuple[float, float, tuple[TaskPlacement, ...]]
"""A reservation as a search reads it: its start, end and placements."""
Booked = tuple[BookedEntry, ...]
"""The reservations made before a search, in the walk's order."""


@dataclass(frozen=True, slots=True)
class _Searched:
    """One search's inputs (see :class:`SearchMemo`) and what it found."""

    job: Job
    key: tuple[object, ...]
    now: float | None
    """The time now when the search's first candidate was now (it then depends on it), else None."""
    found: Reservation | None
    plan: ReleasePlan
    free: tuple[IntArray, IntArray, IntArray] | None
    """The free GPU, CPU and memory the search read (None where a state has task slots: see
    :func:`_settled`)."""
    booked: Booked
    """The reservations made before it in its cycle."""


class SearchMemo:
    """Each waiting job's last reservation search, reused while nothing the search reads has changed.

    :func:`earliest_start` is a pure function of the job, its run time, its allowed nodes, the
    cycle's free resources when it runs, the release plan, the reservations made before it in
    the cycle and, only when its first candidate is now (the job may fit by count without any
    release), the time now; placing a task reads the view alone when every score does
    (:attr:`Placer.pure`). When a queue is long, most cycles are arrivals that change none of
    these for the jobs that reserve: their searches are then skipped, and the reservation is
    the one a fresh search finds. Entries live one cycle past their job's last search.

    When some inputs changed, the last search still answers for the late part of the future
    that did not (:func:`_settled`): only the candidate times up to the last change are tried.
    """

    def __init__(self) -> None:
        self._last: dict[str, _Searched] = {}
        self._this: dict[str, _Searched] = {}
        self.reused = 0
        self.searched = 0
        self.settled = 0
        """Searches that tried only the candidates up to the last change (see :func:`_settled`)."""
        self._tails: dict[tuple[int, int], tuple[ReleasePlan, ReleasePlan, int]] = {}
        """Common tails of the plans compared in this cycle (see :func:`_common_tail`)."""
        self._counts: dict[tuple[object, ...], tuple[ReleasePlan, IntArray | None]] = {}
        """:meth:`Future.rooms_at_most` in this cycle, by plan, free resources, allowed nodes and
        the sizes the count reads (see :meth:`_rooms_at_most`)."""

    def next_cycle(self) -> None:
        """Start a cycle: searches of the last cycle may be reused, older ones are dropped."""
        self._last, self._this = self._this, {}
        self._tails.clear()
        self._counts.clear()

    def _rooms_at_most(
        self,
        future: Future,
        allowed: BoolArray,
        request: TaskRequest,
        key: tuple[object, ...],
        *,
        make: bool = True,
    ) -> IntArray | None:
        """:meth:`Future.rooms_at_most`, kept for the cycle: waiting jobs of one size on the same
        nodes count the same releases on the same free resources (``key``: the search's memo key,
        whose allowed nodes and free resources are all the count reads besides the plan). With
        ``make`` False, only a count already kept (else None)."""
        found_key = (
            id(future.plan),
            key[2],
            key[3],
            request.whole_gpus,
            request.cpu_milli,
            request.memory_mib,
        )
        kept = self._counts.get(found_key)
        if kept is not None and kept[0] is future.plan:
            return kept[1]
        if not make:
            return None
        rooms = future.rooms_at_most(allowed, request)
        self._counts[found_key] = (future.plan, rooms)
        return rooms

    def earliest_start(
        self,
        pending: PendingJob,
        run_s: float,
        *,
        ctx: CycleContext,
        future: Future,
        reservations: Sequence[Reservation],
        placer: Placer,
        sums: HeldSums | None = None,
    ) -> Reservation | None:
        """:func:`earliest_start`, or the last cycle's answer for this job when its inputs are equal."""
        state = future.state
        if pending.bound or state.mig is not None or not placer.pure:
            return earliest_start(
                pending, run_s, ctx=ctx, future=future, reservations=reservations, placer=placer, sums=sums
            )
        booked: Booked = tuple((r.start_s, r.end_s, r.placements) for r in reservations)
        key = (
            run_s,
            state.nodes,
            placer.allowed.tobytes(),
            state.free_bytes(),
            future.plan.fingerprint(),
            booked,
        )
        job = pending.job
        last = self._last.get(job.id)
        if last is not None and last.job is job and last.key == key and last.now in (None, ctx.now):
            self._this[job.id] = last
            self.reused += 1
            return last.found
        self.searched += 1
        free = None
        if state.pods_free is None:
            free = (state.gpu_free.copy(), state.cpu_free.copy(), state.memory_free.copy())
        settled = None
        if last is not None and last.job is job and last.key[:3] == key[:3]:
            settled = _settled(last, future, free=free, now=ctx.now, booked=booked, tails=self._tails)
            self.settled += settled is not None
        whole = not job.request.is_fractional  # counted by k without building states
        if settled is not None and _no_room_until(
            future,
            settled[0],
            pending.tasks_left,
            placer,
            job.request,
            # the count for every k where the cycle has it; else the one k is counted alone
            rooms=self._rooms_at_most(future, placer.allowed, job.request, key, make=False)
            if whole
            else None,
        ):
            self._this[job.id] = _Searched(job, key, None, settled[1], future.plan, free, booked)
            return settled[1]  # the first candidate is after the last change: the last answer holds
        rooms = self._rooms_at_most(future, placer.allowed, job.request, key) if whole else None
        first = _first_fit(future, pending.tasks_left, placer, job.request, rooms)
        found = None
        if settled is not None and (first is None or (first and future.times[first - 1] > settled[0])):
            found = settled[1]  # no candidate up to the last change (the first is after it, or none)
        elif first is not None:
            found = _scan(
                pending,
                run_s,
                first,
                ctx=ctx,
                future=future,
                reservations=reservations,
                placer=placer,
                sums=sums,
                settled=settled,
            )
        self._this[job.id] = _Searched(
            job, key, ctx.now if first == 0 else None, found, future.plan, free, booked
        )
        return found


def _no_room_until(
    future: Future,
    until: float,
    need: int,
    placer: Placer,
    request: TaskRequest,
    *,
    rooms: IntArray | None = None,
) -> bool:
    """Whether the job's first candidate (see :func:`_first_fit`) is after ``until``, or it has none,
    known from the count at ``until`` alone: the count only grows with the releases, so when it is
    short after the releases up to ``until``, it is short before. False when that is not known
    cheaply (a fractional request counts on built states) or the count there suffices."""
    if request.is_fractional:
        return False
    k = bisect.bisect_right(future.times, until)
    if rooms is not None:  # the same count, already made for every k
        return bool(rooms[k] < need)
    return future.room_at_most(k, placer.allowed, request) < need


def _settled(
    last: _Searched,
    future: Future,
    *,
    free: tuple[IntArray, IntArray, IntArray] | None,
    now: float,
    booked: Booked,
    tails: dict[tuple[int, int], tuple[ReleasePlan, ReleasePlan, int]],
) -> tuple[float, Reservation | None] | None:
    """A time after which this search's candidates give what ``last`` found, with that answer;
    None when that is not known (``last`` is a search of the same job, run time and nodes).

    From the time ``settled`` of the last change on, both futures hold the same free resources at
    every instant and have the same candidate times: the two plans end in the same releases,
    the resources free after all the others are equal, and every reservation that is in one
    search's inputs and not in the other's has ended. There every candidate view is the same, so
    the last search's verdicts hold: failures before its answer (those it tried, and those it
    skipped because fewer tasks fit by count than the job has, a count that does not change with
    the views either), then its answer. A fresh search tries the candidates in time order, so
    when its answer came after ``settled`` (or it found none), trying the candidates up to
    ``settled`` and taking the last answer if none fits gives exactly what the fresh search would.
    """
    if free is None or last.free is None:
        return None  # task slots: a scan's view counts them on one path and not the other
    new_plan, old_plan = future.plan, last.plan
    common = _common_tail(old_plan, new_plan, tails)
    new_k, old_k = len(new_plan.times) - common, len(old_plan.times) - common
    settled = now
    if new_k:
        settled = max(settled, new_plan.times[new_k - 1])
    if old_k:
        settled = max(settled, old_plan.times[old_k - 1])
    found = last.found
    if found is not None and found.start_s <= settled:
        return None  # the answer itself may change: the common case, so before anything else
    if last.booked != booked:
        settled = max([settled, *_changed_ends(last.booked, booked)])
        if found is not None and found.start_s <= settled:
            return None  # a reservation that moved ends after the answer: before comparing arrays
    if any(before.shape != after.shape for before, after in zip(last.free, free, strict=True)):
        return None
    new_released = new_plan.released(new_k, free[0].shape)
    old_released = old_plan.released(old_k, last.free[0].shape)
    for now_free, then_free, now_released, then_released in zip(
        free, last.free, new_released, old_released, strict=True
    ):
        # Equal shapes and dtypes (int64), so equal bytes are equal values: np.array_equal's
        # checks and its boolean array cost more than the comparison, at most searches
        if (now_free + now_released).tobytes() != (then_free + then_released).tobytes():
            return None
    return settled, found


def _changed_ends(before: Booked, after: Booked) -> list[float]:
    """The ends of the reservations that are in one of ``before`` and ``after`` and not in the other,
    counted as multisets of equal entries (as ``collections.Counter`` counts them).

    Entries holding the very same placements (a reservation kept from the last cycle, the usual
    case) cancel first by identity, with no hashing of placements; only the rest are compared by
    value. Cancelling a pair of equal entries leaves the difference of the multisets as it was.
    """
    by_identity: dict[tuple[float, float, int], tuple[BookedEntry, int]] = {}
    for sign, entries in ((1, before), (-1, after)):
        for entry in entries:
            key = (entry[0], entry[1], id(entry[2]))
            kept = by_identity.get(key)
            by_identity[key] = (entry, sign if kept is None else kept[1] + sign)
    changed: collections.Counter[BookedEntry] = collections.Counter()
    for entry, count in by_identity.values():
        if count:
            changed[entry] += count
    return [entry[1] for entry, count in changed.items() if count]


def _common_tail(
    old: ReleasePlan, new: ReleasePlan, tails: dict[tuple[int, int], tuple[ReleasePlan, ReleasePlan, int]]
) -> int:
    """How many releases the two plans end with alike (times and placements); kept in ``tails`` by
    the pair (a cycle's searches compare the same few plans).

    Two plans of consecutive cycles usually share nearly all their releases (a few jobs started
    or ended), so the tail is thousands of releases long on a big cluster: it is found with one
    vectorised comparison of the times and of the placements' identities, and only where that
    stops (a release whose placements are equal but not the same object, if any) compared by
    value, one release at a time, as before.
    """
    pair = (id(old), id(new))
    kept = tails.get(pair)
    if kept is not None and kept[0] is old and kept[1] is new:
        return kept[2]
    old_times, old_placements = old.fingerprint()
    new_times, new_placements = new.fingerprint()
    most = min(len(old_times), len(new_times))
    common = 0
    if most:
        old_arrays, new_arrays = old.tail_arrays(), new.tail_arrays()
        differs = (old_arrays[0][-most:] != new_arrays[0][-most:]) | (
            old_arrays[1][-most:] != new_arrays[1][-most:]
        )
        last = np.flatnonzero(differs)
        common = most - 1 - int(last[-1]) if len(last) else most
    while (
        common < most
        and old_times[-1 - common] == new_times[-1 - common]
        and old_placements[-1 - common] == new_placements[-1 - common]
    ):
        common += 1
    tails[pair] = (old, new, common)
    return common
