"""Standard Workload Format (Parallel Workloads Archive): 18 whitespace-separated fields per job.

Header comments (``; MaxProcs: 256``) go to the trace's metadata. Each
processor counts as one task of one whole GPU slot, so an HPC log replays on
a machine of ``MaxProcs`` slots (see docs/traces.md). Following the common
protocol (RLScheduler, Lublin), a job's processors are the larger of the
allocated (field 5) and requested (field 8) counts, and -1 means unknown.
"""

from __future__ import annotations

from collections.abc import Iterator

from loadmaster.traces.rows import Row, RowError, bad, guard, number
from loadmaster.traces.source import Lines

FIELDS = (
    "job_number",
    "submit_time",
    "wait_time",
    "run_time",
    "allocated_processors",
    "average_cpu_time",
    "used_memory_kb",
    "requested_processors",
    "requested_time",
    "requested_memory_kb",
    "status",
    "user_id",
    "group_id",
    "executable",
    "queue",
    "partition",
    "preceding_job",
    "think_time",
)
"""The 18 SWF fields in file order, named as in the format's definition."""

_STATUS = {"0": "failed", "1": "completed", "5": "cancelled"} | dict.fromkeys(("2", "3", "4"), "completed")
"""SWF status: 1 completed; 2-4 partial runs or checkpoints of a finished job; 0 failed; 5 cancelled."""


def read_swf(lines: Lines, meta: dict[str, str]) -> Iterator[tuple[int, Row | RowError]]:
    """Rows of the canonical table from SWF ``lines``; header comments go into ``meta``."""
    for text in lines:
        stripped = text.strip()
        if not stripped:
            continue
        if stripped.startswith(";"):
            key, sep, value = stripped[1:].partition(":")
            if sep and key.strip():
                meta[key.strip()] = value.strip()
            continue
        yield lines.line, guard(_row, stripped.split())


def _row(fields: list[str]) -> Row:
    if len(fields) != len(FIELDS):
        raise bad("fields", f"an SWF line has {len(FIELDS)} fields, this one has {len(fields)}")
    submit = number(fields[1], "submit_time")
    wait = number(fields[2], "wait_time", allow_negative_one=True)
    run = number(fields[3], "run_time", allow_negative_one=True)
    allocated = number(fields[4], "allocated_processors", allow_negative_one=True) or 0
    requested = number(fields[7], "requested_processors", allow_negative_one=True) or 0
    procs = int(max(allocated, requested))
    if procs < 1:
        raise bad("allocated_processors", "neither field 5 nor field 8 gives a processor count >= 1")
    memory_kb = number(fields[6], "used_memory_kb", allow_negative_one=True)
    start = submit + wait if submit is not None and wait is not None else None
    return {
        "job_id": fields[0],
        "user": "" if fields[11] == "-1" else fields[11],
        "group": "" if fields[12] == "-1" else fields[12],
        "queue": None if fields[14] == "-1" else fields[14],
        "submit_s": submit,
        "start_s": start,
        "end_s": start + run if start is not None and run is not None else None,
        "duration_s": run,
        "time_limit_s": number(fields[8], "requested_time", allow_negative_one=True),
        "tasks": procs,
        "gpu_milli_per_task": 1000,
        "cpu_milli_per_task": 1000,
        "memory_mib_per_task": int(memory_kb // 1024) if memory_kb is not None else None,
        "status": _STATUS.get(fields[10], "unknown"),
    }
