"""Gavel (OSDI'20) job traces: ``.trace`` files, one job per line, 10 tab-separated fields, no header.

The fields, in order, are those Gavel's own ``scheduler/utils.py:parse_trace``
unpacks (stanford-futuredata/gavel, commit ``c4fa400``): ``job_type``
(``ResNet-50 (batch size 64)``), ``command``, ``working_directory``,
``num_steps_arg``, ``needs_data_dir`` (0/1), ``total_steps``,
``scale_factor`` (workers, one GPU each; >= 1), ``priority_weight``, ``SLO``
(-1: none) and ``arrival_time`` (s). Gavel numbers jobs in file order from 0,
and so do we. A job of ``scale_factor`` workers is that many tasks of one GPU.

Gavel runs a job for ``total_steps`` at the throughput of the GPU type it is
on, so the trace has no duration: ``duration_s`` is null, and so are the
recorded times; ``status`` is ``unknown`` and there is no user. ``job_type``
and ``total_steps`` have no canonical column and are dropped, as are the
command, directory, data flag, priority weight and SLO. The 7-field files
under ``traces/msr/`` are an older layout that Gavel's ``parse_trace`` no longer
reads either; they are refused with the field count.
"""

from __future__ import annotations

from collections.abc import Iterator
from pathlib import Path

from loadmaster.model.hetero import StepJob
from loadmaster.traces.rows import Row, RowError, TraceError, bad, guard, number
from loadmaster.traces.source import Lines

FIELDS = (
    "job_type",
    "command",
    "working_directory",
    "num_steps_arg",
    "needs_data_dir",
    "total_steps",
    "scale_factor",
    "priority_weight",
    "SLO",
    "arrival_time",
)
"""The 10 tab-separated fields of a Gavel trace line, in file order (``parse_trace``)."""


def read_gavel(lines: Lines, meta: dict[str, str]) -> Iterator[tuple[int, Row | RowError]]:
    """Rows of the canonical table from a Gavel ``.trace`` (blank lines skipped)."""
    index = 0
    for text in lines:
        stripped = text.rstrip("\r\n")
        if not stripped.strip():
            continue
        yield lines.line, guard(_row, (index, stripped.split("\t")))
        index += 1


def _row(numbered: tuple[int, list[str]]) -> Row:
    index, fields = numbered
    if len(fields) != len(FIELDS):
        raise bad(
            "fields",
            f"a Gavel trace line has {len(FIELDS)} tab-separated fields ({', '.join(FIELDS)}),"
            f" this one has {len(fields)}",
        )
    f = dict(zip(FIELDS, fields, strict=True))
    if not f["job_type"].strip():
        raise bad("job_type", "must name the job type, got ''")
    if f["needs_data_dir"] not in ("0", "1"):
        raise bad("needs_data_dir", f"must be 0 or 1, got {f['needs_data_dir']!r}")
    steps = number(f["total_steps"], "total_steps")
    if steps is None or steps <= 0 or steps != int(steps):
        raise bad("total_steps", f"must be a whole number > 0, got {f['total_steps']!r}")
    workers = number(f["scale_factor"], "scale_factor")
    if workers is None or workers < 1 or workers != int(workers):
        raise bad("scale_factor", f"must be a whole number >= 1, got {f['scale_factor']!r}")
    weight = number(f["priority_weight"], "priority_weight")
    if weight is None or weight <= 0:
        raise bad("priority_weight", f"must be > 0, got {f['priority_weight']!r}")
    number(f["SLO"], "SLO")
    arrival = number(f["arrival_time"], "arrival_time")
    if arrival is None or arrival < 0:
        raise bad("arrival_time", f"must be >= 0 s, got {f['arrival_time']!r}")
    return {
        "job_id": str(index),
        "user": "",
        "group": "",
        "submit_s": arrival,
        "start_s": None,
        "end_s": None,
        "duration_s": None,
        "tasks": int(workers),
        "gpu_milli_per_task": 1000,
        "status": "unknown",
    }


def read_step_jobs(path: Path) -> list[StepJob]:
    """The trace's jobs as Gavel's simulator runs them: job type, workers, total steps, weight, arrival.

    The canonical table drops ``job_type`` and ``total_steps`` (they have no
    column); the round simulator needs both. Each line is checked as
    :func:`read_gavel` checks it, and the first bad one stops the read with
    its line and field.
    """
    jobs: list[StepJob] = []
    with path.open(encoding="utf-8") as handle:
        for line_no, text in enumerate(handle, start=1):
            stripped = text.rstrip("\r\n")
            if not stripped.strip():
                continue
            fields = stripped.split("\t")
            checked = guard(_row, (len(jobs), fields))
            if isinstance(checked, RowError):
                raise TraceError(str(path), line_no, checked.field, checked.message)
            f = dict(zip(FIELDS, fields, strict=True))
            jobs.append(
                StepJob(
                    job_id=len(jobs),
                    job_type=f["job_type"],
                    scale_factor=int(float(f["scale_factor"])),
                    total_steps=int(float(f["total_steps"])),
                    arrival_s=float(f["arrival_time"]),
                    priority_weight=float(f["priority_weight"]),
                )
            )
    return jobs
