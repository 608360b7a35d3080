"""Helios (SenseTime; Hu et al., SC'21) ``cluster_log.csv``: one Slurm job per line.

The header names the columns: ``job_id``, ``user``, ``vc``, ``jobname``,
``gpu_num``, ``cpu_num``, ``node_num``, ``state``, ``submit_time``,
``start_time``, ``end_time``, ``duration`` and ``queue`` (the public Venus file
has no ``jobname``). ``job_id``, ``gpu_num`` and ``submit_time`` are required.

The virtual cluster is the ``group``. Helios's ``queue`` column is the time the
job waited (``start - submit``, in s), not a partition, so it is dropped, as
is ``jobname``. A job's GPUs become tasks by :func:`loadmaster.traces.sacct.gang`
(one task per node when ``gpu_num`` splits evenly over ``node_num``). The
states are Slurm's (``COMPLETED``, ``CANCELLED``, ``FAILED``, ``TIMEOUT``,
``NODE_FAIL``). Times are wall-clock (see :mod:`loadmaster.traces.wallclock`):
seconds from the first job's submission.
"""

from __future__ import annotations

from collections.abc import Iterator

from loadmaster.traces.header import header_rows, whole
from loadmaster.traces.rows import Row, RowError, bad, number
from loadmaster.traces.sacct import gang, state
from loadmaster.traces.source import Lines
from loadmaster.traces.wallclock import Origin, clock_s

REQUIRED = ("job_id", "gpu_num", "submit_time")
"""Columns a Helios file must have; the others fill more of the table when present."""


def read_helios(lines: Lines, meta: dict[str, str]) -> Iterator[tuple[int, Row | RowError]]:
    """Rows of the canonical table from a Helios ``cluster_log.csv``; the origin goes into ``meta``."""
    parser = _Parser(Origin(meta))
    return header_rows(
        lines, meta, REQUIRED, parser.row, hint="a Helios cluster_log.csv starts with its header"
    )


class _Parser:
    """One file's row parser: it holds the origin the first job sets."""

    def __init__(self, origin: Origin) -> None:
        self.origin = origin

    def row(self, f: dict[str, str]) -> Row:
        """The canonical row of one job line."""
        submit = clock_s(f["submit_time"], "submit_time")
        if submit is None:
            raise bad("submit_time", f"is required, got {f['submit_time']!r}")
        submit_s = self.origin.submit(submit, f["submit_time"])
        start = self.origin.shift(clock_s(f.get("start_time"), "start_time"))
        end = self.origin.shift(clock_s(f.get("end_time"), "end_time"))
        if start is not None and end is not None and end < start:
            raise bad("end_time", f"is before start_time ({f['end_time']} < {f['start_time']})")
        tasks, gpu_milli = gang(whole(f["gpu_num"], "gpu_num"), _optional(f, "node_num") or None)
        cpus = _optional(f, "cpu_num")
        return {
            "job_id": f["job_id"],
            "user": f.get("user", ""),
            "group": f.get("vc", ""),
            "queue": None,
            "submit_s": submit_s,
            "start_s": start,
            "end_s": end,
            "duration_s": _duration(f, start, end),
            "tasks": tasks,
            "gpu_milli_per_task": gpu_milli,
            "cpu_milli_per_task": cpus * 1000 // tasks if cpus is not None else None,
            "status": state(f.get("state", "")),
        }


def _optional(f: dict[str, str], name: str) -> int | None:
    text = f.get(name, "")
    return whole(text, name) if text else None


def _duration(f: dict[str, str], start: float | None, end: float | None) -> float | None:
    """The file's ``duration`` (end - start, s); computed from the times when the column is absent."""
    text = f.get("duration", "")
    if text:
        return number(text, "duration")
    return end - start if start is not None and end is not None else None
