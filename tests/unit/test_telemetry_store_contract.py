"""The contract every TelemetryStore implementation passes (MemoryStore, DuckDBStore)."""

from __future__ import annotations

from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from loadmaster.errors import TelemetryError
from loadmaster.telemetry import SAMPLE_SCHEMA, field, field_code
from loadmaster.telemetry.duck import DuckDBStore
from loadmaster.telemetry.memory import MemoryStore
from loadmaster.telemetry.store import Series, TelemetryStore, series_from_table, series_table

UTIL = field("GPU_UTIL")
POWER = field("POWER_USAGE")
ECC = field("ECC_SBE_VOL_TOTAL")
IB = field("NODE_IB_TX_BYTES")

Factory = Callable[[Path], TelemetryStore]
FACTORIES: dict[str, Factory] = {
    "memory": lambda _tmp: MemoryStore(),
    "duckdb-memory": lambda _tmp: DuckDBStore(":memory:"),
    "duckdb-file": lambda tmp: DuckDBStore(tmp / "telemetry.duckdb"),
}


@pytest.fixture(params=list(FACTORIES))
def store(request: pytest.FixtureRequest, tmp_path: Path) -> Iterator[TelemetryStore]:
    made = FACTORIES[request.param](tmp_path)
    made.register(
        [
            Series(0, "gpu", {"gpu": "0", "UUID": "GPU-a", "Hostname": "n1", "job": "j1", "user": "ann"}),
            Series(1, "gpu", {"gpu": "1", "UUID": "GPU-b", "Hostname": "n1", "job": "j1", "user": "ann"}),
            Series(2, "gpu", {"gpu": "0", "UUID": "GPU-c", "Hostname": "n2"}),
            Series(3, "node", {"Hostname": "n1"}),
        ]
    )
    yield made
    close = getattr(made, "close", None)
    if close is not None:
        close()


def samples(*rows: tuple[float, int, str, float | None]) -> pa.Table:
    return pa.table(
        {
            "time_s": [r[0] for r in rows],
            "series": [r[1] for r in rows],
            "field": [field_code(field(r[2])) for r in rows],
            "value": [r[3] for r in rows],
        },
        schema=SAMPLE_SCHEMA,
    )


def test_series_filter_by_labels(store: TelemetryStore) -> None:
    assert [s.id for s in store.series()] == [0, 1, 2, 3]
    assert [s.id for s in store.series(Hostname="n1", pod="x")] == []
    assert [s.id for s in store.series(job="j1")] == [0, 1]
    assert [s.id for s in store.series(Hostname="n1")] == [0, 1, 3]


def test_register_again_updates_labels(store: TelemetryStore) -> None:
    store.register([Series(2, "gpu", {"gpu": "0", "UUID": "GPU-c", "Hostname": "n2", "job": "j2"})])
    assert [s.id for s in store.series(job="j2")] == [2]
    assert store.series(job="j2")[0].labels["UUID"] == "GPU-c"


@pytest.mark.parametrize(
    ("table", "message"),
    [
        (samples((0.0, 9, "GPU_UTIL", 1.0)), "series 9"),
        (
            pa.table({"time_s": [0.0], "series": [0], "field": [999], "value": [1.0]}, schema=SAMPLE_SCHEMA),
            "field 999",
        ),
        (pa.table({"time_s": [0.0], "series": [0]}), "value"),
    ],
)
def test_append_rejects_what_it_cannot_store(store: TelemetryStore, table: pa.Table, message: str) -> None:
    with pytest.raises(TelemetryError, match=message):
        store.append(table)


def test_latest_is_the_last_value_at_or_before(store: TelemetryStore) -> None:
    store.append(
        samples((10.0, 0, "GPU_UTIL", 50.0), (20.0, 0, "GPU_UTIL", 60.0), (20.0, 1, "GPU_UTIL", 5.0))
    )
    store.append(samples((30.0, 0, "GPU_UTIL", 70.0), (30.0, 0, "POWER_USAGE", 300.0)))
    assert store.latest(UTIL) == {0: 70.0, 1: 5.0}
    assert store.latest(UTIL, at_s=25.0) == {0: 60.0, 1: 5.0}
    assert store.latest(UTIL, at_s=5.0) == {}
    assert store.latest(POWER) == {0: 300.0}


def test_latest_skips_missing_values_and_stale_series(store: TelemetryStore) -> None:
    store.append(
        samples((0.0, 1, "GPU_UTIL", 5.0), (990.0, 0, "GPU_UTIL", 40.0), (1000.0, 0, "GPU_UTIL", None))
    )
    assert store.latest(UTIL) == {0: 40.0}


def test_range_gives_mean_and_peak_per_step(store: TelemetryStore) -> None:
    rows = [(float(t), 0, "GPU_UTIL", float(t % 10)) for t in range(30)]
    rows += [(float(t), 2, "GPU_UTIL", 100.0) for t in range(10, 20)]
    store.append(samples(*rows))
    got = store.range(UTIL, [2, 0, 1], 0.0, 30.0, 10.0)
    assert list(got.series) == [2, 0, 1]
    np.testing.assert_allclose(got.times_s, [0.0, 10.0, 20.0])
    np.testing.assert_allclose(got.mean[1], [4.5, 4.5, 4.5])
    np.testing.assert_allclose(got.peak[1], [9.0, 9.0, 9.0])
    np.testing.assert_allclose(got.mean[0], [np.nan, 100.0, np.nan])
    assert np.isnan(got.mean[2]).all()
    assert got.mean.shape == got.peak.shape == (3, 3)


def test_range_steps_are_half_open(store: TelemetryStore) -> None:
    store.append(samples((0.0, 0, "GPU_UTIL", 1.0), (5.0, 0, "GPU_UTIL", 3.0), (10.0, 0, "GPU_UTIL", 99.0)))
    got = store.range(UTIL, [0], 0.0, 10.0, 5.0)
    np.testing.assert_allclose(got.mean, [[1.0, 3.0]])


def test_range_corrects_counter_resets(store: TelemetryStore) -> None:
    values = [0.0, 2.0, 5.0, 1.0, 3.0]
    store.append(samples(*[(float(t), 0, "ECC_SBE_VOL_TOTAL", v) for t, v in enumerate(values)]))
    got = store.range(ECC, [0], 0.0, 5.0, 1.0)
    np.testing.assert_allclose(got.mean, [[0.0, 2.0, 5.0, 6.0, 8.0]])
    assert store.latest(ECC) == {0: 3.0}


def test_node_fields_are_stored_like_gpu_fields(store: TelemetryStore) -> None:
    store.append(samples((0.0, 3, "NODE_IB_TX_BYTES", 1e9), (1.0, 3, "NODE_IB_TX_BYTES", 3e9)))
    assert store.latest(IB) == {3: 3e9}
    np.testing.assert_allclose(store.range(IB, [3], 0.0, 2.0, 2.0).mean, [[2e9]])


@pytest.mark.parametrize(("start", "end", "step"), [(0.0, 10.0, 0.0), (10.0, 0.0, 1.0), (0.0, 10.0, -1.0)])
def test_range_rejects_bad_bounds(store: TelemetryStore, start: float, end: float, step: float) -> None:
    with pytest.raises(TelemetryError, match="range"):
        store.range(UTIL, [0], start, end, step)


def test_range_rejects_unknown_series(store: TelemetryStore) -> None:
    with pytest.raises(TelemetryError, match="series 42"):
        store.range(UTIL, [42], 0.0, 10.0, 1.0)


def test_empty_store_reads_empty(store: TelemetryStore) -> None:
    assert store.latest(UTIL) == {}
    assert np.isnan(store.range(UTIL, [0], 0.0, 10.0, 5.0).mean).all()


def test_series_round_trip_through_arrow(store: TelemetryStore) -> None:
    assert series_from_table(series_table(store.series())) == store.series()
