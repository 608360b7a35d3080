"""Nodes and the static node table shared by every snapshot of a cluster."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError
from loadmaster.model.constraints import Taint
from loadmaster.model.resources import ResourceType


@dataclass(frozen=True, slots=True)
class Node:
    """One host: where it sits (pool, zone, rack), what it has, its labels and its taints.

    ``unschedulable`` is a cordoned node (Kubernetes ``spec.unschedulable``);
    ``max_pods`` is how many tasks it may hold in all, counting tasks of other
    schedulers (``allocatable.pods``; None: no limit).
    """

    name: str
    pool: str
    zone: str
    rack: str
    resource_type: str
    gpus: int
    cpu_milli: int
    memory_mib: int
    labels: Mapping[str, str] = field(default_factory=dict)
    taints: tuple[Taint, ...] = ()
    unschedulable: bool = False
    max_pods: int | None = None

    def __post_init__(self) -> None:
        if self.gpus < 0 or self.cpu_milli < 0 or self.memory_mib < 0:
            raise ModelError(f"node {self.name}: gpus, cpu_milli and memory_mib must be >= 0")
        if self.max_pods is not None and self.max_pods < 0:
            raise ModelError(f"node {self.name}: max_pods must be >= 0 or None, got {self.max_pods}")


def _indices(values: Sequence[str], names: tuple[str, ...]) -> list[int]:
    position = {name: i for i, name in enumerate(names)}
    return [position[v] for v in values]


def _frozen(values: Sequence[int] | npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    array = np.asarray(values, dtype=np.int64)
    array.setflags(write=False)
    return array


@dataclass(frozen=True, eq=False)
class NodeTable:
    """The nodes of a cluster as parallel read-only arrays, for vectorised filter and score.

    Node ``i`` is ``nodes[i]``; ``pool_index[i]`` indexes ``pools``,
    ``type_index[i]`` indexes ``resource_types``. ``max_gpus`` is the width of
    the per-GPU arrays of a snapshot; a node with fewer GPUs has its missing
    columns permanently at zero free.
    """

    nodes: tuple[Node, ...]
    resource_types: Mapping[str, ResourceType]
    pools: tuple[str, ...]
    pool_index: npt.NDArray[np.int64]
    type_names: tuple[str, ...]
    type_index: npt.NDArray[np.int64]
    racks: tuple[str, ...]
    rack_index: npt.NDArray[np.int64]
    zones: tuple[str, ...]
    zone_index: npt.NDArray[np.int64]
    gpus: npt.NDArray[np.int64]
    cpu_milli: npt.NDArray[np.int64]
    memory_mib: npt.NDArray[np.int64]
    max_gpus: int

    @classmethod
    def build(cls, nodes: Sequence[Node], resource_types: Mapping[str, ResourceType]) -> NodeTable:
        """Index ``nodes``; every node's resource type must be in ``resource_types``."""
        if not nodes:
            raise ModelError("a cluster needs at least one node")
        names = [n.name for n in nodes]
        if len(set(names)) != len(names):
            dup = sorted({n for n in names if names.count(n) > 1})[:3]
            raise ModelError(f"node names must be unique; repeated: {', '.join(dup)}")
        for node in nodes:
            if node.resource_type not in resource_types:
                raise ModelError(
                    f"node {node.name}: unknown resource type {node.resource_type!r}; "
                    f"known: {', '.join(sorted(resource_types))}"
                )
        pools = tuple(dict.fromkeys(n.pool for n in nodes))
        type_names = tuple(dict.fromkeys(n.resource_type for n in nodes))
        racks = tuple(dict.fromkeys(n.rack for n in nodes))
        zones = tuple(dict.fromkeys(n.zone for n in nodes))
        return cls(
            nodes=tuple(nodes),
            resource_types=dict(resource_types),
            pools=pools,
            pool_index=_frozen(_indices([n.pool for n in nodes], pools)),
            type_names=type_names,
            type_index=_frozen(_indices([n.resource_type for n in nodes], type_names)),
            racks=racks,
            rack_index=_frozen(_indices([n.rack for n in nodes], racks)),
            zones=zones,
            zone_index=_frozen(_indices([n.zone for n in nodes], zones)),
            gpus=_frozen([n.gpus for n in nodes]),
            cpu_milli=_frozen([n.cpu_milli for n in nodes]),
            memory_mib=_frozen([n.memory_mib for n in nodes]),
            max_gpus=max(n.gpus for n in nodes),
        )

    def __len__(self) -> int:
        return len(self.nodes)

    @property
    def total_gpus(self) -> int:
        """GPUs in the whole cluster."""
        return int(self.gpus.sum())

    def pool_gpus(self, pool: str) -> int:
        """GPUs in one pool."""
        return int(self.gpus[self.pool_index == self.pools.index(pool)].sum())

    def gpu_exists(self) -> npt.NDArray[np.bool_]:
        """Mask of shape (nodes, max_gpus): True where the GPU column is a real GPU."""
        return np.arange(self.max_gpus)[None, :] < self.gpus[:, None]
