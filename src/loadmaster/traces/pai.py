"""Alibaba PAI (cluster-trace-gpu-v2020): the task table, with users and submit times from the job table.

``pai_task_table.csv`` defines the jobs: one row per task (a role such as
``worker`` or ``ps`` of a job), without a header in the public file (one is
accepted). Columns: ``job_name``, ``task_name``, ``inst_num``, ``status``,
``start_time``, ``end_time``, ``plan_cpu``, ``plan_mem``, ``plan_gpu``,
``gpu_type``. Each task becomes one gang of ``inst_num`` identical tasks with
id ``job_name/task_name``: ``plan_gpu`` is a percentage of one GPU (50 = half,
800 = eight), ``plan_cpu`` a percentage of one core, ``plan_mem`` GB (read as
GiB). An empty ``plan_gpu`` is a task without GPU; a share above one GPU that
is not whole (150) is rounded up to whole GPUs, the smallest allocation that
holds it.

``pai_job_table.csv`` (``job_name``, ``inst_id``, ``user``, ``status``,
``start_time``, ``end_time``; also without header) gives the user and the
submission time (its ``start_time``). It is read whole into memory first
(about 1M jobs) from the explicit path given to :func:`pai_reader`, or else
from beside the task table when the reader knows the task table's path.
Without it the user is '' and the task's launch time stands for its
submission, so waits read as zero.

PAI times are seconds on a shifted clock: the dates are fake, but read as
Unix time in UTC+8 the time of day and the weekday are real. They are kept as
they are (``origin_epoch_s`` is 0).
"""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from loadmaster.traces.header import COUNT_MAX, Header, whole
from loadmaster.traces.rows import Row, RowError, TraceError, bad, guard, number
from loadmaster.traces.source import Lines, open_text
from loadmaster.traces.trace import LineReader

TASK_FIELDS = (
    "job_name",
    "task_name",
    "inst_num",
    "status",
    "start_time",
    "end_time",
    "plan_cpu",
    "plan_mem",
    "plan_gpu",
    "gpu_type",
)
"""The task table's columns in file order (the public file has no header)."""

JOB_FIELDS = ("job_name", "inst_id", "user", "status", "start_time", "end_time")
"""The job table's columns in file order (the public file has no header)."""

JOB_TABLES = ("pai_job_table.csv", "pai_job_table.csv.gz")
"""Names of the job table looked for beside the task table."""

_STATUS = {"Terminated": "completed", "Failed": "failed", "Running": "running"}
"""PAI status; ``Waiting`` (never launched) and anything else is ``unknown``."""


@dataclass(frozen=True, slots=True)
class PaiJob:
    """What the job table adds to a job's tasks: its user and its submission time (s, PAI's clock)."""

    user: str
    submit_s: float | None


def read_pai(lines: Lines, meta: dict[str, str]) -> Iterator[tuple[int, Row | RowError]]:
    """Rows from a task table, with the job table beside it when the reader knows where that is."""
    table = job_table_beside(lines.path)
    jobs = read_pai_jobs(table) if table is not None else None
    return _read(jobs, lines, meta)


def pai_reader(job_table: Path | None) -> LineReader:
    """A task-table reader that takes users and submit times from ``job_table`` (None: no job table)."""
    jobs = read_pai_jobs(job_table) if job_table is not None else None
    return partial(_read, jobs)


def job_table_beside(task_table: object) -> Path | None:
    """The job table in the task table's folder, or None when there is none or the folder is unknown."""
    if not isinstance(task_table, Path):
        return None
    for name in JOB_TABLES:
        candidate = task_table.with_name(name)
        if candidate.is_file():
            return candidate
    return None


def _read(
    jobs: Mapping[str, PaiJob] | None, lines: Lines, meta: dict[str, str]
) -> Iterator[tuple[int, Row | RowError]]:
    meta["origin_epoch_s"] = "0"
    meta["clock"] = "PAI's shifted clock: fake dates; time of day and weekday are real in UTC+8"
    meta["job_table"] = "yes" if jobs is not None else "no"
    header: Header | None = None
    for cells in csv.reader(lines):
        if not any(cell.strip() for cell in cells):
            continue
        if header is None:
            header = Header(TASK_FIELDS, {name: at for at, name in enumerate(TASK_FIELDS)})
            if cells[0].strip() == TASK_FIELDS[0]:
                header = Header.parse(cells, TASK_FIELDS, lines.source, lines.line)
                continue
        yield lines.line, guard(partial(_task, header, jobs), cells)


def _task(header: Header, jobs: Mapping[str, PaiJob] | None, cells: list[str]) -> Row:
    f = header.fields(cells)
    job = jobs.get(f["job_name"]) if jobs is not None else None
    start = _number(f, "start_time")
    end = _number(f, "end_time")
    if start is not None and end is not None and end < start:
        raise bad("end_time", f"is before start_time ({end:g} < {start:g})")
    submit = job.submit_s if job is not None and job.submit_s is not None else start
    if submit is None:
        raise bad("start_time", "is empty, and no pai_job_table.csv was read to give the submission time")
    cpu, memory = _number(f, "plan_cpu"), _number(f, "plan_mem")
    return {
        "job_id": f"{f['job_name']}/{f['task_name']}",
        "user": job.user if job is not None else "",
        "group": "",
        "submit_s": submit,
        "start_s": start,
        "end_s": end,
        "duration_s": end - start if start is not None and end is not None else None,
        "tasks": whole(f["inst_num"], "inst_num", minimum=1),
        "gpu_milli_per_task": pai_gpu_milli(f["plan_gpu"]),
        "cpu_milli_per_task": _milli(cpu, 10, "plan_cpu"),
        "memory_mib_per_task": _milli(memory, 1024, "plan_mem"),
        "gpu_model": f["gpu_type"] or None,
        "status": _STATUS.get(f["status"], "unknown"),
    }


def _number(f: dict[str, str], name: str) -> float | None:
    text = f[name]
    return number(text, name) if text else None


def _milli(value: float | None, scale: int, name: str) -> int | None:
    """``value`` x ``scale`` as a whole number (percent of a core to milli-cores, GB to MiB)."""
    if value is None:
        return None
    if not 0 <= value <= COUNT_MAX * 100:
        raise bad(name, f"must be 0-{COUNT_MAX * 100:,}, got {value:g}")
    return round(value * scale)


def pai_gpu_milli(text: str) -> int:
    """Milli-GPU per instance from ``plan_gpu`` (percent of one GPU); a share above one GPU rounds up."""
    if not text:
        return 0
    percent = number(text, "plan_gpu")
    if percent is None or not 0 <= percent <= COUNT_MAX * 100:
        raise bad("plan_gpu", f"must be a percentage of one GPU, 0-{COUNT_MAX * 100:,}, got {text!r}")
    milli = round(percent * 10)
    return milli if milli <= 1000 else math.ceil(milli / 1000) * 1000


def read_pai_jobs(path: Path) -> dict[str, PaiJob]:
    """The job table at ``path`` by ``job_name``; a bad line raises TraceError naming file, line and field."""
    if not path.is_file():
        raise TraceError(str(path), None, "", "no such file (the PAI job table)")
    jobs: dict[str, PaiJob] = {}
    with open_text(path) as handle:
        lines = Lines(handle)
        for cells in csv.reader(lines):
            if not any(cell.strip() for cell in cells) or cells[0].strip() == JOB_FIELDS[0]:
                continue
            if len(cells) != len(JOB_FIELDS):
                raise TraceError(
                    str(path),
                    lines.line,
                    "fields",
                    f"a job-table line has {len(JOB_FIELDS)} fields, got {len(cells)}",
                )
            jobs[cells[0].strip()] = PaiJob(
                cells[2].strip(), _job_submit(cells[4].strip(), str(path), lines.line)
            )
    return jobs


def _job_submit(text: str, source: str, line: int) -> float | None:
    if not text:
        return None
    try:
        value = float(text)
    except ValueError:
        value = math.nan
    if not math.isfinite(value):
        raise TraceError(source, line, "start_time", f"must be seconds (the submission time), got {text!r}")
    return value
