"""Slurm accounting records: the output of ``sacct --parsable2`` (one record per line, ``|``-separated).

The first line names the columns, in any order; columns the reader does not
use are ignored. It needs ``JobID``, ``Submit`` and ``AllocTRES`` or
``ReqTRES``; ``User``, ``Account``, ``Partition``, ``Start``, ``End``,
``Timelimit``, ``State`` and ``NNodes``/``AllocNodes`` fill more columns when
present. Job steps (``123.batch``, ``123.extern``, ``123.0``) are not jobs
and are skipped; array elements (``123_4``) and heterogeneous components
(``123+0``) are jobs.

Times are seconds from the first job's submission (a streaming reader cannot
know the earliest one up front, so earlier jobs get a negative ``submit_s``);
``origin_epoch_s`` in the metadata keeps that instant. sacct prints local
time without a zone, so the wall clock is read as if it were UTC: durations
are exact except across a daylight-saving change. How GPUs become ``tasks``
x ``gpu_milli_per_task`` is :func:`gang`'s rule (see docs/traces.md).
"""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from datetime import UTC, datetime
from functools import lru_cache

from loadmaster.traces.rows import Row, RowError, TraceError, bad, guard
from loadmaster.traces.source import Lines

SEPARATOR = "|"

REQUIRED = ("JobID", "Submit")
"""Columns every sacct file must have (plus AllocTRES or ReqTRES)."""

OPTIONAL = ("User", "Account", "Partition", "Start", "End", "Timelimit", "State", "NNodes", "AllocNodes")
"""Columns that fill more of the table when present."""

USED: tuple[str, ...] = (*REQUIRED, "AllocTRES", "ReqTRES", *OPTIONAL)
"""Every column the reader reads; any other column is ignored."""

GPUS_ONE_TASK_MAX = 8
"""Without a usable node count, up to this many GPUs (one common 8-GPU server) are one task."""

COUNT_MAX = 1_000_000
"""Largest GPU, CPU or node count believed: 1000x larger must still fit the table's int32 milli columns."""

_NO_TIME = frozenset(("", "Unknown", "None"))
_NO_LIMIT = frozenset(("", "UNLIMITED", "Partition_Limit", "INVALID"))
_EPOCH = datetime(1970, 1, 1)
_EPOCH_UTC = datetime(1970, 1, 1, tzinfo=UTC)
_MEMORY_MIB = {"K": 1 / 1024, "M": 1.0, "G": 1024.0, "T": 1024.0**2, "P": 1024.0**3}

_STATES = {
    "COMPLETED": "completed",
    "CANCELLED": "cancelled",
    "PREEMPTED": "cancelled",
    "TIMEOUT": "timeout",
    "DEADLINE": "timeout",
} | dict.fromkeys(("FAILED", "OUT_OF_MEMORY", "NODE_FAIL", "BOOT_FAIL", "SPECIAL_EXIT"), "failed")
_STATES |= dict.fromkeys(
    ("RUNNING", "SUSPENDED", "COMPLETING", "CONFIGURING", "RESIZING", "REQUEUED", "SIGNALING", "STAGE_OUT"),
    "running",
)
"""Slurm job states by their first word; any other (PENDING, REVOKED, new states) is ``unknown``."""


@dataclass(frozen=True)
class Resources:
    """What one TRES string (``cpu=8,mem=64G,node=1,gres/gpu=2``) records; None where it is silent."""

    gpus: int
    gpu_model: str | None
    cpus: int | None
    memory_mib: float | None
    nodes: int | None


def read_sacct(lines: Lines, meta: dict[str, str]) -> Iterator[tuple[int, Row | RowError]]:
    """Rows of the canonical table from ``sacct --parsable2`` lines; the origin goes into ``meta``."""
    parser: _Parser | None = None
    for raw in lines:
        text = raw.rstrip("\r\n")
        if not text.strip():
            continue
        if parser is None:
            parser = _Parser(_header(text, lines.source, lines.line), meta)
            continue
        fields = text.split(SEPARATOR)
        if parser.is_step(fields):
            continue
        yield lines.line, guard(parser.row, fields)


@dataclass(frozen=True)
class _Columns:
    """Where each used column sits in a line; -1 for a column the file lacks (see ``_Parser.row``)."""

    count: int
    index: dict[str, int]
    trailing: bool


def _header(text: str, source: str, line: int) -> _Columns:
    """The column positions named by the header line, or a TraceError saying what is missing."""
    trailing = text.endswith(SEPARATOR)  # plain --parsable ends every line with the separator
    names = [name.strip() for name in (text[:-1] if trailing else text).split(SEPARATOR)]
    need = [name for name in REQUIRED if name not in names]
    if not {"AllocTRES", "ReqTRES"} & set(names):
        need.append("AllocTRES")
    if need:
        raise TraceError(
            source,
            line,
            need[0],
            f"the header (first line) lacks this column; sacct needs --parsable2 with a header and "
            f"{', '.join(REQUIRED)}, AllocTRES or ReqTRES (optional: {', '.join(OPTIONAL)})",
        )
    index = {name: names.index(name) if name in names else -1 for name in USED}
    return _Columns(len(names), index, trailing)


class _Parser:
    """One sacct file's row parser: column positions, and the origin once the first job sets it."""

    def __init__(self, columns: _Columns, meta: dict[str, str]) -> None:
        self.columns = columns
        self.meta = meta
        self.origin: float | None = None

    def is_step(self, fields: list[str]) -> bool:
        """Whether the record is a job step (``123.batch``, ``123.extern``, ``123_4.0``): not a job."""
        at = self.columns.index["JobID"]
        return at < len(fields) and bool(fields[at].partition(".")[2])

    def row(self, fields: list[str]) -> Row:
        """The canonical row of one job record."""
        columns = self.columns
        if columns.trailing and fields[-1] == "":
            fields.pop()
        if len(fields) != columns.count:
            raise bad("fields", f"the header names {columns.count} columns, this line has {len(fields)}")
        c = columns.index
        fields.append("")  # a column the file lacks has index -1, so it reads as this empty field
        submit, start, end = self.times(fields)
        resources = _resources(fields[c["AllocTRES"]], fields[c["ReqTRES"]])
        nodes = _count(fields[c["NNodes"]], "NNodes") or _count(fields[c["AllocNodes"]], "AllocNodes")
        tasks, gpu_milli = gang(resources.gpus, nodes or resources.nodes)
        return {
            "job_id": fields[c["JobID"]],
            "user": fields[c["User"]],
            "group": fields[c["Account"]],
            "queue": fields[c["Partition"]] or None,
            "submit_s": submit,
            "start_s": start,
            "end_s": end,
            "duration_s": end - start if start is not None and end is not None else None,
            "time_limit_s": time_limit_s(fields[c["Timelimit"]]),
            "tasks": tasks,
            "gpu_milli_per_task": gpu_milli,
            "cpu_milli_per_task": resources.cpus * 1000 // tasks if resources.cpus is not None else None,
            "memory_mib_per_task": _per_task(resources.memory_mib, tasks),
            "gpu_model": resources.gpu_model,
            "status": state(fields[c["State"]]),
        }

    def times(self, fields: list[str]) -> tuple[float, float | None, float | None]:
        """Submit, Start and End as seconds from the origin; the first job's Submit sets the origin."""
        c = self.columns.index
        submit = epoch_s(fields[c["Submit"]], "Submit")
        if submit is None:
            raise bad("Submit", f"is required, got {fields[c['Submit']]!r}")
        if self.origin is None:
            self.origin = submit
            self.meta["origin_epoch_s"] = f"{submit:.0f}"
            self.meta["origin"] = fields[c["Submit"]]
        start = epoch_s(fields[c["Start"]], "Start")
        end = epoch_s(fields[c["End"]], "End")
        if start is not None and end is not None and end < start:
            raise bad("End", f"is before Start ({fields[c['End']]} < {fields[c['Start']]})")
        origin = self.origin
        return (
            submit - origin,
            start - origin if start is not None else None,
            end - origin if end is not None else None,
        )


def epoch_s(text: str, field: str) -> float | None:
    """A Slurm time (``2024-03-01T12:00:00``) in seconds since 1970, read as UTC; None for Unknown/None."""
    if text in _NO_TIME:
        return None
    try:
        moment = datetime.fromisoformat(text)
    except ValueError:
        raise bad(field, f"must be a time like 2024-03-01T12:00:00, Unknown or None, got {text!r}") from None
    if moment.tzinfo is None:
        return (moment - _EPOCH).total_seconds()
    return (moment - _EPOCH_UTC).total_seconds()


@lru_cache(maxsize=4096)
def time_limit_s(text: str) -> float | None:
    """A Slurm time limit in seconds: ``MM``, ``MM:SS``, ``HH:MM:SS``, ``D-HH``, ``D-HH:MM``, ``D-HH:MM:SS``.

    None for UNLIMITED, Partition_Limit or an empty field.
    """
    if text in _NO_LIMIT:
        return None
    days, dash, clock = text.rpartition("-")
    parts = clock.split(":")
    if dash:  # after a day count the first part is hours: D-HH, D-HH:MM, D-HH:MM:SS
        parts += ["0"] * (3 - len(parts))
    else:  # minutes come first: MM, MM:SS (HH:MM:SS stays as it is)
        parts = ["0", *parts, "0"][:3] if len(parts) < 3 else parts
    if len(parts) != 3 or not all(part.isdigit() for part in (*parts, days if dash else "0")):
        raise bad(
            "Timelimit", f"must be MM, MM:SS, HH:MM:SS, D-HH, D-HH:MM, D-HH:MM:SS or UNLIMITED, got {text!r}"
        )
    hours, minutes, seconds = (int(part) for part in parts)
    whole_days = int(days) if dash else 0
    return float(((whole_days * 24 + hours) * 60 + minutes) * 60 + seconds)


def _resources(alloc: str, req: str) -> Resources:
    """What the job held (AllocTRES), or asked for (ReqTRES) when it never ran."""
    if alloc:
        return tres(alloc, "AllocTRES")
    if req:
        return tres(req, "ReqTRES")
    raise bad("AllocTRES", "is empty (the job never ran) and there is no ReqTRES to say what it asked for")


@lru_cache(maxsize=65_536)
def tres(text: str, field: str) -> Resources:
    """Parse a TRES list; GPUs are ``gres/gpu=N``, the model from a typed ``gres/gpu:a100=N``."""
    values: dict[str, str] = {}
    for item in filter(None, text.split(",")):
        key, sep, value = item.partition("=")
        if not sep:
            raise bad(field, f"must be a list of name=value (cpu=8,mem=64G,gres/gpu=2), got {item!r}")
        values[key] = value
    models = [key[len("gres/gpu:") :] for key in values if key.startswith("gres/gpu:")]
    gpus = _count(values.get("gres/gpu", ""), field)
    if gpus is None and len(models) == 1:  # some sites record only the typed count
        gpus = _count(values[f"gres/gpu:{models[0]}"], field)
    return Resources(
        gpus=gpus or 0,
        gpu_model=models[0] if len(models) == 1 else None,
        cpus=_count(values.get("cpu", ""), field),
        memory_mib=_memory_mib(values.get("mem", ""), field),
        nodes=_count(values.get("node", ""), field),
    )


def _count(text: str, field: str) -> int | None:
    """A whole count (GPUs, CPUs, nodes); None when absent or 0 nodes (a job that never got any)."""
    if not text:
        return None
    if not text.isdigit() or int(text) > COUNT_MAX:
        raise bad(field, f"counts must be whole numbers 0-{COUNT_MAX:,}, got {text!r}")
    return int(text)


def _memory_mib(text: str, field: str) -> float | None:
    """Slurm memory (``64G``, ``512M``, ``187.50G``; no unit means MiB) in MiB."""
    if not text:
        return None
    unit = text[-1].upper()
    scale = _MEMORY_MIB.get(unit)
    try:
        value = float(text[:-1] if scale is not None else text)
    except ValueError:
        value = -1.0
    if not value >= 0:
        raise bad(field, f"mem must be a size like 512M, 64G or 1.5T (units K, M, G, T), got {text!r}")
    return value * (scale or 1.0)


def _per_task(memory_mib: float | None, tasks: int) -> int | None:
    return int(memory_mib // tasks) if memory_mib is not None else None


def gang(gpus: int, nodes: int | None) -> tuple[int, int]:
    """``(tasks, gpu_milli_per_task)`` for a job of ``gpus`` GPUs on ``nodes`` nodes (None: unknown).

    One task per node when the GPUs split evenly across a known node count;
    otherwise, when the node count is unknown and the GPUs fit one server
    (``GPUS_ONE_TASK_MAX``), one task holding them all; otherwise one task per
    GPU, which the scheduler may place anywhere. A job without GPUs is one
    task of 0 GPUs per node.
    """
    if gpus == 0:
        return (nodes or 1), 0
    if nodes and gpus % nodes == 0:
        return nodes, gpus // nodes * 1000
    if not nodes and gpus <= GPUS_ONE_TASK_MAX:
        return 1, gpus * 1000
    return gpus, 1000


def state(text: str) -> str:
    """The canonical status of a Slurm state (``COMPLETED``, ``CANCELLED by 1000``, ``FAILED``...)."""
    return _STATES.get(text.split(" ", 1)[0].rstrip("+"), "unknown")
