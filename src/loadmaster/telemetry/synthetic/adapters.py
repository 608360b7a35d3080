"""Telemetry plans from the simulator's state: the running jobs of a snapshot, or the jobs of a run."""

from __future__ import annotations

import math
from collections.abc import Sequence

import numpy as np

from loadmaster.model.job import RunningJob
from loadmaster.model.node import NodeTable
from loadmaster.model.outcome import JobTable
from loadmaster.model.snapshot import ClusterSnapshot
from loadmaster.telemetry.synthetic.plan import Fault, GpuRef, NodeSpec, PlannedJob, TelemetryPlan, Workload


def plan_from_snapshot(
    snapshot: ClusterSnapshot, until_s: float, faults: Sequence[Fault] = (), seed: int = 0
) -> TelemetryPlan:
    """The running jobs of a snapshot on their exact GPUs, each running until its expected end
    (at most ``until_s``); partly bound gangs are idle allocations."""
    nodes = node_specs(snapshot.nodes)
    jobs = tuple(
        _running_spec(snapshot.nodes, rj, until_s) for rj in snapshot.running if rj.start_s < until_s
    )
    return TelemetryPlan(nodes=nodes, jobs=jobs, faults=tuple(faults), seed=seed)


def plan_from_run(
    nodes: NodeTable, jobs: JobTable, faults: Sequence[Fault] = (), seed: int = 0
) -> TelemetryPlan:
    """The jobs of a simulator run on the nodes it recorded; GPUs on each node are picked lowest-free-first
    at each start (the job table records nodes, not GPU indices), the job's GPUs split evenly over them."""
    index = {n.name: i for i, n in enumerate(nodes.nodes)}
    free_at = [np.zeros(n.gpus) for n in nodes.nodes]
    specs: list[PlannedJob] = []
    for j in np.argsort(jobs.start_s, kind="stable"):
        start, end = float(jobs.start_s[j]), float(jobs.end_s[j])
        names = [n for n in str(jobs.node_names[j]).split(",") if n]
        if not (math.isfinite(start) and math.isfinite(end)) or not names or end <= start:
            continue
        per_node = max(1, round(float(jobs.gpus[j]) / len(names)))
        picked: list[GpuRef] = []
        for name in names:
            free = free_at[index[name]]
            choice = np.flatnonzero(free <= start)[:per_node]
            free[choice] = end
            picked += [GpuRef(name, int(g)) for g in choice]
        if picked:
            specs.append(PlannedJob(str(jobs.job_id[j]), str(jobs.user[j]), tuple(picked), start, end))
    return TelemetryPlan(nodes=node_specs(nodes), jobs=tuple(specs), faults=tuple(faults), seed=seed)


def node_specs(nodes: NodeTable) -> tuple[NodeSpec, ...]:
    """One :class:`NodeSpec` per node of a table, in order, with its GPU model and interconnect."""
    specs = []
    for node in nodes.nodes:
        rtype = nodes.resource_types.get(node.resource_type)
        model = rtype.gpu_model if rtype is not None else node.resource_type
        infiniband = rtype is not None and rtype.interconnect == "infiniband"
        specs.append(NodeSpec(node.name, node.gpus, model, infiniband))
    return tuple(specs)


def _running_spec(nodes: NodeTable, rj: RunningJob, until_s: float) -> PlannedJob:
    gpus = tuple(GpuRef(nodes.nodes[p.node].name, int(g)) for p in rj.placements for g in p.gpu_indices)
    started = len(rj.placements) >= rj.job.tasks
    end = min(rj.expected_end_s, until_s) if rj.job.time_limit_s > 0 else until_s
    workload = Workload.TRAINING if started else Workload.IDLE
    return PlannedJob(
        rj.job.id, rj.job.user, tuple(sorted(set(gpus))), rj.start_s, max(end, rj.start_s + 1.0), workload
    )
