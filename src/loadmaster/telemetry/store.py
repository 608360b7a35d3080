"""The one interface every telemetry store implements (embedded DuckDB by default, Prometheus in production).

Series are registered once with their labels; samples are appended in
batches (Arrow, :data:`~loadmaster.telemetry.schema.SAMPLE_SCHEMA`). Readers
ask for one field over a set of series and a time range, at a step: the
store returns a dense (series x time) array, downsampled by the store's
rule (the mean of each step, and the max kept beside it so spikes survive),
with NaN where a sample is missing.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa
import pyarrow.compute as pc

from loadmaster.errors import TelemetryError
from loadmaster.telemetry.schema import FIELDS, LABELS, SAMPLE_SCHEMA, SERIES_SCHEMA, Field, field_code

FloatMatrix = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Series:
    """One series: its id in the store, its scope and its labels (dcgm-exporter names plus job, user)."""

    id: int
    scope: str
    labels: Mapping[str, str]


@dataclass(frozen=True)
class Range:
    """A field over series and time: ``mean`` and ``peak`` are (series x times), NaN where missing."""

    field: Field
    series: Sequence[int]
    times_s: npt.NDArray[np.float64]
    mean: FloatMatrix
    peak: FloatMatrix


class TelemetryStore(Protocol):
    """Where samples live. Implementations: DuckDB (embedded), Prometheus (HTTP API), in memory (tests)."""

    def register(self, series: Sequence[Series]) -> None:
        """Add series (or update their labels, such as the job a GPU now runs)."""
        ...

    def series(self, **labels: str) -> list[Series]:
        """The series whose labels equal every given label (all series when none given)."""
        ...

    def append(self, samples: pa.Table) -> None:
        """Add samples in :data:`SAMPLE_SCHEMA`; a series not registered is an error naming it."""
        ...

    def latest(self, field: Field, at_s: float | None = None) -> dict[int, float]:
        """Each series' last value of ``field`` at or before ``at_s`` (default: now), by series id."""
        ...

    def range(
        self, field: Field, series: Sequence[int], start_s: float, end_s: float, step_s: float
    ) -> Range:
        """``field`` over ``series`` from ``start_s`` to ``end_s`` in steps of ``step_s``."""
        ...


FIELD_CODES = np.array([field_code(f) for f in FIELDS], dtype=np.int64)
"""Every value ``SAMPLE_SCHEMA.field`` may hold."""

DEFAULT_LOOKBACK_S = 300.0
"""How far back ``latest`` looks for a series' last sample, as Prometheus's instant queries do (5 min):
a GPU that stopped reporting drops out of ``latest`` instead of showing a stale value."""


@dataclass(frozen=True)
class SampleColumns:
    """A batch of samples as numpy columns (the value NaN where missing), checked against the schema."""

    time_s: npt.NDArray[np.float64]
    series: npt.NDArray[np.int64]
    field: npt.NDArray[np.int64]
    value: npt.NDArray[np.float64]


def sample_columns(samples: pa.Table, known_series: Iterable[int]) -> SampleColumns:
    """Check a batch against :data:`SAMPLE_SCHEMA`, the registered series and the known fields."""
    missing = [name for name in SAMPLE_SCHEMA.names if name not in samples.column_names]
    if missing:
        raise TelemetryError(
            f"samples lack column(s) {', '.join(missing)}; SAMPLE_SCHEMA has {SAMPLE_SCHEMA.names}"
        )
    table = samples.select(SAMPLE_SCHEMA.names).cast(SAMPLE_SCHEMA)
    cols = SampleColumns(
        time_s=_numpy(table, "time_s", np.float64),
        series=_numpy(table, "series", np.int64),
        field=_numpy(table, "field", np.int64),
        value=_numpy(table, "value", np.float64),
    )
    known = np.fromiter(known_series, dtype=np.int64)
    unknown = cols.series[~np.isin(cols.series, known)]
    if unknown.size:
        raise TelemetryError(f"samples name series {int(unknown[0])}, which is not registered")
    bad = cols.field[~np.isin(cols.field, FIELD_CODES)]
    if bad.size:
        raise TelemetryError(f"samples name field {int(bad[0])}, which is not in the telemetry schema")
    return cols


def _numpy(table: pa.Table, name: str, dtype: type[np.generic]) -> npt.NDArray[Any]:
    column = table.column(name)
    if dtype is np.float64:
        column = pc.fill_null(column, np.nan)
    return np.asarray(column.to_numpy(), dtype=dtype)


def series_table(series: Sequence[Series]) -> pa.Table:
    """Series as a table in :data:`SERIES_SCHEMA` (labels not set are null)."""
    columns: dict[str, list[Any]] = {"series": [s.id for s in series], "scope": [s.scope for s in series]}
    for label in LABELS:
        columns[label] = [s.labels.get(label) for s in series]
    return pa.table(columns, schema=SERIES_SCHEMA)


def series_from_table(table: pa.Table) -> list[Series]:
    """The series of a table in :data:`SERIES_SCHEMA` (null labels left out)."""
    rows = table.select(SERIES_SCHEMA.names).to_pylist()
    return [
        Series(
            id=int(row["series"]),
            scope=str(row["scope"]),
            labels={k: str(row[k]) for k in LABELS if row[k] is not None},
        )
        for row in rows
    ]


def matches(series: Series, labels: Mapping[str, str]) -> bool:
    """Whether every given label equals the series' label of that name."""
    return all(series.labels.get(k) == v for k, v in labels.items())
