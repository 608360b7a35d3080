"""MIG pools at run time: which instances of each MIG-mode GPU are in use, and which GPUs are ready.

Runtime state of the simulator (:mod:`loadmaster.sim.mig` keeps the live pool)
and of the scheduler (:class:`~loadmaster.scheduling.state.WorkingState` works
on a copy each cycle); the Kubernetes binding builds one from the devices nodes
advertise. The data it is made of (models, profiles, layouts, slots) is in
:mod:`loadmaster.model.mig`.
"""

from __future__ import annotations

from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError
from loadmaster.model.mig import MigInstance, MigModel, MigSlot, check_layout, instance_milli


@dataclass(slots=True)
class MigGpu:
    """One MIG-mode GPU: its model, layout, which instances are in use, and whether it is usable.

    ``ready`` is False while the GPU is being reconfigured or its node is rebooting.
    """

    model: MigModel
    layout: tuple[MigInstance, ...]
    used: list[bool]
    ready: bool = True

    @property
    def empty(self) -> bool:
        """True when no instance is in use (the only time the layout may change)."""
        return not any(self.used)


@dataclass(eq=False)
class MigPool:
    """Every MIG-mode GPU of a cluster, keyed by (node index, GPU index), with free counts per profile.

    ``free[node, k]`` counts the free instances of ``profiles[k]`` on ready GPUs
    of ``node``; it is kept in step by every method, so that fit is a column lookup.
    """

    node_count: int
    gpus: dict[tuple[int, int], MigGpu]
    profiles: list[str] = field(default_factory=list)
    free: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros((0, 0), dtype=np.int64))
    by_node: dict[int, tuple[int, ...]] = field(default_factory=dict)
    """The MIG-mode GPU indices of each node that has any (static: layouts change, GPUs do not)."""
    used_slices: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per node: compute slices of its MIG-mode GPUs held by tasks, kept in step by occupy and vacate."""
    slices_per_gpu: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per node: compute slices of one of its MIG-mode GPUs (1 where it has none; static)."""
    total_slices: npt.NDArray[np.int64] = field(default_factory=lambda: np.zeros(0, dtype=np.int64))
    """Per node: compute slices of all its MIG-mode GPUs (static)."""

    @classmethod
    def build(
        cls, node_count: int, gpus: Mapping[tuple[int, int], tuple[MigModel, Sequence[MigInstance]]]
    ) -> MigPool:
        """A pool of GPUs with the given layouts, all free and ready."""
        names = sorted({p.name for model, _ in gpus.values() for p in model.profiles})
        pool = cls(node_count, {}, names, np.zeros((node_count, len(names)), dtype=np.int64))
        pool.used_slices = np.zeros(node_count, dtype=np.int64)
        pool.slices_per_gpu = np.ones(node_count, dtype=np.int64)
        pool.total_slices = np.zeros(node_count, dtype=np.int64)
        for key, (model, layout) in sorted(gpus.items()):
            pool.gpus[key] = MigGpu(model, (), [], ready=False)
            pool.set_layout(key[0], key[1], layout, ready=True)
            pool.by_node[key[0]] = (*pool.by_node.get(key[0], ()), key[1])
            pool.slices_per_gpu[key[0]] = model.compute_slices  # one resource type, so one model, per node
            pool.total_slices[key[0]] += model.compute_slices
        return pool

    def idle_gpus(self) -> npt.NDArray[np.float64]:
        """Per node: the compute of its MIG-mode GPUs that no task holds, in GPUs (a 3g of 7 in use
        on one GPU leaves 4/7). What the per-GPU free arrays, which show MIG GPUs as 0 free, leave out."""
        idle: npt.NDArray[np.float64] = (self.total_slices - self.used_slices) / self.slices_per_gpu
        return idle

    def copy(self) -> MigPool:
        """An independent copy (each scheduling cycle works on one)."""
        gpus = {k: MigGpu(g.model, g.layout, list(g.used), g.ready) for k, g in self.gpus.items()}
        return MigPool(
            self.node_count,
            gpus,
            self.profiles,
            self.free.copy(),
            self.by_node,
            self.used_slices.copy(),
            self.slices_per_gpu,
            self.total_slices,
        )

    def free_count(self, profile: str) -> npt.NDArray[np.int64]:
        """Free instances of ``profile`` per node (a view; zeros if no GPU has the profile)."""
        if profile not in self.profiles:
            return np.zeros(self.node_count, dtype=np.int64)
        return self.free[:, self.profiles.index(profile)]

    def _count(self, node: int, gpu: MigGpu, sign: int) -> None:
        if not gpu.ready:
            return
        for instance, used in zip(gpu.layout, gpu.used, strict=True):
            if not used:
                self.free[node, self.profiles.index(instance.profile)] += sign

    def set_layout(self, node: int, gpu_index: int, layout: Sequence[MigInstance], ready: bool) -> None:
        """Give an empty GPU a new (valid) layout; a ModelError if any instance is in use."""
        gpu = self.gpus[(node, gpu_index)]
        if not gpu.empty:
            raise ModelError(
                f"GPU {gpu_index} of node {node}: the MIG layout can change only when every instance is free"
            )
        instances = check_layout(gpu.model, layout)
        self._count(node, gpu, -1)
        gpu.layout, gpu.used, gpu.ready = instances, [False] * len(instances), ready
        self._count(node, gpu, +1)

    def set_ready(self, node: int, gpu_index: int, ready: bool) -> None:
        """Make a GPU usable again, or unusable (reconfiguring, rebooting)."""
        gpu = self.gpus[(node, gpu_index)]
        self._count(node, gpu, -1)
        gpu.ready = ready
        self._count(node, gpu, +1)

    def node_gpus(self, node: int) -> tuple[int, ...]:
        """The MIG-mode GPU indices of ``node``."""
        return self.by_node.get(node, ())

    def choose(self, node: int, profile: str) -> MigSlot | None:
        """The free instance of ``profile`` on ``node`` to use: on the fullest ready GPU, lowest start."""
        best: tuple[int, int, int] | None = None
        for index in self.by_node.get(node, ()):
            gpu = self.gpus[(node, index)]
            if not gpu.ready:
                continue
            for position, instance in enumerate(gpu.layout):
                if instance.profile == profile and not gpu.used[position]:
                    key = (-sum(gpu.used), index, position)
                    best = key if best is None or key < best else best
        if best is None:
            return None
        gpu = self.gpus[(node, best[1])]
        instance = gpu.layout[best[2]]
        return MigSlot(best[1], profile, instance.start, instance_milli(gpu.model, profile))

    def occupy(self, node: int, slot: MigSlot) -> None:
        """Mark ``slot`` used; a ModelError if it is not a free instance of a ready GPU."""
        gpu, position = self._find(node, slot)
        if gpu.used[position] or not gpu.ready:
            raise ModelError(f"MIG {slot.profile}@{slot.start} on GPU {slot.gpu} of node {node} is not free")
        gpu.used[position] = True
        self.free[node, self.profiles.index(slot.profile)] -= 1
        self.used_slices[node] += gpu.model.profile(slot.profile).compute_slices

    def vacate(self, node: int, slot: MigSlot) -> None:
        """Mark ``slot`` free again."""
        gpu, position = self._find(node, slot)
        if not gpu.used[position]:
            raise ModelError(
                f"MIG {slot.profile}@{slot.start} on GPU {slot.gpu} of node {node} is already free"
            )
        gpu.used[position] = False
        self.used_slices[node] -= gpu.model.profile(slot.profile).compute_slices
        if gpu.ready:
            self.free[node, self.profiles.index(slot.profile)] += 1

    def _find(self, node: int, slot: MigSlot) -> tuple[MigGpu, int]:
        gpu = self.gpus.get((node, slot.gpu))
        wanted = MigInstance(slot.profile, slot.start)
        if gpu is None or wanted not in gpu.layout:
            raise ModelError(f"node {node} GPU {slot.gpu} has no MIG instance {slot.profile}@{slot.start}")
        return gpu, gpu.layout.index(wanted)

    def instances(self) -> Iterator[tuple[int, int, MigGpu]]:
        """Every MIG GPU as (node, GPU index, state), in index order."""
        for (node, index), gpu in sorted(self.gpus.items()):
            yield node, index, gpu
