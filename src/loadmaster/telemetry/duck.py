"""The default telemetry store: an embedded DuckDB database with retention and rollups.

Raw samples are kept for ``Retention.raw_s``; complete minutes are rolled up
into a 1-minute table and complete 10-minute spans of that into a 10-minute
table, each row keeping the mean, the max and the sample count, so a read at a
coarse step still shows a short spike in ``peak``. A range read uses the
coarsest tier that fits its step for the time that tier covers and finer
tiers (down to raw samples) for the rest.

Counters (ECC errors) are made monotonic on ingest: when a device resets, the
value before the reset is added to every later value of that series, so
rollups and reads see totals that never go down. ``latest`` returns the raw
value the device reported. Samples of one counter series must arrive in time
order for this to hold.
"""

from __future__ import annotations

import json
import math
import threading
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import duckdb
import numpy as np
import pyarrow as pa

from loadmaster.errors import TelemetryError
from loadmaster.telemetry.buckets import FloatArray, IntArray, bucket_stats, correct_resets, step_times
from loadmaster.telemetry.schema import FIELDS, Field, Kind, field_code
from loadmaster.telemetry.store import (
    DEFAULT_LOOKBACK_S,
    Range,
    SampleColumns,
    Series,
    matches,
    sample_columns,
)

COUNTER_CODES = np.array([field_code(f) for f in FIELDS if f.kind is Kind.COUNTER], dtype=np.int64)

_DDL = (
    "CREATE TABLE IF NOT EXISTS series (id INTEGER PRIMARY KEY, scope VARCHAR NOT NULL,"
    " labels VARCHAR NOT NULL)",
    "CREATE TABLE IF NOT EXISTS samples (time_s DOUBLE NOT NULL, series INTEGER NOT NULL,"
    " field INTEGER NOT NULL, value DOUBLE, adj DOUBLE)",
    "CREATE TABLE IF NOT EXISTS rollup_60 (time_s DOUBLE NOT NULL, series INTEGER NOT NULL,"
    " field INTEGER NOT NULL, mean DOUBLE NOT NULL, peak DOUBLE NOT NULL, n BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS rollup_600 (time_s DOUBLE NOT NULL, series INTEGER NOT NULL,"
    " field INTEGER NOT NULL, mean DOUBLE NOT NULL, peak DOUBLE NOT NULL, n BIGINT NOT NULL)",
    "CREATE TABLE IF NOT EXISTS counter_state (series INTEGER NOT NULL, field INTEGER NOT NULL,"
    " last_raw DOUBLE NOT NULL, offset_total DOUBLE NOT NULL, PRIMARY KEY (series, field))",
    "CREATE TABLE IF NOT EXISTS meta (key VARCHAR PRIMARY KEY, value DOUBLE NOT NULL)",
)


@dataclass(frozen=True)
class Retention:
    """How long each tier keeps data, in seconds of sample time behind the newest sample."""

    raw_s: float = 24 * 3600.0
    """Raw samples: a day at full resolution is enough to diagnose yesterday's failed job."""
    minute_s: float = 7 * 24 * 3600.0
    """1-minute rollups: a week, for "what happened to my job this week"."""
    ten_minute_s: float = 90 * 24 * 3600.0
    """10-minute rollups: a quarter, for utilisation reports and capacity planning."""
    grace_s: float = 60.0
    """How long after its end a span is rolled up, so samples that arrive a little late are counted."""

    def __post_init__(self) -> None:
        needs = {
            "raw_s": self.grace_s + 60.0,
            "minute_s": self.grace_s + 600.0,
            "ten_minute_s": self.minute_s,
        }
        for name, least in needs.items():
            value = getattr(self, name)
            if not value >= least:
                raise TelemetryError(
                    f"Retention.{name} = {value!r} is too short: it must be at least {least:g} s so that "
                    "data is rolled up before it is dropped"
                )


@dataclass(frozen=True)
class _Tier:
    table: str
    resolution_s: float


_TIERS = (_Tier("samples", 0.0), _Tier("rollup_60", 60.0), _Tier("rollup_600", 600.0))


class DuckDBStore:
    """A :class:`~loadmaster.telemetry.store.TelemetryStore` in an embedded DuckDB file (or ``:memory:``).

    Safe to share between threads (one lock around the connection).
    ``maintain`` rolls up and drops expired data; with ``auto_maintain`` it
    runs whenever appended data has moved a minute past the last run.
    """

    def __init__(
        self,
        path: str | Path = ":memory:",
        retention: Retention | None = None,
        lookback_s: float = DEFAULT_LOOKBACK_S,
        auto_maintain: bool = True,
    ) -> None:
        self.retention = retention or Retention()
        self.lookback_s = lookback_s
        self.auto_maintain = auto_maintain
        self._lock = threading.RLock()
        try:
            self._con = duckdb.connect(str(path))
        except duckdb.Error as exc:
            raise TelemetryError(f"cannot open telemetry database {str(path)!r}: {exc}") from exc
        for statement in _DDL:
            self._con.execute(statement)
        self._series = self._load_series()

    def close(self) -> None:
        """Close the database (a file store keeps its data for the next open)."""
        with self._lock:
            self._con.close()

    def register(self, series: Sequence[Series]) -> None:
        """Add series (or replace their labels), in one bulk statement (the last of a repeated id wins)."""
        latest = {s.id: s for s in series}
        if not latest:
            return
        rows = pa.table(
            {
                "id": pa.array(list(latest), pa.int32()),
                "scope": [s.scope for s in latest.values()],
                "labels": [json.dumps(dict(s.labels), sort_keys=True) for s in latest.values()],
            }
        )
        with self._lock:
            self._replace("series", "id", rows)
            self._series.update(latest)

    def _replace(self, table: str, key: str, rows: pa.Table) -> None:
        """Upsert ``rows`` into ``table`` by its key column(s): delete the old rows, insert the new, at once.

        Bulk through Arrow: a row-by-row ``INSERT OR REPLACE`` costs about 2 ms a row here.
        """
        keys = [k.strip() for k in key.split(",")]
        match = " AND ".join(f"{table}.{k} = _rows.{k}" for k in keys)
        self._con.register("_rows", rows)
        try:
            self._con.execute("BEGIN TRANSACTION")
            self._con.execute(f"DELETE FROM {table} WHERE EXISTS (SELECT 1 FROM _rows WHERE {match})")
            self._con.execute(f"INSERT INTO {table} SELECT * FROM _rows")
            self._con.execute("COMMIT")
        except BaseException:
            self._con.execute("ROLLBACK")
            raise
        finally:
            self._con.unregister("_rows")

    def series(self, **labels: str) -> list[Series]:
        """The series whose labels equal every given label, by id."""
        with self._lock:
            return [s for _, s in sorted(self._series.items()) if matches(s, labels)]

    def append(self, samples: pa.Table) -> None:
        """Add samples in SAMPLE_SCHEMA; unknown series or fields are errors that name them."""
        with self._lock:
            cols = sample_columns(samples, self._series)
            if cols.time_s.size == 0:
                return
            adj = self._adjust_counters(cols)
            batch = pa.table(
                {
                    "time_s": cols.time_s,
                    "series": cols.series.astype(np.int32),
                    "field": cols.field.astype(np.int32),
                    "value": pa.array(cols.value, from_pandas=True),
                    "adj": pa.array(adj, from_pandas=True),
                }
            )
            self._con.register("_batch", batch)
            try:
                self._con.execute("INSERT INTO samples SELECT * FROM _batch")
            finally:
                self._con.unregister("_batch")
            newest = float(cols.time_s.max())
            if self.auto_maintain and newest >= self._meta("maintained_s", -math.inf) + 60.0:
                self.maintain()

    def newest_s(self) -> float | None:
        """The time of the newest raw sample (None when there is none)."""
        with self._lock:
            row = self._con.execute("SELECT max(time_s) FROM samples").fetchone()
        return None if row is None or row[0] is None else float(row[0])

    def latest(self, field: Field, at_s: float | None = None) -> dict[int, float]:
        """Each series' last non-missing raw value of ``field`` in ``(at_s - lookback_s, at_s]``."""
        at = self.newest_s() if at_s is None else at_s
        if at is None:
            return {}
        with self._lock:
            rows = self._con.execute(
                "SELECT series, arg_max(value, time_s) FROM samples WHERE field = ? AND value IS NOT NULL"
                " AND time_s <= ? AND time_s > ? GROUP BY series",
                [field_code(field), at, at - self.lookback_s],
            ).fetchall()
        return {int(s): float(v) for s, v in rows}

    def range(
        self, field: Field, series: Sequence[int], start_s: float, end_s: float, step_s: float
    ) -> Range:
        """Per-step mean and peak of ``field`` over ``series``, from the coarsest tier that fits the step."""
        times = step_times(start_s, end_s, step_s)
        unknown = [i for i in series if i not in self._series]
        if unknown:
            raise TelemetryError(f"range asks for series {unknown[0]}, which is not registered")
        wanted = np.asarray(list(series), dtype=np.int64)
        stop_s = start_s + step_s * times.size
        parts = [
            self._read(tier, field, wanted, lo, hi) for tier, lo, hi in self._plan(step_s, start_s, stop_s)
        ]
        rows = np.concatenate([p[0] for p in parts]) if parts else np.zeros(0, np.int64)
        cols = [np.concatenate([p[i] for p in parts]) if parts else np.zeros(0) for i in range(1, 5)]
        order = np.argsort(wanted, kind="stable")
        row_of = np.asarray(order[np.searchsorted(wanted[order], rows)], dtype=np.int64)
        mean, peak = bucket_stats(
            row_of, cols[0], cols[1], cols[2], cols[3],
            n_rows=wanted.size, start_s=start_s, step_s=step_s, n_steps=times.size,
        )  # fmt: skip
        return Range(field=field, series=list(series), times_s=times, mean=mean, peak=peak)

    def maintain(self, now_s: float | None = None) -> None:
        """Roll complete spans up into the 1- and 10-minute tiers, then drop what retention lets go."""
        with self._lock:
            now = self.newest_s() if now_s is None else now_s
            if now is None:
                return
            ret = self.retention
            done_60 = math.floor((now - ret.grace_s) / 60.0) * 60.0
            self._roll("samples", "rollup_60", 60.0, done_60)
            self._roll("rollup_60", "rollup_600", 600.0, math.floor(done_60 / 600.0) * 600.0)
            for table, keep_s in (
                ("samples", ret.raw_s),
                ("rollup_60", ret.minute_s),
                ("rollup_600", ret.ten_minute_s),
            ):
                self._con.execute(f"DELETE FROM {table} WHERE time_s < ?", [now - keep_s])
            self._set_meta("maintained_s", now)

    def _roll(self, source: str, target: str, width_s: float, until_s: float) -> None:
        done = self._meta(f"{target}_until", -math.inf)
        if until_s <= done:
            return
        lo = done if math.isfinite(done) else -1e300
        if source == "samples":
            select = (
                f"SELECT floor(time_s / {width_s}) * {width_s} AS t, series, field,"
                " avg(coalesce(adj, value)), max(coalesce(adj, value)), count(*)"
                " FROM samples WHERE value IS NOT NULL"
            )
        else:
            select = (
                f"SELECT floor(time_s / {width_s}) * {width_s} AS t, series, field, sum(mean * n) / sum(n),"
                f" max(peak), sum(n) FROM {source} WHERE TRUE"
            )
        self._con.execute(
            f"INSERT INTO {target} {select} AND time_s >= ? AND time_s < ? GROUP BY t, series, field",
            [lo, until_s],
        )
        self._set_meta(f"{target}_until", until_s)

    def _plan(self, step_s: float, start_s: float, stop_s: float) -> list[tuple[_Tier, float, float]]:
        """Which tier serves which part of ``[start_s, stop_s)``: coarse tiers for the old part."""
        usable = [t for t in _TIERS if t.resolution_s <= step_s]
        plan: list[tuple[_Tier, float, float]] = []
        lo = start_s
        for tier in reversed(usable):
            hi = (
                stop_s
                if tier.resolution_s == 0
                else min(stop_s, self._meta(f"{tier.table}_until", -math.inf))
            )
            if hi > lo:
                plan.append((tier, lo, hi))
                lo = hi
        return plan

    def _read(
        self, tier: _Tier, field: Field, wanted: IntArray, lo: float, hi: float
    ) -> tuple[IntArray, FloatArray, FloatArray, FloatArray, FloatArray]:
        if tier.resolution_s == 0:
            sql = (
                "SELECT series, time_s, coalesce(adj, value) AS m, coalesce(adj, value) AS p, 1.0 AS n"
                " FROM samples WHERE value IS NOT NULL AND"
            )
        else:
            sql = (
                f"SELECT series, time_s, mean AS m, peak AS p, CAST(n AS DOUBLE) AS n FROM {tier.table} WHERE"
            )
        with self._lock:
            got: dict[str, Any] = self._con.execute(
                f"{sql} field = ? AND series = ANY(?) AND time_s >= ? AND time_s < ?",
                [field_code(field), wanted.tolist(), lo, hi],
            ).fetchnumpy()
        return (
            np.asarray(got["series"], dtype=np.int64),
            np.asarray(got["time_s"], dtype=np.float64),
            np.asarray(got["m"], dtype=np.float64),
            np.asarray(got["p"], dtype=np.float64),
            np.asarray(got["n"], dtype=np.float64),
        )

    def _adjust_counters(self, cols: SampleColumns) -> FloatArray:
        """Reset-corrected values for counter samples (NaN for gauges), carrying state between batches."""
        adj = np.full(cols.value.shape, np.nan)
        idx = np.flatnonzero(np.isin(cols.field, COUNTER_CODES) & np.isfinite(cols.value))
        if idx.size == 0:
            return adj
        idx = idx[np.lexsort((cols.time_s[idx], cols.field[idx], cols.series[idx]))]
        groups = cols.series[idx] * 1_000_000 + cols.field[idx] + 500_000
        values = cols.value[idx]
        keys, first = np.unique(groups, return_index=True)
        last_raw, offset = self._counter_state(keys)
        fixed = correct_resets(np.insert(groups, first, keys), np.insert(values, first, last_raw))
        fixed = np.delete(fixed, first + np.arange(first.size))
        member = np.searchsorted(keys, groups)
        adj[idx] = fixed + offset[member]
        last = np.concatenate((first[1:], [values.size])) - 1
        new_offset = fixed[last] - values[last] + offset
        rows = pa.table(
            {
                "series": pa.array(keys // 1_000_000, pa.int32()),
                "field": pa.array(keys % 1_000_000 - 500_000, pa.int32()),
                "last_raw": values[last],
                "offset_total": new_offset,
            }
        )
        self._replace("counter_state", "series, field", rows)
        return adj

    def _counter_state(self, keys: IntArray) -> tuple[FloatArray, FloatArray]:
        """The last raw value (NaN if never seen) and the reset offset (0) of each counter key."""
        state: dict[str, Any] = self._con.execute(
            "SELECT series, field, last_raw, offset_total FROM counter_state"
        ).fetchnumpy()
        known = (
            np.asarray(state["series"], np.int64) * 1_000_000 + np.asarray(state["field"], np.int64) + 500_000
        )
        last_raw, offset = np.full(keys.size, np.nan), np.zeros(keys.size)
        if known.size == 0:
            return last_raw, offset
        order = np.argsort(known)
        known = known[order]
        at = np.minimum(np.searchsorted(known, keys), known.size - 1)
        hit = known[at] == keys
        last_raw[hit] = np.asarray(state["last_raw"], np.float64)[order][at[hit]]
        offset[hit] = np.asarray(state["offset_total"], np.float64)[order][at[hit]]
        return last_raw, offset

    def _meta(self, key: str, default: float) -> float:
        row = self._con.execute("SELECT value FROM meta WHERE key = ?", [key]).fetchone()
        return default if row is None else float(row[0])

    def _set_meta(self, key: str, value: float) -> None:
        self._con.execute("INSERT OR REPLACE INTO meta VALUES (?, ?)", [key, value])

    def _load_series(self) -> dict[int, Series]:
        rows = self._con.execute("SELECT id, scope, labels FROM series").fetchall()
        return {int(i): Series(int(i), str(scope), json.loads(labels)) for i, scope, labels in rows}
