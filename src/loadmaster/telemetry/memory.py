"""An in-memory telemetry store on numpy arrays, for tests, the demo and synthetic data."""

from __future__ import annotations

import threading
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pyarrow as pa

from loadmaster.errors import TelemetryError
from loadmaster.telemetry.buckets import (
    FloatArray,
    IntArray,
    bucket_stats,
    correct_resets,
    last_per_group,
    step_times,
)
from loadmaster.telemetry.schema import Field, Kind, field_code
from loadmaster.telemetry.store import (
    DEFAULT_LOOKBACK_S,
    Range,
    SampleColumns,
    Series,
    matches,
    sample_columns,
)


@dataclass(frozen=True)
class _Sorted:
    """All samples sorted by (field, series, time)."""

    time_s: FloatArray
    series: IntArray
    field: IntArray
    value: FloatArray

    def of_field(self, code: int) -> slice:
        lo = int(np.searchsorted(self.field, code, side="left"))
        hi = int(np.searchsorted(self.field, code, side="right"))
        return slice(lo, hi)


class MemoryStore:
    """A :class:`~loadmaster.telemetry.store.TelemetryStore` that keeps every sample in memory.

    Appends are cheap (batches are kept as they come); the first read after an
    append sorts everything once. ``latest`` looks back ``lookback_s`` from
    ``at_s``; without ``at_s`` it reads at the newest sample in the store.
    Counter fields are read back with device resets corrected. Safe to share
    between threads (a demo appending while the dashboard reads).
    """

    def __init__(self, lookback_s: float = DEFAULT_LOOKBACK_S) -> None:
        self.lookback_s = lookback_s
        self._series: dict[int, Series] = {}
        self._batches: list[SampleColumns] = []
        self._sorted: _Sorted | None = None
        self._lock = threading.RLock()

    def register(self, series: Sequence[Series]) -> None:
        """Add series (or replace their labels)."""
        with self._lock:
            self._series.update({s.id: s for s in series})

    def series(self, **labels: str) -> list[Series]:
        """The series whose labels equal every given label, by id."""
        with self._lock:
            return [s for _, s in sorted(self._series.items()) if matches(s, labels)]

    def append(self, samples: pa.Table) -> None:
        """Add samples in SAMPLE_SCHEMA; unknown series or fields are errors that name them."""
        with self._lock:
            cols = sample_columns(samples, self._series)
            if cols.time_s.size:
                self._batches.append(cols)
                self._sorted = None

    def newest_s(self) -> float | None:
        """The time of the newest sample (None when the store is empty)."""
        data = self._data()
        return float(data.time_s.max()) if data.time_s.size else None

    def latest(self, field: Field, at_s: float | None = None) -> dict[int, float]:
        """Each series' last non-missing value of ``field`` in ``(at_s - lookback_s, at_s]``."""
        data = self._data()
        at = self.newest_s() if at_s is None else at_s
        if at is None:
            return {}
        part = data.of_field(field_code(field))
        t, s, v = data.time_s[part], data.series[part], data.value[part]
        keep = (t <= at) & (t > at - self.lookback_s) & np.isfinite(v)
        s, v = s[keep], v[keep]
        last = last_per_group(s)
        return {int(s[i]): float(v[i]) for i in last}

    def range(
        self, field: Field, series: Sequence[int], start_s: float, end_s: float, step_s: float
    ) -> Range:
        """Per-step mean and peak of ``field`` over ``series``; NaN where a step has no sample."""
        times = step_times(start_s, end_s, step_s)
        with self._lock:
            unknown = [i for i in series if i not in self._series]
        if unknown:
            raise TelemetryError(f"range asks for series {unknown[0]}, which is not registered")
        data = self._data()
        part = data.of_field(field_code(field))
        t, s, v = data.time_s[part], data.series[part], data.value[part]
        wanted = np.asarray(list(series), dtype=np.int64)
        keep = np.isin(s, wanted) & (t < start_s + step_s * times.size)
        t, s, v = t[keep], s[keep], v[keep]
        if field.kind is Kind.COUNTER:
            v = correct_resets(s, v)
        rows = _row_of(wanted, s)
        mean, peak = bucket_stats(
            rows,
            t,
            v,
            v,
            np.ones_like(v),
            n_rows=wanted.size,
            start_s=start_s,
            step_s=step_s,
            n_steps=times.size,
        )
        return Range(field=field, series=list(series), times_s=times, mean=mean, peak=peak)

    def _data(self) -> _Sorted:
        if self._sorted is None:
            self._sorted = _sort(self._batches)
            self._batches = [
                SampleColumns(
                    self._sorted.time_s, self._sorted.series, self._sorted.field, self._sorted.value
                )
            ]
        return self._sorted


def _sort(batches: list[SampleColumns]) -> _Sorted:
    if not batches:
        empty_f = np.zeros(0, dtype=np.float64)
        empty_i = np.zeros(0, dtype=np.int64)
        return _Sorted(empty_f, empty_i, empty_i, empty_f)
    t = np.concatenate([b.time_s for b in batches])
    s = np.concatenate([b.series for b in batches])
    f = np.concatenate([b.field for b in batches])
    v = np.concatenate([b.value for b in batches])
    order = np.lexsort((t, s, f))
    return _Sorted(t[order], s[order], f[order], v[order])


def _row_of(wanted: IntArray, series: IntArray) -> IntArray:
    """The position in ``wanted`` of each element of ``series`` (every element is in ``wanted``)."""
    order = np.argsort(wanted, kind="stable")
    return np.asarray(order[np.searchsorted(wanted[order], series)], dtype=np.int64)
