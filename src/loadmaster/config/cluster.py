"""Cluster specs: YAML files of resource types and pools of node groups.

```yaml
name: lab
resource_types:
  a100-80gb-ib: {gpu_model: A100-80GB, gpu_memory_mib: 81920,
                 cpu_milli_per_gpu: 12000, memory_mib_per_gpu: 122880, interconnect: infiniband}
pools:
  training:
    node_groups:
      - {name: a100, count: 16, resource_type: a100-80gb-ib, gpus: 8, zone: ib-1, racks: 4}
```

A node's CPU and memory default to its GPUs times the type's per-GPU bundle,
so jobs that ask for whole bundles pack exactly.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loadmaster.config.yamlfile import YamlDocument, find_document, validate
from loadmaster.errors import ModelError
from loadmaster.model import MigPoolConfig, Node, NodeTable, ResourceType, Taint
from loadmaster.model.cuda import DriverVersion, driver_labels
from loadmaster.model.mig import SMALLEST_FIT, MigModel, mig_model_for, parse_layout, profile_name


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ResourceTypeSpec(_Strict):
    """A GPU model with the CPU and memory that come with each GPU on its host class."""

    gpu_model: str
    gpu_memory_mib: int = Field(ge=0)
    cpu_milli_per_gpu: int = Field(ge=0)
    memory_mib_per_gpu: int = Field(ge=0)
    interconnect: Literal["infiniband", "ethernet"] = "ethernet"


class TaintSpec(_Strict):
    """A node taint as Kubernetes writes it; jobs that do not tolerate it keep off (``taint-toleration``)."""

    key: str = Field(min_length=1)
    value: str = ""
    effect: Literal["NoSchedule", "PreferNoSchedule", "NoExecute"] = "NoSchedule"


class NodeGroupSpec(_Strict):
    """``count`` identical nodes, named ``<name>-000`` and on, spread evenly over ``racks`` racks."""

    name: str = Field(min_length=1, pattern=r"^[a-z0-9]([-a-z0-9]*[a-z0-9])?$")
    count: int = Field(ge=1, le=100_000)
    resource_type: str
    gpus: int = Field(ge=0, le=64)
    cpu_milli: int | None = Field(default=None, ge=0)
    memory_mib: int | None = Field(default=None, ge=0)
    zone: str = "default"
    racks: int = Field(default=1, ge=1)
    labels: dict[str, str] = Field(default_factory=dict)
    driver_version: str | None = Field(default=None, pattern=r"^\d+\.\d+(\.\d+)?$")
    """NVIDIA driver of these nodes (``535.104.05``), written as GPU feature discovery's
    ``nvidia.com/cuda.driver.*`` labels for the ``cuda-compat`` plugin; default: not declared."""
    taints: list[TaintSpec] = Field(default_factory=list)


class MigSpec(_Strict):
    """A pool's GPUs in MIG mode: ``layout`` like ``"3g.40gb + 2g.20gb + 1g.10gb x2"`` (see docs/mig.md)."""

    layout: str = Field(min_length=1)
    gpus_per_node: int | None = Field(default=None, ge=1)
    """MIG mode on the first this many GPUs of each node; default all."""
    interactive_default: str | None = None
    """What single-task jobs of at most one GPU that name no profile get: a profile (``1g.10gb``), or
    ``smallest-fit``, the smallest profile of the layout that holds the job's GPU memory; default
    none (jobs keep their requests)."""

    @field_validator("interactive_default", mode="before")
    @classmethod
    def _a_name(cls, value: object) -> object:
        if value is not None and not isinstance(value, str):  # ``true`` is not a choice of profile
            raise ValueError(f"must be {SMALLEST_FIT} or a MIG profile such as 1g.10gb")
        return value


class PoolSpec(_Strict):
    """A set of node groups scheduled together (training, interactive, ...)."""

    description: str = ""
    node_groups: list[NodeGroupSpec] = Field(min_length=1)
    mig: MigSpec | None = None


class ClusterSpec(_Strict):
    """A whole cluster: its resource types and its pools."""

    name: str
    description: str = ""
    resource_types: dict[str, ResourceTypeSpec] = Field(min_length=1)
    pools: dict[str, PoolSpec] = Field(min_length=1)


@dataclass(frozen=True)
class Cluster:
    """A loaded cluster: its name, where it came from and its node table."""

    name: str
    source: str
    description: str
    nodes: NodeTable
    mig: tuple[MigPoolConfig, ...] = ()
    """The pools whose GPUs are in MIG mode."""


BUILTIN_CLUSTERS = ("lab", "large", "mixed-driver", "lab-mig")
"""Cluster specs that ship with loadmaster, usable by name."""


def load_cluster(name_or_path: str) -> Cluster:
    """Load a built-in cluster by name, or a cluster spec file by path."""
    return cluster_from_document(find_document("clusters", name_or_path, BUILTIN_CLUSTERS))


def cluster_from_document(doc: YamlDocument) -> Cluster:
    """Validate a parsed cluster spec and expand its node groups into nodes."""
    spec = validate(ClusterSpec, doc)
    types = {name: ResourceType(name=name, **rt.model_dump()) for name, rt in spec.resource_types.items()}
    nodes: list[Node] = []
    for pool_name, pool in spec.pools.items():
        for i, group in enumerate(pool.node_groups):
            path: list[str | int] = ["pools", pool_name, "node_groups", i]
            if group.resource_type not in types:
                raise doc.error(
                    [*path, "resource_type"],
                    f"unknown resource type {group.resource_type!r}; defined: {', '.join(types)}",
                )
            nodes.extend(_expand(pool_name, group, types[group.resource_type]))
    names = [n.name for n in nodes]
    if len(set(names)) != len(names):
        raise doc.error(["pools"], "two node groups share a name; node group names must be unique")
    mig = tuple(
        _mig_config(doc, name, pool, types) for name, pool in spec.pools.items() if pool.mig is not None
    )
    return Cluster(spec.name, doc.source, spec.description, NodeTable.build(nodes, types), mig)


def _mig_config(
    doc: YamlDocument, pool_name: str, pool: PoolSpec, types: dict[str, ResourceType]
) -> MigPoolConfig:
    """Check a pool's MIG section against every GPU model in the pool; errors name the field and line."""
    mig = pool.mig
    path: list[str | int] = ["pools", pool_name, "mig"]
    if mig is None:
        raise doc.error(path, "no MIG section")
    for group in pool.node_groups:
        gpu_model = types[group.resource_type].gpu_model
        model = mig_model_for(gpu_model)
        if model is None:
            raise doc.error([*path], f"node group {group.name}: GPU {gpu_model} does not support MIG")
        try:
            parse_layout(model, mig.layout)
        except ModelError as exc:
            raise doc.error([*path, "layout"], f"{mig.layout!r}: {exc}") from None
        _check_default(doc, [*path, "interactive_default"], model, mig.interactive_default)
    default = mig.interactive_default
    if default is not None and default != SMALLEST_FIT:
        default = profile_name(default)
    return MigPoolConfig(pool_name, mig.layout, mig.gpus_per_node, default)


def _check_default(doc: YamlDocument, path: list[str | int], model: MigModel, value: str | None) -> None:
    """``interactive_default`` must be smallest-fit or a profile of every GPU model of the pool."""
    if value is None or value == SMALLEST_FIT:
        return
    try:
        model.profile(profile_name(value))
    except ModelError:
        allowed = ", ".join([SMALLEST_FIT, *(p.name for p in model.profiles)])
        raise doc.error(
            path, f"{value!r} is neither {SMALLEST_FIT} nor a MIG profile of {model.name}; allowed: {allowed}"
        ) from None


def _expand(pool: str, group: NodeGroupSpec, rtype: ResourceType) -> list[Node]:
    cpu = group.cpu_milli if group.cpu_milli is not None else group.gpus * rtype.cpu_milli_per_gpu
    memory = group.memory_mib if group.memory_mib is not None else group.gpus * rtype.memory_mib_per_gpu
    per_rack = -(-group.count // group.racks)  # ceiling: fill racks in order, as racks are cabled
    labels = dict(group.labels)
    if group.driver_version is not None:
        labels.update(driver_labels(DriverVersion.parse(group.driver_version)))
    return [
        Node(
            name=f"{group.name}-{i:03d}",
            pool=pool,
            zone=group.zone,
            rack=f"{group.zone}/{group.name}-r{i // per_rack}",
            resource_type=rtype.name,
            gpus=group.gpus,
            cpu_milli=cpu,
            memory_mib=memory,
            labels=dict(labels),
            taints=tuple(Taint(t.key, t.value, t.effect) for t in group.taints),
        )
        for i in range(group.count)
    ]
