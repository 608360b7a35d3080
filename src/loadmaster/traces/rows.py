"""From a reader's rows to the canonical table: checks, bad-row policy and batching.

A reader is a generator of ``(line, row)`` pairs, where ``row`` maps
canonical column names to values, or is a :class:`RowError` when the line
could not be parsed. :func:`batches` checks each row against the schema's
rules, applies the user's choice for bad rows (stop at the first, or skip
and count them) and yields Arrow record batches, so a file of any size is
read in bounded memory.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Iterator, Mapping
from dataclasses import dataclass, field
from typing import Literal, TypeVar

import pyarrow as pa

from loadmaster.errors import LoadmasterError
from loadmaster.traces.schema import COLUMN_NAMES, COLUMNS, SCHEMA, STATUSES

OnError = Literal["stop", "skip"]
"""What to do with a bad row: stop with an error naming it, or skip it and count it."""

BATCH_ROWS = 65_536
"""Rows per Arrow batch: large enough for vectorised work, small enough to bound memory."""

MAX_EXAMPLES = 20
"""Bad rows kept verbatim in a report; the rest are only counted."""

Row = Mapping[str, object]
T = TypeVar("T")


class TraceError(LoadmasterError):
    """A trace file cannot be read: the message names the file, the line and the field."""

    def __init__(self, source: str, line: int | None, field: str, message: str) -> None:
        self.source = source
        self.line = line
        self.field = field
        self.detail = message
        where = f"{source}:{line}" if line is not None else source
        super().__init__(f"{where}: {field + ': ' if field else ''}{message}")


@dataclass(frozen=True)
class RowError:
    """Why one row is bad: the field (canonical or the format's own name) and what is allowed."""

    field: str
    message: str


@dataclass(frozen=True)
class BadRow:
    """A skipped row, as the report lists it."""

    line: int
    field: str
    message: str

    def __str__(self) -> str:
        return f"line {self.line}: {self.field}: {self.message}"


@dataclass
class ReadReport:
    """What a read did: rows kept, rows skipped, and the first bad rows verbatim."""

    source: str
    format: str
    rows: int = 0
    skipped: int = 0
    examples: list[BadRow] = field(default_factory=list)

    def note(self, bad: BadRow) -> None:
        """Count a skipped row, keeping the first few for the user."""
        self.skipped += 1
        if len(self.examples) < MAX_EXAMPLES:
            self.examples.append(bad)

    def summary(self) -> str:
        """One line for the terminal: what was read and what was skipped."""
        text = f"{self.source}: {self.rows:,} jobs read as {self.format}"
        if self.skipped:
            text += f", {self.skipped:,} bad rows skipped (first: {self.examples[0]})"
        return text


_NOT_NULL = tuple(c.name for c in COLUMNS if not c.nullable)
_NAMES = frozenset(COLUMN_NAMES)


def check_row(row: Row) -> RowError | None:
    """The first way ``row`` breaks the canonical schema's rules, or None when it keeps them all."""
    for name in _NOT_NULL:
        if row.get(name) is None:
            return RowError(name, "is required and missing")
    if not _NAMES.issuperset(row):  # no set built per row in the usual case
        unknown = sorted(set(row) - _NAMES)[0]
        return RowError(unknown, f"is not a canonical column (allowed: {', '.join(COLUMN_NAMES)})")
    submit = row["submit_s"]
    if not isinstance(submit, int | float) or not math.isfinite(submit):
        return RowError("submit_s", f"must be a finite number of seconds, got {submit!r}")
    tasks = row["tasks"]
    if not isinstance(tasks, int) or tasks < 1:
        return RowError("tasks", f"must be a whole number >= 1, got {tasks!r}")
    milli = row["gpu_milli_per_task"]
    if not isinstance(milli, int) or milli < 0 or (milli > 1000 and milli % 1000):
        return RowError(
            "gpu_milli_per_task", f"must be 0-1000 or a multiple of 1000 (whole GPUs), got {milli!r}"
        )
    for name in ("duration_s", "time_limit_s"):
        value = row.get(name)
        if value is not None and (not isinstance(value, int | float) or not value >= 0):
            return RowError(name, f"must be a number of seconds >= 0, got {value!r}")
    if row["status"] not in STATUSES:
        return RowError("status", f"must be one of {', '.join(STATUSES)}, got {row['status']!r}")
    return None


def batches(
    rows: Iterable[tuple[int, Row | RowError]],
    report: ReadReport,
    on_error: OnError = "stop",
    batch_rows: int = BATCH_ROWS,
) -> Iterator[pa.RecordBatch]:
    """Check ``rows``, apply ``on_error`` to bad ones, and yield canonical record batches.

    Good rows are kept whole and turned into columns once per batch (one list comprehension per
    column), rather than appended to every column row by row.
    """
    kept: list[Row] = []
    for line, row in rows:
        problem = row if isinstance(row, RowError) else check_row(row)
        if problem is not None:
            if on_error == "stop":
                raise TraceError(
                    report.source, line, problem.field, f"{problem.message} (--on-error skip skips bad rows)"
                )
            report.note(BadRow(line, problem.field, problem.message))
            continue
        assert not isinstance(row, RowError)  # narrowed by check above; never fails
        kept.append(row)
        report.rows += 1
        if len(kept) == batch_rows:
            yield _batch(kept)
            kept = []
    if kept or report.rows == 0:
        yield _batch(kept)


def _batch(rows: list[Row]) -> pa.RecordBatch:
    arrays = [pa.array([row.get(c.name) for row in rows], type=c.type) for c in COLUMNS]
    return pa.RecordBatch.from_arrays(arrays, schema=SCHEMA)


def number(text: str, name: str, *, allow_negative_one: bool = False) -> float | None:
    """``text`` as a float; None for "-1" when the format uses -1 for "unknown"."""
    try:
        value = float(text)
    except ValueError:
        raise _BadFieldError(name, f"must be a number, got {text!r}") from None
    if allow_negative_one and value == -1:
        return None
    if not math.isfinite(value):
        raise _BadFieldError(name, f"must be finite, got {text!r}")
    return value


class _BadFieldError(Exception):
    """Raised inside a reader's row parser; :func:`guard` turns it into a :class:`RowError`."""

    def __init__(self, field: str, message: str) -> None:
        super().__init__(message)
        self.error = RowError(field, message)


def bad(field: str, message: str) -> Exception:
    """An exception a row parser raises for a bad field; :func:`guard` turns it into a RowError."""
    return _BadFieldError(field, message)


def guard(parse: Callable[[T], Row], raw: T) -> Row | RowError:
    """``parse(raw)``, turning the bad field it reports into a :class:`RowError`."""
    try:
        return parse(raw)
    except _BadFieldError as exc:
        return exc.error
