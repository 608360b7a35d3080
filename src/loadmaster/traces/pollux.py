"""Pollux (OSDI'21) workload CSVs: ``name,time,application,num_replicas,batch_size``.

The workloads of Pollux's simulator (petuum/adaptdl, branch ``osdi21-artifact``,
``simulator/workloads*/workload-*.csv``) list each job's submission time (s
from the workload's zero), its DL application (``cifar10``, ``imagenet``...),
and the replicas and batch size it starts with. They have no run times:
Pollux's simulator runs each job until its application has processed a fixed
amount of data, at a speed its throughput model gives. A ``duration`` column
(seconds), if a file has one, is read as the run time: that is how run times
are supplied (for example each job's completion time from a Pollux simulator
run, or a run time per application measured on the cluster to replay on).

Each replica is one GPU and Pollux may place replicas on any nodes, so a job
is ``num_replicas`` tasks of one GPU. The trace records no user, outcome,
CPU or memory; ``application`` and ``batch_size`` have no canonical column
and are dropped (``application`` is not a GPU model).
"""

from __future__ import annotations

from collections.abc import Iterator
from functools import partial

from loadmaster.traces.header import header_rows, whole
from loadmaster.traces.rows import Row, RowError, bad, number
from loadmaster.traces.source import Lines

REQUIRED = ("name", "time", "num_replicas")
"""Columns a Pollux workload must have; ``duration`` is read when present."""

NO_RUN_TIMES = (
    "Pollux workloads have no run times; add a duration column (seconds) to supply them (see docs/traces.md)"
)
"""The metadata's ``duration_s`` note for a workload without a ``duration`` column."""


def read_pollux(lines: Lines, meta: dict[str, str]) -> Iterator[tuple[int, Row | RowError]]:
    """Rows of the canonical table from a Pollux workload, one task per replica."""
    hint = "a Pollux workload starts with its header name,time,application,num_replicas,batch_size"
    return header_rows(lines, meta, REQUIRED, partial(_job, meta), hint=hint)


def _job(meta: dict[str, str], f: dict[str, str]) -> Row:
    replicas = whole(f["num_replicas"], "num_replicas", minimum=1)
    duration = None
    if "duration" not in f:
        meta["duration_s"] = NO_RUN_TIMES
    elif f["duration"]:
        duration = number(f["duration"], "duration")
        if duration is not None and duration < 0:
            raise bad("duration", f"must be >= 0 seconds, got {f['duration']!r}")
    return {
        "job_id": f["name"],
        "user": "",
        "group": "",
        "submit_s": number(f["time"], "time"),
        "duration_s": duration,
        "tasks": replicas,
        "gpu_milli_per_task": 1000,
        "status": "unknown",
    }
