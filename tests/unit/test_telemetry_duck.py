"""DuckDBStore beyond the shared contract: rollups keep spikes, retention drops old data, files persist."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pytest

from loadmaster.errors import TelemetryError
from loadmaster.telemetry import SAMPLE_SCHEMA, Series, field, field_code
from loadmaster.telemetry.duck import DuckDBStore, Retention

UTIL = field("GPU_UTIL")
ECC = field("ECC_SBE_VOL_TOTAL")


def series_of(key: str, values: np.ndarray, start_s: float = 0.0, series: int = 0) -> pa.Table:
    times = start_s + np.arange(values.size, dtype=np.float64)
    return pa.table(
        {
            "time_s": times,
            "series": np.full(values.size, series, dtype=np.int32),
            "field": np.full(values.size, field_code(field(key)), dtype=np.int32),
            "value": values,
        },
        schema=SAMPLE_SCHEMA,
    )


def a_store(path: str | Path = ":memory:", **retention: float) -> DuckDBStore:
    store = DuckDBStore(path, Retention(**retention)) if retention else DuckDBStore(path)
    store.register([Series(0, "gpu", {"gpu": "0", "Hostname": "n0"})])
    return store


def test_rollups_keep_mean_and_spikes_after_raw_data_is_dropped() -> None:
    store = a_store(raw_s=600.0, minute_s=7200.0, ten_minute_s=86400.0)
    values = np.full(3 * 3600, 50.0)
    values[1234] = 100.0
    for hour in range(3):
        store.append(series_of("GPU_UTIL", values[hour * 3600 : (hour + 1) * 3600], hour * 3600.0))
    got = store.range(UTIL, [0], 0.0, 3 * 3600.0, 600.0)
    np.testing.assert_allclose(got.mean[0][:-1], 50.0, atol=0.1)
    assert got.peak[0][2] == 100.0
    assert got.peak[0][0] == 50.0
    with pytest.raises(AssertionError):
        np.testing.assert_allclose(store.range(UTIL, [0], 0.0, 600.0, 1.0).mean[0], 50.0)


def test_retention_drops_each_tier_in_turn() -> None:
    store = a_store(raw_s=600.0, minute_s=1800.0, ten_minute_s=3600.0)
    store.append(series_of("GPU_UTIL", np.full(7200, 10.0)))
    got = store.range(UTIL, [0], 0.0, 7200.0, 600.0)
    assert np.isnan(got.mean[0][:6]).all()
    assert not np.isnan(got.mean[0][7:]).any()


def test_counter_resets_are_corrected_across_batches_and_rollups() -> None:
    store = a_store()
    store.append(series_of("ECC_SBE_VOL_TOTAL", np.array([0.0, 1.0, 2.0])))
    store.append(series_of("ECC_SBE_VOL_TOTAL", np.array([0.0, 1.0]), start_s=3.0))
    np.testing.assert_allclose(store.range(ECC, [0], 0.0, 5.0, 1.0).mean[0], [0, 1, 2, 2, 3])
    store.append(series_of("ECC_SBE_VOL_TOTAL", np.full(200, 5.0), start_s=5.0))
    store.maintain()
    assert store.range(ECC, [0], 0.0, 120.0, 60.0).peak[0][0] == 7.0
    assert store.latest(ECC) == {0: 5.0}


def test_a_file_store_keeps_series_and_samples(tmp_path: Path) -> None:
    path = tmp_path / "t.duckdb"
    first = a_store(path)
    first.append(series_of("GPU_UTIL", np.array([1.0, 2.0])))
    first.close()
    again = DuckDBStore(path)
    assert [s.labels for s in again.series()] == [{"gpu": "0", "Hostname": "n0"}]
    assert again.latest(UTIL) == {0: 2.0}
    again.close()


def test_retention_that_would_drop_data_before_rolling_it_up_is_rejected() -> None:
    with pytest.raises(TelemetryError, match="raw_s"):
        Retention(raw_s=30.0)
