"""A generic CSV trace: a header of canonical column names, then one job per row.

The way in for a trace loadmaster has no reader for: export it with the
canonical columns (docs/traces.md) and read it as ``--format csv``. The header
must name ``job_id``, ``submit_s``, ``tasks`` and ``gpu_milli_per_task``; any
other canonical column is optional, in any order, and a name that is not a
canonical column is an error. An empty cell is null; where the schema allows
no null, ``user`` and ``group`` default to '' and ``status`` to ``unknown``,
both when the column is absent and when the cell is empty. Whole-number
columns accept ``4`` and ``4.0`` (what a float column written by pandas
looks like), nothing fractional.
"""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator
from functools import partial

import pyarrow as pa

from loadmaster.traces.rows import Row, RowError, TraceError, bad, guard, number
from loadmaster.traces.schema import COLUMN_NAMES, COLUMNS, Column
from loadmaster.traces.source import Lines

REQUIRED = ("job_id", "submit_s", "tasks", "gpu_milli_per_task")
"""Columns the header must name."""

DEFAULTS: dict[str, object] = {"user": "", "group": "", "status": "unknown"}
"""Values of non-null columns that may be left out or empty; every other absent column is null."""

Convert = Callable[[str], object]


def read_csv(lines: Lines, meta: dict[str, str]) -> Iterator[tuple[int, Row | RowError]]:
    """Rows of the canonical table from a CSV whose header names canonical columns."""
    cells_of = csv.reader(lines)
    header = next(cells_of, None)
    if header is None:
        return
    # Spreadsheets often start a CSV with a byte-order mark, which is no part of the first name.
    converters = _header([name.strip().lstrip("\ufeff") for name in header], lines.source, lines.line)
    meta["columns"] = ",".join(name for name, _ in converters)
    for cells in cells_of:
        if not any(cells):
            continue
        yield lines.line, guard(partial(_row, converters), cells)


def _header(names: list[str], source: str, line: int) -> list[tuple[str, Convert]]:
    """Each column's name and converter, or a TraceError naming the unknown, repeated or missing one."""
    allowed = f"allowed: {', '.join(COLUMN_NAMES)}"
    for name in names:
        if name not in COLUMN_NAMES:
            raise TraceError(source, line, name, f"is not a canonical column ({allowed})")
        if names.count(name) > 1:
            raise TraceError(source, line, name, "is named twice in the header")
    for name in REQUIRED:
        if name not in names:
            raise TraceError(source, line, name, f"required column missing (required: {', '.join(REQUIRED)})")
    by_name = {c.name: c for c in COLUMNS}
    return [(name, converter(by_name[name])) for name in names]


def _row(converters: list[tuple[str, Convert]], cells: list[str]) -> Row:
    if len(cells) != len(converters):
        raise bad("fields", f"the header names {len(converters)} columns, this row has {len(cells)}")
    row = dict(DEFAULTS)
    for (name, convert), text in zip(converters, cells, strict=True):
        value = convert(text.strip())
        if value is not None:
            row[name] = value
    return row


def converter(column: Column) -> Convert:
    """How a cell of ``column`` becomes a value: empty is None (DEFAULTS apply), else a number or text."""
    name = column.name
    if pa.types.is_floating(column.type):
        return lambda text: number(text, name) if text else None
    if pa.types.is_integer(column.type):
        return lambda text: whole(text, name) if text else None
    return lambda text: text or None


def whole(text: str, name: str) -> int:
    """``text`` as a whole number; ``4.0`` is 4, ``4.5`` is an error."""
    value = number(text, name)
    if value is None or not value.is_integer():
        raise bad(name, f"must be a whole number, got {text!r}")
    return int(value)
