"""The live cluster as simulator inputs: a cluster spec (YAML) and a job trace (canonical Parquet).

``loadmaster kube snapshot`` writes both so an operator can replay the real
cluster in the simulator (``loadmaster simulate --cluster cluster.yaml
--trace jobs.parquet``). Nodes with the same pool, zone, resource type,
GPUs, CPU, memory and labels become one node group (the simulator names its
nodes ``<group>-000`` and on, not as Kubernetes does). Every job loadmaster
schedules becomes one trace row: bound jobs with status ``running`` and their
start time, waiting jobs with status ``unknown``; durations are null because
the API does not know them (the replay takes the time limit instead).
:func:`past_usage_of` gives the fair-share usage and run-time history in the
trace's time, for ``simulate --past-usage``.
"""

from __future__ import annotations

import re
from collections import defaultdict
from dataclasses import dataclass, replace
from typing import Any

import pyarrow as pa

from loadmaster.kube import translate as tr
from loadmaster.kube.history import JobHistory
from loadmaster.kube.state import KubeState
from loadmaster.model import Node
from loadmaster.model.usage import PastUsage
from loadmaster.traces.replay import UNKNOWN_RUN_TIME_KEY
from loadmaster.traces.rows import ReadReport
from loadmaster.traces.schema import SCHEMA
from loadmaster.traces.trace import Trace

FORMAT = "kube-snapshot"
_SKIPPED_LABELS = {"kubernetes.io/hostname", tr.POOL_LABEL, tr.ZONE_LABEL, tr.RACK_LABEL, tr.TYPE_LABEL}


@dataclass(frozen=True)
class Snapshot:
    """A cluster spec document (for ``loadmaster.config.load_cluster``) and the jobs as a trace."""

    cluster: dict[str, Any]
    trace: Trace


def take_snapshot(state: KubeState, name: str = "live") -> Snapshot:
    """Translate what ``state`` holds now; ``KubeError`` when it has no node."""
    nodes = [tr.node_from(o).node for _, o in sorted(state.objects["nodes"].items())]
    if not nodes:
        raise tr.KubeError("the cluster has no nodes to snapshot")
    return Snapshot(cluster_spec(nodes, name), job_trace(state))


def cluster_spec(nodes: list[Node], name: str) -> dict[str, Any]:
    """A cluster spec document grouping identical nodes into node groups."""
    types = tr.resource_types(nodes)
    groups: dict[tuple[Any, ...], list[Node]] = defaultdict(list)
    for node in nodes:
        labels = tuple(sorted((k, v) for k, v in node.labels.items() if k not in _SKIPPED_LABELS))
        key = (node.pool, node.zone, node.resource_type, node.gpus, node.cpu_milli, node.memory_mib, labels)
        groups[(*key, node.taints)].append(node)
    pools: dict[str, dict[str, Any]] = defaultdict(lambda: {"node_groups": []})
    for (pool, zone, rtype, gpus, cpu, memory, labels, taints), members in groups.items():
        node_groups = pools[pool]["node_groups"]
        node_groups.append(
            {
                "name": f"{_slug(rtype)}-{_slug(zone)}-{len(node_groups)}",
                "count": len(members),
                "resource_type": rtype,
                "gpus": gpus,
                "cpu_milli": cpu,
                "memory_mib": memory,
                "zone": zone,
                "racks": len({n.rack for n in members}),
                "labels": dict(labels),
                "taints": [{"key": t.key, "value": t.value, "effect": t.effect} for t in taints],
            }
        )
    return {
        "name": name,
        "description": f"snapshot of a Kubernetes cluster: {len(nodes)} nodes",
        "resource_types": {
            t.name: {
                "gpu_model": t.gpu_model,
                "gpu_memory_mib": t.gpu_memory_mib,
                "cpu_milli_per_gpu": t.cpu_milli_per_gpu,
                "memory_mib_per_gpu": t.memory_mib_per_gpu,
            }
            for t in types.values()
        },
        "pools": dict(pools),
    }


def job_trace(state: KubeState) -> Trace:
    """Every job loadmaster schedules (bound or waiting) as a canonical trace row."""
    jobs: dict[str, list[tr.Obj]] = defaultdict(list)
    for pod in sorted(state.objects["pods"].values(), key=tr.key_of):
        if tr.is_ours(pod, state.scheduler_names) and tr.is_active(pod):
            jobs[tr.job_id_of(pod)].append(pod)
    rows = []
    for job_id, pods in jobs.items():
        group = state.objects["podgroups"].get(job_id) if tr.pod_group_of(pods[0]) else None
        job = tr.job_from(job_id, pods, group, state.default_time_limit_s)
        started = [tr.timestamp_s(p.get("status", {}).get("startTime")) for p in pods if tr.node_name_of(p)]
        rows.append((job, min(started) if started else None))
    origin = min((job.submit_s for job, _ in rows), default=0.0)
    columns: dict[str, list[Any]] = {f.name: [] for f in SCHEMA}
    for job, start in rows:
        values = {
            "job_id": job.id,
            "user": job.user,
            "group": job.group,
            "queue": job.queue,
            "submit_s": job.submit_s - origin,
            "start_s": None if start is None else start - origin,
            "end_s": None,
            "duration_s": None,
            "time_limit_s": job.time_limit_s,
            "tasks": job.tasks,
            "gpu_milli_per_task": job.request.gpu_milli,
            "cpu_milli_per_task": job.request.cpu_milli,
            "memory_mib_per_task": job.request.memory_mib,
            "gpu_memory_mib": None,
            "gpu_model": job.resource_type,
            "status": "running" if start is not None else "unknown",
        }
        for column, value in values.items():
            columns[column].append(value)
    table = pa.Table.from_pydict(columns, schema=SCHEMA)
    meta = {
        "format": FORMAT,
        "source": "kubernetes",
        "origin_epoch_s": f"{origin:.3f}",
        UNKNOWN_RUN_TIME_KEY: "time_limit",  # a replay runs each job for its limit, as the scheduler plans
    }
    return Trace(table, meta, ReadReport("kubernetes", FORMAT, rows=len(rows)))


def past_usage_of(history: JobHistory, trace: Trace, now: float) -> PastUsage:
    """``history`` as of ``now``, in the time of ``trace`` (seconds from its first submission), as
    ``simulate --past-usage`` reads it."""
    origin = float(trace.meta.get("origin_epoch_s", "0") or 0.0) if len(trace) else now  # no jobs: t=0
    past = history.past(now)
    return replace(past, as_of_s=now - origin)


def _slug(text: str) -> str:
    return re.sub(r"[^a-z0-9]+", "-", text.lower()).strip("-") or "x"
