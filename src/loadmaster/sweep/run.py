"""One cell, in a worker: build the cluster, the jobs and the profile, simulate, summarise.

Runs wherever the executor puts it (a local process, a Ray node). The files a
cell reads are checked against the digests the driver planned with, so a node
that sees a different file fails the cell with that reason instead of storing
a result under a key it does not match.
"""

from __future__ import annotations

import json
import math
import time
from functools import lru_cache
from pathlib import Path
from typing import Any

from loadmaster import __version__
from loadmaster.config import Cluster, Workload, load_cluster, load_trace_workload, load_workload
from loadmaster.errors import ConfigError
from loadmaster.metrics import summarize
from loadmaster.scheduling import PluginSpec, Scheduler, build_profile
from loadmaster.scheduling.mig_plan import with_interactive_default
from loadmaster.sim import SimOptions, simulate
from loadmaster.sim.mig import MigSimOptions
from loadmaster.sweep.spec import METRIC_NAMES, Cell, Input, file_digest
from loadmaster.workload import offered_load


def _check(source: Input) -> None:
    if Path(source.path).is_absolute() and file_digest(Path(source.path)) != source.digest:
        raise ConfigError(
            source.path, "", "the file changed since the sweep was planned (its digest differs)"
        )


@lru_cache(maxsize=4)
def _cluster(source: Input) -> Cluster:
    _check(source)
    return load_cluster(source.path)


@lru_cache(maxsize=8)
def _workload(
    cell_cluster: Input, source: Input, kind: str, *, jobs: int | None, load: float | None, seed: int
) -> Workload:
    """The jobs of a cell; cached, since the profiles of one seed share them."""
    _check(source)
    cluster = _cluster(cell_cluster)
    if kind == "trace":
        return load_trace_workload(Path(source.path), cluster, jobs=jobs, load=load, seed=seed)
    return load_workload(source.path, cluster, jobs=jobs, load=load, seed=seed)


def run_cell(cell: Cell) -> dict[str, Any]:
    """Simulate ``cell``; returns its record: key, inputs, metrics, wall time, version."""
    started = time.perf_counter()
    cluster = _cluster(cell.cluster)
    workload = _workload(
        cell.cluster, cell.workload, cell.kind, jobs=cell.jobs, load=cell.load, seed=cell.seed
    )
    plugins = [PluginSpec(name, json.loads(args), weight) for name, args, weight in cell.profile.plugins]
    profile = build_profile(cell.profile.name, cell.profile.actions, plugins, f"sweep cell {cell.key}")
    mig = MigSimOptions(cluster.mig) if cluster.mig else None
    jobs = with_interactive_default(workload.jobs, cluster.mig, cluster.nodes)
    options = SimOptions(seed=cell.seed, period_s=cell.period_s, mig=mig)
    result = simulate(cluster.nodes, Scheduler(profile), jobs, options)
    summary = summarize(result.jobs, result.timeline).to_dict()
    metrics = {name: summary[name] for name in METRIC_NAMES}
    return {
        "key": cell.key,
        "inputs": cell.identity(),
        "labels": cell.labels(),
        "offered_load": _finite(offered_load(workload.jobs, cluster.nodes.total_gpus))
        if len(workload.jobs) > 1
        else None,
        "metrics": metrics,
        "wall_s": round(time.perf_counter() - started, 3),
        "loadmaster": __version__,
    }


def _finite(value: float) -> float | None:
    return value if math.isfinite(value) else None
