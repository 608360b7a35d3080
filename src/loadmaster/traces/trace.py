"""A trace: the canonical job table plus where it came from; reading any format, writing Parquet."""

from __future__ import annotations

import json
from collections.abc import Callable, Iterator
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa

from loadmaster.traces.rows import OnError, ReadReport, Row, RowError, TraceError, batches
from loadmaster.traces.schema import SCHEMA
from loadmaster.traces.source import Lines, Progress, open_text

LineReader = Callable[[Lines, dict[str, str]], Iterator[tuple[int, Row | RowError]]]
"""A line-based format: canonical rows from numbered lines, filling the trace metadata as it goes."""


@dataclass(frozen=True)
class Format:
    """A trace format loadmaster reads: its name, what it is, and how to tell it from a file name."""

    name: str
    description: str
    suffixes: tuple[str, ...]
    read: LineReader


@dataclass(frozen=True)
class Trace:
    """The canonical job table of one trace, with its provenance and what reading it skipped."""

    table: pa.Table
    meta: dict[str, str]
    report: ReadReport

    def __len__(self) -> int:
        return int(self.table.num_rows)

    def column(self, name: str) -> np.ndarray:
        """Column ``name`` as a numpy array (nulls as NaN for numbers, None for strings)."""
        col = self.table.column(name)
        if pa.types.is_floating(col.type) or pa.types.is_integer(col.type):
            return np.asarray(col.to_numpy(zero_copy_only=False), dtype=float)
        return np.asarray(col.to_pylist(), dtype=object)

    def gpus_per_job(self) -> np.ndarray:
        """Total GPUs of each job: tasks x GPU per task."""
        gpus: np.ndarray = self.column("tasks") * self.column("gpu_milli_per_task") / 1000.0
        return gpus


def read_lines(
    path: Path,
    fmt: Format,
    on_error: OnError = "stop",
    progress: Progress | None = None,
) -> Trace:
    """Read ``path`` in format ``fmt`` into a :class:`Trace`, in bounded batches."""
    if not path.is_file():
        raise TraceError(str(path), None, "", "no such file")
    report = ReadReport(str(path), fmt.name)
    meta: dict[str, str] = {"format": fmt.name, "source": path.name}
    try:
        with open_text(path) as handle:
            lines = Lines(handle, progress, path)
            table = pa.Table.from_batches(list(batches(fmt.read(lines, meta), report, on_error)), SCHEMA)
    except UnicodeDecodeError as exc:
        raise TraceError(str(path), None, "", f"is not UTF-8 text ({exc.reason})") from None
    return Trace(table, meta, report)


def write_parquet(trace: Trace, path: Path) -> None:
    """Store ``trace`` as Parquet, its metadata (format, source, header fields) in the file's metadata."""
    import pyarrow.parquet as pq  # noqa: PLC0415 - see read_parquet

    path.parent.mkdir(parents=True, exist_ok=True)
    table = trace.table.replace_schema_metadata({"loadmaster": json.dumps(trace.meta, sort_keys=True)})
    pq.write_table(table, path)


def read_parquet(path: Path) -> Trace:
    """A canonical trace written by :func:`write_parquet` (or any Parquet file with the canonical schema)."""
    # Imported here: Parquet costs a few hundredths of a second to import, and a simulation that
    # replays a text trace (every format but ``canonical``) never touches it.
    import pyarrow.parquet as pq  # noqa: PLC0415

    try:
        table = pq.read_table(path)
    except (OSError, pa.ArrowInvalid) as exc:
        raise TraceError(str(path), None, "", f"is not a readable Parquet file ({exc})") from None
    missing = [f.name for f in SCHEMA if f.name not in table.column_names]
    if missing:
        raise TraceError(str(path), None, missing[0], "canonical column missing (see docs/traces.md)")
    raw = (table.schema.metadata or {}).get(b"loadmaster", b"{}")
    meta = {str(k): str(v) for k, v in json.loads(raw).items()}
    table = table.select([f.name for f in SCHEMA]).cast(SCHEMA)
    report = ReadReport(str(path), "canonical", rows=table.num_rows)
    return Trace(table, meta, report)
