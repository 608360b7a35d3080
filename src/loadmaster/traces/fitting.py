"""Fitting workload models to traces and turning their samples back into traces.

The math lives in :mod:`loadmaster.workload` and sees plain columns; this
module reads them off the canonical job table and writes a sample as one.
"""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa

from loadmaster.traces.replay import trace_capacity_gpus
from loadmaster.traces.rows import ReadReport
from loadmaster.traces.schema import SCHEMA
from loadmaster.traces.trace import Trace
from loadmaster.workload.fit import JobColumns
from loadmaster.workload.fitted import SampledJobs

SAMPLE_FORMAT = "workload-sample"
"""The ``format`` recorded in the metadata of a trace sampled from a workload model."""


def job_columns(trace: Trace, capacity_gpus: int | None = None) -> JobColumns:
    """The columns a fit reads, from ``trace``; ``capacity_gpus`` overrides the trace's own."""
    origin = trace.meta.get("origin_epoch_s")
    try:
        origin_epoch_s = float(origin) if origin is not None else None
    except ValueError:
        origin_epoch_s = None
    if origin_epoch_s is not None and not math.isfinite(origin_epoch_s):
        origin_epoch_s = None
    return JobColumns(
        user=np.asarray([u or "" for u in trace.column("user")], dtype=object),
        submit_s=trace.column("submit_s"),
        duration_s=trace.column("duration_s"),
        time_limit_s=trace.column("time_limit_s"),
        tasks=trace.column("tasks"),
        gpu_milli_per_task=trace.column("gpu_milli_per_task"),
        gpu_memory_mib=trace.column("gpu_memory_mib"),
        source=trace.meta.get("source", ""),
        origin_epoch_s=origin_epoch_s,
        capacity_gpus=capacity_gpus or trace_capacity_gpus(trace),
    )


def sample_trace(jobs: SampledJobs, meta: dict[str, str]) -> Trace:
    """The sampled jobs as a canonical trace (ids s000001, ...); ``meta`` goes to its metadata."""
    n = len(jobs)

    def nullable(values: np.ndarray, kind: pa.DataType) -> pa.Array:
        missing = ~np.isfinite(values)
        return pa.array(np.where(missing, 0.0, values), type=kind, mask=missing, safe=False)

    columns: dict[str, pa.Array] = {
        "job_id": pa.array([f"s{i + 1:06d}" for i in range(n)], pa.string()),
        "user": pa.array(list(jobs.user), pa.string()),
        "group": pa.array(list(jobs.user_class), pa.string()),
        "queue": pa.nulls(n, pa.string()),
        "submit_s": pa.array(jobs.submit_s, pa.float64()),
        "start_s": pa.nulls(n, pa.float64()),
        "end_s": pa.nulls(n, pa.float64()),
        "duration_s": pa.array(jobs.duration_s, pa.float64()),
        "time_limit_s": nullable(jobs.time_limit_s, pa.float64()),
        "tasks": pa.array(jobs.tasks, pa.int32()),
        "gpu_milli_per_task": pa.array(jobs.gpu_milli_per_task, pa.int32()),
        "cpu_milli_per_task": pa.nulls(n, pa.int32()),
        "memory_mib_per_task": pa.nulls(n, pa.int64()),
        "gpu_memory_mib": nullable(np.round(jobs.gpu_memory_mib), pa.int32()),
        "gpu_model": pa.nulls(n, pa.string()),
        "status": pa.array(["completed"] * n, pa.string()),
    }
    table = pa.Table.from_arrays([columns[f.name] for f in SCHEMA], schema=SCHEMA)
    full_meta = {"format": SAMPLE_FORMAT, **meta}
    return Trace(table, full_meta, ReadReport(full_meta.get("source", ""), SAMPLE_FORMAT, rows=n))
