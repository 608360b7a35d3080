"""Workload specs: which synthetic workload to generate for a cluster, in YAML.

```yaml
kind: lab          # the research-lab generator of loadmaster.workload.synthetic
jobs: 4000
load: 0.85         # offered GPU-seconds / (pool GPUs x span), per pool
seed: 7
pools:             # which pools receive jobs, and the largest job each gets
  training: {}
  interactive: {max_job_gpus: 1}
params: {users: 40}   # any field of LabWorkloadParams
```

Each pool receives jobs at ``load`` over the same span of time: the number
of jobs per pool is chosen from a pilot sample so that every pool's arrivals
start and end together. Giving ``share`` for every pool fixes the fraction of
jobs instead; each pool then still runs at ``load``, but over its own span.

Each pool's jobs go to a queue named after the pool, so a blocked head of
the training queue never holds back notebooks in the interactive pool.
"""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass
from typing import Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadmaster.config.cluster import Cluster
from loadmaster.config.yamlfile import YamlDocument, find_document, validate
from loadmaster.errors import ConfigError, ModelError
from loadmaster.model import TraceJob
from loadmaster.workload import LabWorkloadParams, PoolTarget, sample_lab_workload


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PoolShare(_Strict):
    """A pool that receives jobs: the largest job it gets and, optionally, its share of the jobs."""

    share: float | None = Field(default=None, gt=0)
    max_job_gpus: int | None = Field(default=None, ge=1)


class WorkloadSpec(_Strict):
    """A synthetic workload for a cluster."""

    kind: Literal["lab"] = "lab"
    description: str = ""
    jobs: int = Field(ge=1, le=10_000_000)
    load: float = Field(gt=0, le=10)
    seed: int = 0
    pools: dict[str, PoolShare] = Field(min_length=1)
    params: dict[str, object] = Field(default_factory=dict)


@dataclass(frozen=True)
class Workload:
    """Generated jobs with the spec that made them."""

    name: str
    source: str
    spec: WorkloadSpec
    jobs: list[TraceJob]


BUILTIN_WORKLOADS = ("lab", "large")
"""Workload specs that ship with loadmaster, usable by name."""


def load_workload(
    name_or_path: str,
    cluster: Cluster,
    *,
    jobs: int | None = None,
    load: float | None = None,
    seed: int | None = None,
) -> Workload:
    """Generate the workload of a built-in name or a spec file for ``cluster``.

    ``jobs``, ``load`` and ``seed`` override the file's values when given.
    """
    doc = find_document("workloads", name_or_path, BUILTIN_WORKLOADS)
    spec = validate(WorkloadSpec, doc)
    overrides = {"jobs": jobs, "load": load, "seed": seed}
    spec = spec.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    targets = [_target(doc, cluster, pool, share) for pool, share in spec.pools.items()]
    params = _params(doc, spec)
    try:
        if any(share.share is None for share in spec.pools.values()):
            targets = _balanced(params, targets, spec)
        traces = sample_lab_workload(
            params, targets, n_jobs=spec.jobs, load=spec.load, rng=np.random.default_rng(spec.seed)
        )
    except ModelError as exc:
        raise ConfigError(doc.source, "", str(exc)) from None
    name = name_or_path if name_or_path in BUILTIN_WORKLOADS else doc.source
    queued = [
        TraceJob(dataclasses.replace(t.job, queue=t.job.pool or "default"), t.duration_s) for t in traces
    ]
    return Workload(name=name, source=doc.source, spec=spec, jobs=queued)


def _target(doc: YamlDocument, cluster: Cluster, pool: str, share: PoolShare) -> PoolTarget:
    nodes = cluster.nodes
    if pool not in nodes.pools:
        raise doc.error(
            ["pools", pool], f"cluster {cluster.name} has no pool {pool!r}; pools: {', '.join(nodes.pools)}"
        )
    in_pool = [n for n in nodes.nodes if n.pool == pool]
    widest = max(in_pool, key=lambda n: n.gpus)
    capacity = sum(n.gpus for n in in_pool)
    return PoolTarget(
        name=pool,
        resource_type=nodes.resource_types[widest.resource_type],
        capacity_gpus=capacity,
        gpus_per_node=widest.gpus,
        share=share.share or 1.0,
        max_job_gpus=min(share.max_job_gpus or capacity, capacity),
    )


PILOT_JOBS = 4000
"""Jobs in the pilot sample that estimates each pool's mean GPU-seconds per job."""


def _balanced(params: LabWorkloadParams, targets: list[PoolTarget], spec: WorkloadSpec) -> list[PoolTarget]:
    """Shares that give every pool the same span at the same load: capacity / mean GPU-seconds per job."""
    even = [dataclasses.replace(t, share=1.0) for t in targets]
    pilot = sample_lab_workload(
        params, even, n_jobs=PILOT_JOBS, load=spec.load, rng=np.random.default_rng(spec.seed + 1)
    )
    shares = []
    for target in targets:
        work = [t.job.gpus * t.duration_s for t in pilot if t.job.pool == target.name]
        shares.append(target.capacity_gpus / float(np.mean(work)) if work else 1.0)
    return [dataclasses.replace(t, share=s / sum(shares)) for t, s in zip(targets, shares, strict=True)]


def _params(doc: YamlDocument, spec: WorkloadSpec) -> LabWorkloadParams:
    known = {f.name for f in dataclasses.fields(LabWorkloadParams)}
    for key in spec.params:
        if key not in known:
            raise doc.error(["params", key], f"unknown parameter; allowed: {', '.join(sorted(known))}")
    try:
        return LabWorkloadParams(**spec.params)  # type: ignore[arg-type]
    except (ModelError, TypeError) as exc:
        raise doc.error(["params"], str(exc)) from None
