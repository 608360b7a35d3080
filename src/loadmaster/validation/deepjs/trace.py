"""The DeepJS workload: the setup's machines and chunks, and the reader of CloudSimPy's ``jobs.csv``."""

from __future__ import annotations

import csv
import math
from collections.abc import Iterator, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TextIO

from loadmaster.errors import ModelError
from loadmaster.traces import TraceError

MACHINES = 5
"""Machines in the DeepJS setup (``machines_number`` in CloudSimPy's launch scripts)."""
MACHINE_CPU = 64.0
"""CPU of each machine (``MachineConfig(64, 1, 1)``); task CPU is in cores (0.5, 1, ...)."""
MACHINE_MEMORY = 1.0
"""Memory of each machine, normalised: task memory is a fraction of a machine."""
MACHINE_DISK = 1.0
"""Disk of each machine, normalised (every task in the trace asks for 0)."""
CHUNK_JOBS = 10
"""Jobs per chunk (``jobs_len``)."""
REFERENCE_CHUNKS = 10
"""Chunks 0..9 are the ones the reference file covers."""
_COLUMNS = ("submit_time", "duration", "cpu", "memory", "job_id", "task_id", "instances_num", "disk")
"""Columns jobs.csv must have (an unnamed index column in front is ignored)."""


@dataclass(frozen=True, slots=True)
class BatchTask:
    """One task of a :class:`BatchJob`: ``instances`` identical instances, each needing these resources
    for ``duration``."""

    task_id: int
    instances: int
    cpu: float
    memory: float
    disk: float
    duration: float


@dataclass(frozen=True, slots=True)
class BatchJob:
    """One job of the Alibaba 2017 batch trace as CloudSimPy's ``jobs.csv`` gives it: submit time (trace
    time units; rebased to 0 in a chunk) and its tasks in file order. Not a submitted job file
    (:class:`loadmaster.config.jobspec.JobSpec`) nor a scheduler job (:class:`loadmaster.model.Job`)."""

    job_id: int
    submit: int
    tasks: tuple[BatchTask, ...]


def read_jobs(path: Path) -> tuple[BatchJob, ...]:
    """Every job of a CloudSimPy ``jobs.csv``, grouped and ordered as CloudSimPy's ``CSVReader`` does.

    Rows are grouped by ``job_id`` in order of first appearance; a job takes
    the submit time of its last row (the reference overwrites it row by row)
    and the jobs are sorted stably by submit time. Raises :class:`TraceError`
    naming the file, line and field for a missing column, an unparsable or
    out-of-range value, a task listed twice in a job, or a task that could not
    fit on an empty machine (the reference would loop forever on it).
    """
    source = str(path)
    try:
        with path.open(newline="") as handle:
            jobs = _group(source, _rows(source, handle))
    except OSError as error:
        raise TraceError(source, None, "", f"cannot read: {error.strerror or error}") from error
    if not jobs:
        raise TraceError(source, None, "", "no jobs in the file")
    return tuple(sorted(jobs, key=lambda job: job.submit))


def chunk(jobs: Sequence[BatchJob], index: int, size: int = CHUNK_JOBS) -> tuple[BatchJob, ...]:
    """Chunk ``index``: jobs ``index*size`` up to ``size`` of them, submit times rebased to the first.

    Like ``CSVReader.generate(index*size, size)``; the last chunk may be short.
    """
    offset = index * size
    if index < 0 or size < 1 or offset >= len(jobs):
        raise ModelError(f"chunk {index} of {size} jobs: the trace has {len(jobs)} jobs")
    part = jobs[offset : offset + size]
    base = part[0].submit
    return tuple(BatchJob(job.job_id, job.submit - base, job.tasks) for job in part)


def chunks(
    jobs: Sequence[BatchJob], indices: Sequence[int] = range(REFERENCE_CHUNKS)
) -> list[tuple[int, tuple[BatchJob, ...]]]:
    """``(index, chunk)`` for each index (default: the 10 the reference covers), as :func:`evaluate` takes."""
    return [(i, chunk(jobs, i)) for i in indices]


@dataclass(frozen=True, slots=True)
class _Row:
    line: int
    job_id: int
    submit: int
    task: BatchTask


def _rows(source: str, handle: TextIO) -> Iterator[_Row]:
    """Parse and check each data row; the header decides the column positions."""
    reader = csv.reader(handle)
    header = next(reader, None)
    if header is None:
        raise TraceError(source, 1, "header", "empty file; expected a header with " + ", ".join(_COLUMNS))
    missing = [name for name in _COLUMNS if name not in header]
    if missing:
        raise TraceError(source, 1, "header", f"missing column(s) {', '.join(missing)}")
    at = {name: header.index(name) for name in _COLUMNS}
    for values in reader:
        line = reader.line_num
        if not values:
            continue
        if len(values) != len(header):
            raise TraceError(source, line, "", f"{len(values)} fields, the header has {len(header)}")
        yield _parse(source, line, {name: values[i] for name, i in at.items()})


def _parse(source: str, line: int, raw: Mapping[str, str]) -> _Row:
    """One row into typed values, with the reason when a value is not allowed."""

    def integer(name: str, low: int) -> int:
        try:
            value = int(raw[name])
        except ValueError:
            raise TraceError(source, line, name, f"{raw[name]!r} is not an integer") from None
        if value < low:
            raise TraceError(source, line, name, f"{value} is below the minimum {low}")
        return value

    def number(name: str, low: float, high: float, strict_low: bool = False) -> float:
        try:
            value = float(raw[name])
        except ValueError:
            raise TraceError(source, line, name, f"{raw[name]!r} is not a number") from None
        too_low = value <= low if strict_low else value < low
        if not math.isfinite(value) or too_low or value > high:
            allowed = f"{'>' if strict_low else '>='} {low:g} and <= {high:g}"
            raise TraceError(source, line, name, f"{raw[name]!r} is not allowed; must be {allowed}")
        return value

    task = BatchTask(
        task_id=integer("task_id", 0),
        instances=integer("instances_num", 1),
        cpu=number("cpu", 0.0, MACHINE_CPU),
        memory=number("memory", 0.0, MACHINE_MEMORY),
        disk=number("disk", 0.0, MACHINE_DISK),
        duration=number("duration", 0.0, math.inf, strict_low=True),
    )
    return _Row(line, integer("job_id", 0), integer("submit_time", 0), task)


def _group(source: str, rows: Iterator[_Row]) -> list[BatchJob]:
    """Rows into jobs, in order of each job's first row; the last row's submit time wins."""
    tasks: dict[int, list[BatchTask]] = {}
    submit: dict[int, int] = {}
    for row in rows:
        listed = tasks.setdefault(row.job_id, [])
        if any(task.task_id == row.task.task_id for task in listed):
            message = f"task {row.task.task_id} of job {row.job_id} is listed twice"
            raise TraceError(source, row.line, "task_id", message)
        listed.append(row.task)
        submit[row.job_id] = row.submit
    return [BatchJob(job_id, submit[job_id], tuple(listed)) for job_id, listed in tasks.items()]
