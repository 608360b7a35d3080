"""The canonical job table: one Arrow schema that every trace reader produces.

Every reader (SWF, sacct, openb, PAI, Philly, Helios, Tiresias, generic
CSV/Parquet) turns its format into rows of this table, so inspection,
fitting, scaling and replay are written once. The table is stored as Parquet
with the schema's field docs and the trace's provenance in its metadata.

Times are seconds from the trace's origin (the first submission unless a
reader says otherwise; ``origin_epoch_s`` in the metadata keeps the wall
clock). A job is a gang of ``tasks`` identical tasks, each asking for
``gpu_milli_per_task`` (1000 = one whole GPU), as in the simulator's model.
A value a format does not record is null, never a made-up default; the
conversion to simulator jobs (:mod:`loadmaster.traces.replay`) says which
default it takes and why.
"""

from __future__ import annotations

from dataclasses import dataclass

import pyarrow as pa

STATUSES = ("completed", "failed", "cancelled", "timeout", "running", "unknown")
"""Final states a job may have in the canonical table."""


@dataclass(frozen=True)
class Column:
    """One column of the canonical table: its Arrow type, whether it may be null, its unit and meaning."""

    name: str
    type: pa.DataType
    nullable: bool
    doc: str


COLUMNS: tuple[Column, ...] = (
    Column("job_id", pa.string(), False, "the job's id in the source trace"),
    Column("user", pa.string(), False, "who submitted it ('' when the format has no user)"),
    Column("group", pa.string(), False, "account, virtual cluster or group ('' when unknown)"),
    Column("queue", pa.string(), True, "partition or queue it was submitted to"),
    Column("submit_s", pa.float64(), False, "submission time, s from the trace origin"),
    Column("start_s", pa.float64(), True, "when it started in the recorded history, s from the origin"),
    Column("end_s", pa.float64(), True, "when it ended in the recorded history, s from the origin"),
    Column("duration_s", pa.float64(), True, "actual run time in s (end - start when both are known)"),
    Column("time_limit_s", pa.float64(), True, "run time the user requested, s"),
    Column("tasks", pa.int32(), False, "number of tasks (workers, pods, processors) in the gang"),
    Column("gpu_milli_per_task", pa.int32(), False, "GPU per task in milli-GPU; 1000 = one whole GPU"),
    Column("cpu_milli_per_task", pa.int32(), True, "CPU per task in milli-cores"),
    Column("memory_mib_per_task", pa.int64(), True, "host memory per task in MiB"),
    Column("gpu_memory_mib", pa.int32(), True, "GPU memory the job used or asked for, MiB per GPU"),
    Column("gpu_model", pa.string(), True, "GPU model asked for or run on (V100, A100, ...)"),
    Column("status", pa.string(), False, f"final state, one of {', '.join(STATUSES)}"),
)
"""The canonical columns, in order."""

SCHEMA = pa.schema([pa.field(c.name, c.type, nullable=c.nullable, metadata={"doc": c.doc}) for c in COLUMNS])
"""The Arrow schema of the canonical job table."""

COLUMN_NAMES: tuple[str, ...] = tuple(c.name for c in COLUMNS)


def schema_markdown() -> str:
    """The schema as a Markdown table, for docs and ``loadmaster trace schema``."""
    lines = ["| column | type | null | meaning |", "|---|---|---|---|"]
    lines += [f"| `{c.name}` | {c.type} | {'yes' if c.nullable else 'no'} | {c.doc} |" for c in COLUMNS]
    return "\n".join(lines)
