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

``kind: trace`` replays a recorded trace instead (see docs/replay.md):

```yaml
kind: trace
path: traces/lublin_256.swf   # relative to this file
format: swf                   # default: from the file name
load: 0.8                     # optional target offered load on the cluster
scale: rate                   # or sample: more jobs on a bigger cluster
pool: interactive             # optional: every job to this pool (its MIG settings apply)
```
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Literal

import numpy as np
from pydantic import BaseModel, ConfigDict, Field

from loadmaster.config.cluster import Cluster
from loadmaster.config.yamlfile import YamlDocument, find_document, validate
from loadmaster.errors import ConfigError, ModelError
from loadmaster.model import TraceJob
from loadmaster.traces import TraceError, read_trace
from loadmaster.traces.replay import ReplayError, ReplayOptions, ReplayReport, replay
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


class TraceWorkloadSpec(_Strict):
    """A recorded trace replayed on the cluster; each field is the :class:`ReplayOptions` field
    of the same name (``jobs`` is ``max_jobs``), so the defaults and their reasons are documented there."""

    kind: Literal["trace"]
    description: str = ""
    path: str = Field(min_length=1)
    """The trace file, relative to the spec file."""
    format: str | None = None
    on_error: Literal["stop", "skip"] = "stop"
    jobs: int | None = Field(default=None, ge=1)
    load: float | None = Field(default=None, gt=0, le=10)
    scale: Literal["rate", "sample"] = "rate"
    trace_gpus: int | None = Field(default=None, ge=1)
    seed: int = 0
    time_limit_factor: float = Field(default=1.0, gt=0)
    ignore_time_limits: bool = False
    queues: Literal["one", "trace"] = "one"
    requests: Literal["gpu", "trace"] = "gpu"
    too_big: Literal["drop", "stop"] = "drop"
    pool: str | None = None


@dataclass(frozen=True)
class Workload:
    """Generated or replayed jobs with the spec that made them (and, for a trace, what replay did)."""

    name: str
    source: str
    spec: WorkloadSpec | TraceWorkloadSpec
    jobs: list[TraceJob]
    replay: ReplayReport | None = None

    @property
    def load_text(self) -> str:
        """The load the jobs were made for, as a report states it."""
        if self.replay is not None and self.replay.offered_load is not None:
            return f"{self.replay.offered_load:.2f} (replayed)"
        return f"{self.spec.load}"


BUILTIN_WORKLOADS = ("lab", "large", "lab-mig", "lab-habits")
"""Workload specs that ship with loadmaster, usable by name."""


def load_workload(
    name_or_path: str,
    cluster: Cluster,
    *,
    jobs: int | None = None,
    load: float | None = None,
    seed: int | None = None,
    params: Mapping[str, object] | None = None,
) -> Workload:
    """Generate the workload of a built-in name or a spec file for ``cluster``.

    ``jobs``, ``load`` and ``seed`` override the file's values when given; ``params`` overrides
    single fields of the file's ``params`` (a ``lab`` spec only: a training family varies the
    model this way, :mod:`loadmaster.rl.family`).
    """
    doc = find_document("workloads", name_or_path, BUILTIN_WORKLOADS)
    kind = doc.data.get("kind", "lab") if isinstance(doc.data, dict) else "lab"
    if kind == "trace":
        if params:
            raise ConfigError(doc.source, "params", "a trace workload has no model parameters to override")
        spec_trace = validate(TraceWorkloadSpec, doc)
        return _replayed(doc, spec_trace, cluster, name=doc.source, jobs=jobs, load=load, seed=seed)
    if kind != "lab":
        raise doc.error(["kind"], f"Input should be 'lab' or 'trace' (got {kind!r})")
    spec = validate(WorkloadSpec, doc)
    overrides: dict[str, object] = {"jobs": jobs, "load": load, "seed": seed}
    if params:
        overrides["params"] = {**spec.params, **params}
    spec = spec.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    targets = [_target(doc, cluster, pool, share) for pool, share in spec.pools.items()]
    model = _params(doc, spec)
    try:
        if any(share.share is None for share in spec.pools.values()):
            targets = _balanced(model, targets, spec)
        traces = sample_lab_workload(
            model, targets, n_jobs=spec.jobs, load=spec.load, rng=np.random.default_rng(spec.seed)
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


def load_trace_workload(
    path: Path,
    cluster: Cluster,
    *,
    jobs: int | None = None,
    load: float | None = None,
    seed: int | None = None,
    on_error: Literal["stop", "skip"] = "stop",
) -> Workload:
    """Replay the trace at ``path`` on ``cluster`` with the defaults of ``kind: trace``.

    ``on_error`` is the trace spec's field of that name (``--on-error`` on the command line).
    """
    doc = YamlDocument(source="--trace", data={"kind": "trace", "path": str(path)}, root=None)
    spec = TraceWorkloadSpec(kind="trace", path=str(path.resolve()), on_error=on_error)
    return _replayed(doc, spec, cluster, name=str(path), jobs=jobs, load=load, seed=seed)


def _replayed(
    doc: YamlDocument,
    spec: TraceWorkloadSpec,
    cluster: Cluster,
    *,
    name: str,
    jobs: int | None,
    load: float | None,
    seed: int | None,
) -> Workload:
    """Read the spec's trace and replay it on ``cluster``; errors name the spec file and the field."""
    overrides: dict[str, Any] = {"jobs": jobs, "load": load, "seed": seed}
    spec = spec.model_copy(update={k: v for k, v in overrides.items() if v is not None})
    trace_path = Path(spec.path)
    if not trace_path.is_absolute():
        trace_path = Path(doc.source).parent / trace_path
    try:
        trace = read_trace(trace_path, spec.format, spec.on_error)
        options = ReplayOptions(
            load=spec.load,
            scale=spec.scale,
            trace_gpus=spec.trace_gpus,
            max_jobs=spec.jobs,
            time_limit_factor=spec.time_limit_factor,
            ignore_time_limits=spec.ignore_time_limits,
            queues=spec.queues,
            requests=spec.requests,
            too_big=spec.too_big,
            seed=spec.seed,
            pool=spec.pool,
        )
        replayed = replay(trace, cluster.nodes, options)
    except TraceError as exc:
        raise doc.error(["format" if exc.field == "format" else "path"], str(exc)) from None
    except ReplayError as exc:
        raise doc.error(["jobs" if exc.field == "max_jobs" else exc.field], exc.detail) from None
    if not replayed.jobs:
        reasons = "; ".join(replayed.report.lines()[1:]) or "the trace is empty"
        raise doc.error(
            ["path"], f"no job of {trace_path} can be replayed on cluster {cluster.name}: {reasons}"
        )
    return Workload(name, doc.source, spec, replayed.jobs, replayed.report)
