"""The header line of a CSV trace: where each named column sits, and a clear error when one is missing."""

from __future__ import annotations

import csv
from collections.abc import Callable, Iterator, Sequence
from dataclasses import dataclass
from functools import partial

from loadmaster.traces.rows import Row, RowError, TraceError, bad, guard, number
from loadmaster.traces.source import Lines

FieldParser = Callable[[dict[str, str]], Row]
"""Turns one line's fields, by column name, into a canonical row (raising ``bad`` for a bad field)."""


@dataclass(frozen=True)
class Header:
    """Column positions named by a header line; a column the file lacks is absent from :meth:`fields`."""

    names: tuple[str, ...]
    index: dict[str, int]

    @classmethod
    def parse(
        cls, cells: Sequence[str], required: Sequence[str], source: str, line: int, hint: str = ""
    ) -> Header:
        """The header in ``cells``, or a TraceError naming the first ``required`` column it lacks."""
        names = tuple(cell.strip().lstrip("\ufeff") for cell in cells)  # a byte-order mark is not a name
        missing = [name for name in required if name not in names]
        if missing:
            raise TraceError(
                source,
                line,
                missing[0],
                f"the header (first line) lacks this column; needed: {', '.join(required)}"
                f" (got: {', '.join(names) or 'an empty line'}){'; ' + hint if hint else ''}",
            )
        return cls(names, {name: at for at, name in enumerate(names)})

    def has(self, name: str) -> bool:
        """Whether the file has column ``name``."""
        return name in self.index

    def fields(self, cells: list[str]) -> dict[str, str]:
        """``cells`` by column name, stripped; a bad row when the count differs from the header's."""
        if len(cells) != len(self.names):
            raise bad("fields", f"the header names {len(self.names)} columns, this line has {len(cells)}")
        return {name: cells[at].strip() for name, at in self.index.items()}


COUNT_MAX = 1_000_000
"""Largest count (GPUs, CPUs, tasks) believed: 1000x it must still fit the table's int32 milli columns."""


def whole(text: str, name: str, minimum: int = 0) -> int:
    """``text`` as a whole count in ``minimum``..COUNT_MAX; ``8.0`` is accepted (some traces write floats)."""
    value = number(text, name)
    if value is None or value != int(value) or not minimum <= value <= COUNT_MAX:
        raise bad(name, f"must be a whole number {minimum}-{COUNT_MAX:,}, got {text!r}")
    return int(value)


def header_rows(
    lines: Lines, meta: dict[str, str], required: Sequence[str], parse: FieldParser, hint: str = ""
) -> Iterator[tuple[int, Row | RowError]]:
    """Canonical rows of a CSV file whose first non-blank line names the columns.

    A header that lacks a ``required`` column stops the read (no row could be
    read); a bad line becomes a :class:`RowError` for the bad-row policy.
    """
    parse_cells: Callable[[list[str]], Row] | None = None
    for cells in csv.reader(lines):
        if not any(cell.strip() for cell in cells):
            continue
        if parse_cells is None:
            header = Header.parse(cells, required, lines.source, lines.line, hint)
            parse_cells = partial(_parse_cells, header, parse)  # built once, not per row
            continue
        yield lines.line, guard(parse_cells, cells)


def _parse_cells(header: Header, parse: FieldParser, cells: list[str]) -> Row:
    return parse(header.fields(cells))
