"""The scheduler's working copy of free resources for one cycle, with gang transactions.

A cycle copies the snapshot's arrays once; every tentative placement updates
the copy in place and is logged, so a gang that cannot be placed whole is
rolled back exactly (Volcano's statement commit/discard).
"""

from __future__ import annotations

import functools
from collections.abc import Iterable, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError
from loadmaster.model import (
    MILLI_PER_GPU,
    ClusterSnapshot,
    MigInstance,
    MigView,
    NodeTable,
    TaskPlacement,
    TaskRequest,
    gpu_summary,
    node_gpu_summary,
)
from loadmaster.scheduling.mig_pool import MigPool

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

_LARGEST_KEPT = 256
"""Masks :meth:`WorkingState.largest_block` keeps answers for: a cycle has a few (one per node filter
outcome), so this bounds only a state that lives unusually long."""


@dataclass(frozen=True, eq=False)
class Held:
    """Resources held (by a reservation, say), per GPU and per node, ready to subtract."""

    gpu: IntArray
    cpu: IntArray
    memory: IntArray
    mig: tuple[TaskPlacement, ...] = ()
    """MIG placements held: their instances are taken out of a view too, not only CPU and memory."""

    def __add__(self, other: Held) -> Held:
        return Held.of_flat(self.flat + other.flat, self.gpu.shape, self.mig + other.mig)

    @functools.cached_property
    def flat(self) -> IntArray:
        """GPU, CPU and memory in one vector (GPUs row by row, then CPU, then memory per node): a sum
        of holdings is then one numpy step, not three (the arrays are small; each call's overhead is
        most of its cost)."""
        return np.concatenate([self.gpu.ravel(), self.cpu, self.memory])

    @functools.cached_property
    def gpu_cells(self) -> npt.NDArray[np.intp]:
        """Flat indices (row by row) of the GPUs of which something is held: a reservation holds a
        few nodes of a large cluster, and counts that only change where something is held need
        only look there."""
        return np.flatnonzero(self.gpu)

    @classmethod
    def of_flat(cls, flat: IntArray, gpu_shape: tuple[int, ...], mig: tuple[TaskPlacement, ...] = ()) -> Held:
        """The holdings whose :attr:`flat` vector is ``flat`` (its arrays are views of it)."""
        cells = gpu_shape[0] * gpu_shape[1]
        nodes = gpu_shape[0]
        held = cls(flat[:cells].reshape(gpu_shape), flat[cells : cells + nodes], flat[cells + nodes :], mig)
        held.__dict__["flat"] = flat  # what cached_property stores: no concatenation later
        return held


@dataclass(eq=False)
class WorkingState:
    """Free resources per node and per GPU, updated as the cycle places tasks.

    ``whole_free[i]`` counts wholly free GPUs of node ``i``; ``largest_share[i]``
    is the largest free share of any single GPU on it (milli-GPU), and
    ``free_milli[i]`` the free milli-GPU summed over its GPUs. ``mig`` is the
    cycle's copy of the MIG-mode GPUs (None when the cluster has none); MIG
    placements go through :meth:`take_mig`, so whole and shared GPUs pay nothing for it.
    ``pods_free`` counts the tasks each node may still take (None: no limit); every placement
    takes one. Reservations (:class:`Held`) do not hold task slots.
    """

    nodes: NodeTable
    gpu_free: IntArray
    cpu_free: IntArray
    memory_free: IntArray
    whole_free: IntArray
    largest_share: IntArray
    free_milli: IntArray
    mig: MigPool | None = None
    pods_free: IntArray | None = None
    _log: list[TaskPlacement] = field(init=False, default_factory=list)
    changes: int = field(init=False, default=0)
    """Counts the writes to the GPU summaries (``whole_free``, ``largest_share``): what
    :meth:`largest_block` keeps its answers by."""
    _largest: dict[tuple[int, bool], tuple[int, BoolArray, int, int]] = field(
        init=False, default_factory=dict
    )

    @classmethod
    def from_snapshot(cls, snapshot: ClusterSnapshot) -> WorkingState:
        """A private, writable copy of the snapshot's free resources."""
        return cls(
            nodes=snapshot.nodes,
            gpu_free=snapshot.gpu_free_milli.copy(),
            cpu_free=snapshot.cpu_free_milli.copy(),
            memory_free=snapshot.memory_free_mib.copy(),
            whole_free=snapshot.whole_free.copy(),
            largest_share=snapshot.largest_share.copy(),
            free_milli=snapshot.free_milli.copy(),
            mig=_working_mig(snapshot.mig),
            pods_free=snapshot.pods_free.copy() if snapshot.pods_free is not None else None,
        )

    def _refresh(self, node: int) -> None:
        self.changes += 1
        summary = node_gpu_summary(self.gpu_free[node])
        self.whole_free[node], self.largest_share[node], self.free_milli[node] = summary

    def take(self, placement: TaskPlacement) -> None:
        """Mark ``placement``'s resources as used and log it for a possible rollback."""
        self._apply(placement, -1)
        self._log.append(placement)

    def take_whole(self, node: int, request: TaskRequest, count: int) -> list[TaskPlacement]:
        """``count`` tasks of a whole-GPU or GPU-less ``request`` on ``node``, taken and logged.

        The placements ``count`` calls of :meth:`take` with ``fit.choose_gpus`` would make: each
        task takes the lowest wholly free GPUs left by the ones before it, so task i gets free GPUs
        i x w .. (i + 1) x w - 1 of the node's list. The node is updated once, by the same exact
        integer deltas: a gang of 8 one-GPU tasks on a node is one update, not 8.
        """
        if request.is_fractional or request.mig_profile is not None:
            raise ModelError(f"take_whole: {request} is not a whole-GPU or GPU-less request")
        per_task = request.whole_gpus
        row = self.gpu_free[node]
        chosen: list[int] = []
        if per_task:
            # A plain loop: a node has a handful of GPUs, where numpy's call overhead dominates.
            chosen = [gpu for gpu, milli in enumerate(row.tolist()) if milli == MILLI_PER_GPU]
            if len(chosen) < per_task * count:
                raise ModelError(
                    f"node {node}: {count} tasks of {per_task} GPUs need {per_task * count} free GPUs, "
                    f"{len(chosen)} are"
                )
        milli = min(request.gpu_milli, MILLI_PER_GPU)
        cpu, memory = request.cpu_milli, request.memory_mib
        placements = [
            TaskPlacement(node, tuple(chosen[i * per_task : (i + 1) * per_task]), milli, cpu, memory)
            for i in range(count)
        ]
        if per_task:
            self.changes += 1
            used = per_task * count
            row[chosen[:used]] -= MILLI_PER_GPU
            self.whole_free[node] -= used
            self.free_milli[node] -= used * MILLI_PER_GPU
            self.largest_share[node] = MILLI_PER_GPU if self.whole_free[node] else int(row.max())
        self.cpu_free[node] -= count * cpu
        self.memory_free[node] -= count * memory
        if self.pods_free is not None:
            self.pods_free[node] -= count
        self._log.extend(placements)
        return placements

    def take_mig(self, node: int, profile: str, cpu_milli: int, memory_mib: int) -> TaskPlacement | None:
        """Take a free instance of ``profile`` on ``node`` (and the CPU and memory); None if none is free."""
        slot = self.mig.choose(node, profile) if self.mig is not None else None
        if slot is None or self.mig is None:
            return None
        placement = TaskPlacement(node, (), 0, cpu_milli, memory_mib, mig=slot)
        self.mig.occupy(node, slot)
        self._apply(placement, -1)
        self._log.append(placement)
        return placement

    def vacate_mig(self, placements: Iterable[TaskPlacement]) -> None:
        """Free the MIG instances of ``placements`` that this state still has in use (others are skipped)."""
        for placement in placements:
            if placement.mig is not None:
                self._mig(placement, +1)

    def _mig(self, placement: TaskPlacement, sign: int) -> None:
        """Occupy (-1) or vacate (+1) a MIG placement's instance, if this state tracks it and it is so."""
        slot, pool = placement.mig, self.mig
        if slot is None or pool is None:
            return
        gpu = pool.gpus.get((placement.node, slot.gpu))
        instance = MigInstance(slot.profile, slot.start)
        if gpu is None or not gpu.ready or instance not in gpu.layout:
            return  # a reconfigured or rebooting GPU: the instance is gone from this view
        used = gpu.used[gpu.layout.index(instance)]
        if sign < 0 and not used:
            pool.occupy(placement.node, slot)
        elif sign > 0 and used:
            pool.vacate(placement.node, slot)

    def _apply(self, placement: TaskPlacement, sign: int) -> None:
        """Update one node in place; the per-node summaries change by exact deltas (this is the hot path)."""
        node = placement.node
        delta = sign * placement.gpu_milli
        row = self.gpu_free[node]
        self.changes += 1
        whole = 0
        for gpu in placement.gpu_indices:
            before = int(row[gpu])
            row[gpu] = before + delta
            whole += (before + delta == MILLI_PER_GPU) - (before == MILLI_PER_GPU)
        self.whole_free[node] += whole
        self.free_milli[node] += delta * len(placement.gpu_indices)
        if placement.gpu_indices:
            self.largest_share[node] = MILLI_PER_GPU if self.whole_free[node] else int(row.max())
        self.cpu_free[node] += sign * placement.cpu_milli
        self.memory_free[node] += sign * placement.memory_mib
        if self.pods_free is not None:
            self.pods_free[node] += sign

    def take_clamped(self, placement: TaskPlacement) -> None:
        """Take ``placement`` without logging, never below zero (keeps a reservation shadow in step)."""
        node = placement.node
        row = self.gpu_free[node]
        fits = (
            all(row[gpu] >= placement.gpu_milli for gpu in placement.gpu_indices)
            and self.cpu_free[node] >= placement.cpu_milli
            and self.memory_free[node] >= placement.memory_mib
            and (self.pods_free is None or self.pods_free[node] >= 1)
        )
        if placement.mig is not None:
            self._mig(placement, -1)
        if fits:
            self._apply(placement, -1)  # the usual case, with exact incremental summaries
            return
        for gpu in placement.gpu_indices:
            row[gpu] = max(int(row[gpu]) - placement.gpu_milli, 0)
        self.cpu_free[node] = max(int(self.cpu_free[node]) - placement.cpu_milli, 0)
        self.memory_free[node] = max(int(self.memory_free[node]) - placement.memory_mib, 0)
        if self.pods_free is not None:
            self.pods_free[node] = max(int(self.pods_free[node]) - 1, 0)
        self._refresh(node)

    def release(self, placement: TaskPlacement) -> None:
        """Give a placement's resources back without logging (a future view of the cluster)."""
        if placement.mig is not None:
            self._mig(placement, +1)
        self._apply(placement, +1)

    def held(self, placements: Sequence[TaskPlacement]) -> Held:
        """What ``placements`` hold, as arrays shaped like this state's (to subtract repeatedly)."""
        nodes, gpus = shape = self.gpu_free.shape
        cells = nodes * gpus
        # Positions in Held.flat and what each adds, gathered in Python and added in one call
        # (np.add.at adds repeated positions each time): half the cost of indexing per placement,
        # and a reservation search makes one of these for every answer.
        at: list[int] = []
        values: list[int] = []
        for placement in placements:
            node, milli = placement.node, placement.gpu_milli
            first = node * gpus
            for index in placement.gpu_indices:
                at.append(first + index)
                values.append(milli)
            at += (cells + node, cells + nodes + node)
            values += (placement.cpu_milli, placement.memory_mib)
        flat = np.zeros(cells + 2 * nodes, dtype=np.int64)
        np.add.at(flat, at, values)
        return Held.of_flat(flat, shape, tuple(p for p in placements if p.mig is not None))

    def subtract(self, held: Held) -> None:
        """Take ``held`` out without logging, never below zero (capacity held for a reservation).

        A reservation's resources may still be in use now; clamping at zero
        counts them once, which is the safe side for backfill.
        """
        np.maximum(self.gpu_free - held.gpu, 0, out=self.gpu_free)
        np.maximum(self.cpu_free - held.cpu, 0, out=self.cpu_free)
        np.maximum(self.memory_free - held.memory, 0, out=self.memory_free)
        self.changes += 1
        self.whole_free, self.largest_share, self.free_milli = gpu_summary(self.gpu_free)
        for placement in held.mig:
            self._mig(placement, -1)  # an instance in use now stays so: counted once, as above

    def less(self, held: Held) -> WorkingState:
        """What :meth:`subtract` makes of a :meth:`copy`, made directly: the arrays that subtract
        replaces (free resources and the GPU summaries) are computed once, not copied first."""
        gpu_free = np.maximum(self.gpu_free - held.gpu, 0)
        whole_free, largest_share, free_milli = gpu_summary(gpu_free)
        view = WorkingState(
            nodes=self.nodes,
            gpu_free=gpu_free,
            cpu_free=np.maximum(self.cpu_free - held.cpu, 0),
            memory_free=np.maximum(self.memory_free - held.memory, 0),
            whole_free=whole_free,
            largest_share=largest_share,
            free_milli=free_milli,
            mig=self.mig.copy() if self.mig is not None else None,
            pods_free=self.pods_free.copy() if self.pods_free is not None else None,
        )
        for placement in held.mig:
            view._mig(placement, -1)  # as subtract does
        return view

    def copy(self) -> WorkingState:
        """An independent copy with an empty log."""
        return WorkingState(
            nodes=self.nodes,
            gpu_free=self.gpu_free.copy(),
            cpu_free=self.cpu_free.copy(),
            memory_free=self.memory_free.copy(),
            whole_free=self.whole_free.copy(),
            largest_share=self.largest_share.copy(),
            free_milli=self.free_milli.copy(),
            mig=self.mig.copy() if self.mig is not None else None,
            pods_free=self.pods_free.copy() if self.pods_free is not None else None,
        )

    def free_bytes(self) -> bytes:
        """The free resources placement reads, as bytes: GPUs, CPU, memory and task slots (whole-GPU
        counts and shares follow from the GPUs). Two states of one node table and no MIG pool with
        the same bytes place alike."""
        parts = [self.gpu_free.tobytes(), self.cpu_free.tobytes(), self.memory_free.tobytes()]
        if self.pods_free is not None:
            parts.append(self.pods_free.tobytes())
        return b"".join(parts)

    def largest_block(self, allowed: BoolArray, *, fractional: bool) -> tuple[int, int]:
        """The allowed node with the most wholly free GPUs (``fractional``: the largest free share of
        one GPU), and that amount (-1 where no node is allowed): the first thing ``fit.explain``
        reads. Kept per mask until the GPU summaries change: a cycle's walk asks it for every
        request that fails, on the same state and the same few masks."""
        key = (id(allowed), fractional)
        found = self._largest.get(key)
        if found is not None and found[0] == self.changes and found[1] is allowed:  # the mask is held
            return found[2], found[3]
        free = self.largest_share if fractional else self.whole_free
        best = int(np.argmax(np.where(allowed, free, -1)))
        value = int(free[best]) if allowed[best] else -1
        if len(self._largest) >= _LARGEST_KEPT:
            self._largest.clear()
        self._largest[key] = (self.changes, allowed, best, value)
        return best, value

    def mark(self) -> int:
        """A point to roll back to."""
        return len(self._log)

    def rollback(self, mark: int) -> None:
        """Undo every placement taken since ``mark``, newest first."""
        while len(self._log) > mark:
            placement = self._log.pop()
            if placement.mig is not None:
                self._mig(placement, +1)
            self._apply(placement, +1)


def _working_mig(mig: MigView | None) -> MigPool | None:
    """The cycle's own copy of the snapshot's MIG pool (a driver hands in its live one)."""
    if mig is None:
        return None
    if not isinstance(mig, MigPool):
        raise ModelError(
            f"ClusterSnapshot.mig must be a loadmaster.scheduling.mig_pool.MigPool, got {type(mig).__name__}"
        )
    return mig.copy()
