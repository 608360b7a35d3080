"""Tiresias (NSDI'19) job traces: CSV files whose header names ``job_id``, ``num_gpu`` and ``submit_time``.

The testbed trace (``60_job.csv``) adds ``iterations``, ``model_name``,
``duration`` and ``interval``; ``tf_job.csv`` adds ``start_time``,
``model_size``, ``aggr_interval`` and ``model_scale``. Times are seconds from
the trace's own zero and are kept as they are. The canonical table has no
place for the DL model or the training parameters (``model_name``,
``iterations``, ``interval``, ``model_size``, ``aggr_interval``,
``model_scale``), so they are dropped; ``model_name`` is not a GPU model.

Tiresias places a job's GPUs one by one, across nodes when it must, so a job
of ``num_gpu`` GPUs is ``num_gpu`` tasks of one GPU each. The trace records
no outcome, so the status is ``unknown``, and no user. The files beside them
are not job traces: ``yarn-gput*.csv`` lists run times only, and
``cluster_spec.csv``/``n*g*.csv`` describe clusters.
"""

from __future__ import annotations

from collections.abc import Iterator

from loadmaster.traces.header import header_rows, whole
from loadmaster.traces.rows import Row, RowError, number
from loadmaster.traces.source import Lines

REQUIRED = ("job_id", "num_gpu", "submit_time")
"""Columns a Tiresias job trace must have; ``duration`` and ``start_time`` are read when present."""

_HINT = "yarn-gput*.csv (run times only) and cluster_spec.csv (a cluster) are not job traces"


def read_tiresias(lines: Lines, meta: dict[str, str]) -> Iterator[tuple[int, Row | RowError]]:
    """Rows of the canonical table from a Tiresias job trace, one task per GPU."""
    return header_rows(lines, meta, REQUIRED, _job, hint=_HINT)


def _job(f: dict[str, str]) -> Row:
    gpus = whole(f["num_gpu"], "num_gpu")
    duration = _seconds(f, "duration")
    start = _seconds(f, "start_time")
    return {
        "job_id": f["job_id"],
        "user": "",
        "group": "",
        "submit_s": number(f["submit_time"], "submit_time"),
        "start_s": start,
        "end_s": start + duration if start is not None and duration is not None else None,
        "duration_s": duration,
        "tasks": max(gpus, 1),
        "gpu_milli_per_task": 1000 if gpus else 0,
        "status": "unknown",
    }


def _seconds(f: dict[str, str], name: str) -> float | None:
    text = f.get(name, "")
    return number(text, name) if text else None
