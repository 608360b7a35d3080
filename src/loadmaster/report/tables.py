"""Job tables and timelines written as Parquet (for analysis) and CSV (for eyes and spreadsheets)."""

from __future__ import annotations

from dataclasses import fields
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq

from loadmaster.errors import ModelError
from loadmaster.metrics import job_bounded_slowdown
from loadmaster.model.outcome import JobTable, Timeline

_TIMELINE_COLUMNS = ("allocated_gpus", "queue_length", "fragmented_gpus", "free_gpus")


def _write_both(table: pa.Table, path_stem: Path) -> list[Path]:
    """Write ``<stem>.parquet`` and ``<stem>.csv``, creating the folder; return both paths.

    The suffixes are appended rather than substituted, so a stem such as
    ``run.v2`` keeps its dot.
    """
    path_stem.parent.mkdir(parents=True, exist_ok=True)
    parquet_path = path_stem.with_name(path_stem.name + ".parquet")
    csv_path = path_stem.with_name(path_stem.name + ".csv")
    pq.write_table(table, parquet_path)
    pa_csv.write_csv(table, csv_path)
    return [parquet_path, csv_path]


def job_arrow_table(table: JobTable, bound_s: float = 10.0) -> pa.Table:
    """One row per job: every JobTable field, then ``wait_s``, ``jct_s``, ``bounded_slowdown``.

    Derived columns are NaN where undefined (see :mod:`loadmaster.metrics`).
    """
    columns = {f.name: np.asarray(getattr(table, f.name)) for f in fields(table)}
    columns["wait_s"] = np.asarray(table.wait_s, dtype=np.float64)
    columns["jct_s"] = np.asarray(table.jct_s, dtype=np.float64)
    columns["bounded_slowdown"] = job_bounded_slowdown(table, bound_s)
    return pa.table(columns)


def write_job_table(table: JobTable, path_stem: Path) -> list[Path]:
    """Write the job table to ``<stem>.parquet`` and ``<stem>.csv``; return the two paths."""
    return _write_both(job_arrow_table(table), path_stem)


def _per_pool_columns(name: str, values: np.ndarray, timeline: Timeline) -> dict[str, np.ndarray]:
    """Split a (samples, pools) column into ``<name>.<pool>`` columns.

    A column with one value per sample (a cluster total) stays one column,
    ``<name>``. Any other shape is an inconsistent timeline.
    """
    samples = len(timeline.time_s)
    if values.ndim == 1 and values.shape[0] == samples:
        return {name: values}
    if values.shape != (samples, len(timeline.pools)):
        raise ModelError(
            f"timeline {name}: expected shape ({samples}, {len(timeline.pools)}) "
            f"(samples, pools), got {values.shape}"
        )
    return {f"{name}.{pool}": values[:, i] for i, pool in enumerate(timeline.pools)}


def timeline_arrow_table(timeline: Timeline) -> pa.Table:
    """One row per sample: ``time_s``, then ``<column>.<pool>`` for each per-pool column."""
    columns: dict[str, np.ndarray] = {"time_s": np.asarray(timeline.time_s, dtype=np.float64)}
    for name in _TIMELINE_COLUMNS:
        columns.update(_per_pool_columns(name, np.asarray(getattr(timeline, name)), timeline))
    return pa.table(columns)


def write_timeline(timeline: Timeline, path_stem: Path) -> list[Path]:
    """Write the timeline to ``<stem>.parquet`` and ``<stem>.csv``; return the two paths.

    Raises :class:`ModelError` if a column's shape does not match the samples and pools.
    """
    return _write_both(timeline_arrow_table(timeline), path_stem)
