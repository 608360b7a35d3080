"""The vectorised binning of FrameBuilder equals a plain per-sample reference on dirty random data:
NaNs and nulls, counter resets, mixed sampling rates per GPU, unordered samples split across batches,
unknown series and fields, samples outside the grid."""

from __future__ import annotations

import math

import numpy as np
import pyarrow as pa
import pytest

from loadmaster.diagnostics.frame import (
    GPU_FIELDS,
    NODE_FIELDS,
    FrameBuilder,
    JobFrame,
    finish_frame,
    frame_from_tables,
)
from loadmaster.errors import TelemetryError
from loadmaster.telemetry.schema import Scope, field_code
from loadmaster.telemetry.store import Series

PEAK = {"CLOCKS_EVENT_REASONS", "XID_ERRORS"}
HOSTS = ("a", "b")


def _series() -> list[Series]:
    gpus = [
        Series(i, Scope.GPU.value, {"Hostname": HOSTS[i // 3], "gpu": str(i % 3), "job": "j", "user": "u"})
        for i in range(6)
    ]
    other = [Series(6, Scope.GPU.value, {"Hostname": "c", "gpu": "0", "job": "k"})]
    nodes = [Series(7 + k, Scope.NODE.value, {"Hostname": h}) for k, h in enumerate(HOSTS)]
    return gpus + other + nodes


def _samples(rng: np.random.Generator, end_s: float) -> pa.Table:
    """Every GPU at its own rate (1, 2, 3 or 5 s, jittered), node series at 1 s; dirt added."""
    parts = []
    rates = [1.0, 2.0, 1.0, 5.0, 3.0, 1.0, 1.0]
    for sid, rate in enumerate(rates):
        t = np.arange(rate, end_s + 10, rate) + rng.uniform(-0.4, 0.4)
        for f in GPU_FIELDS:
            v = rng.uniform(0, 100, t.size)
            if f.key in PEAK:
                v = rng.choice([0.0, 0.0, 0.0, 32.0, 64.0, 79.0], t.size)
            if field_code(f) == 310:
                v = np.cumsum(rng.integers(0, 2, t.size)).astype(float)
                v[t.size // 2 :] -= v[t.size // 2]  # a device reset halfway
            parts.append((t, np.full(t.size, sid), np.full(t.size, field_code(f)), v))
    for sid in (7, 8, 99):  # 99: a series nobody registered
        t = np.arange(1.0, end_s + 1)
        for f in NODE_FIELDS:
            parts.append(
                (t, np.full(t.size, sid), np.full(t.size, field_code(f)), rng.uniform(0, 1e9, t.size))
            )
    t, s, f, v = (np.concatenate([p[i] for p in parts]) for i in range(4))
    f[rng.random(f.size) < 0.01] = 4242  # a field code outside the schema
    v[rng.random(v.size) < 0.02] = np.nan
    order = rng.permutation(t.size)
    nulls = rng.random(t.size) < 0.01
    return pa.table(
        {
            "time_s": t[order],
            "series": s[order].astype(np.int32),
            "field": f[order].astype(np.int32),
            "value": pa.array(v[order], mask=nulls),
        }
    )


def _reference(
    series: list[Series], table: pa.Table, start_s: float, end_s: float, step_s: float
) -> JobFrame:
    """One sample at a time: mean per step (max for bitmask/XID fields) into a dict, then finish."""
    builder = FrameBuilder(series, "j", start_s, end_s, step_s)
    rows = {g.series: r for r, g in enumerate(builder.gpus)}
    node_rows = {s.id: builder.nodes.index(s.labels["Hostname"]) for s in series if s.scope == "node"}
    by_code = {field_code(f): f for f in builder.fields}
    n = builder.times.size
    acc: dict[tuple[str, int, int], list[float]] = {}
    columns = [table.column(c).to_pylist() for c in ("time_s", "series", "field", "value")]
    for t, s, f, v in zip(*columns, strict=True):
        fld = by_code.get(f)
        if fld is None or v is None or not math.isfinite(v):
            continue
        row = (rows if fld.scope is Scope.GPU else node_rows).get(s)
        k = math.ceil((t - start_s) / step_s - 1e-9) - 1
        if row is not None and 0 <= k < n:
            acc.setdefault((fld.key, row, k), []).append(v)
    raw = {}
    for fld in builder.fields:
        m = np.full((len(builder.gpus) if fld.scope is Scope.GPU else len(builder.nodes), n), np.nan)
        for (key, row, k), vs in acc.items():
            if key == fld.key:
                m[row, k] = max(vs) if key in PEAK else sum(vs) / len(vs)
        raw[fld.key] = m
    return finish_frame(builder.job, builder.times, step_s, builder.gpus, builder.nodes, raw)


@pytest.mark.parametrize(("seed", "step_s", "batches"), [(0, 1.0, 1), (1, 1.0, 7), (2, 2.5, 3), (3, 10.0, 4)])
def test_vectorised_binning_equals_the_reference(seed: int, step_s: float, batches: int) -> None:
    rng = np.random.default_rng(seed)
    series, end_s = _series(), 200.0
    table = _samples(rng, end_s)
    cuts = np.sort(rng.integers(0, table.num_rows, batches - 1))
    pieces = [table.slice(a, b - a) for a, b in zip([0, *cuts], [*cuts, table.num_rows], strict=True)]
    fast = frame_from_tables(series, pieces, job="j", step_s=step_s, start_s=0.0, end_s=end_s)
    ref = _reference(series, table, 0.0, end_s, step_s)
    assert fast.gpus == ref.gpus and fast.nodes == ref.nodes
    np.testing.assert_array_equal(fast.present, ref.present)
    np.testing.assert_array_equal(fast.native_step_s, ref.native_step_s)
    for key in ref.metrics:
        np.testing.assert_allclose(
            fast.metrics[key], ref.metrics[key], rtol=1e-12, equal_nan=True, err_msg=key
        )
    for key in ref.node_metrics:
        np.testing.assert_allclose(fast.node_metrics[key], ref.node_metrics[key], rtol=1e-12, equal_nan=True)


def test_counts_widen_when_a_step_holds_many_samples() -> None:
    series = _series()[:1]
    t = np.repeat(np.arange(1.0, 11.0), 300)  # 300 samples per 1 s step: past uint8
    table = pa.table(
        {
            "time_s": t,
            "series": np.zeros(t.size, np.int32),
            "field": np.full(t.size, field_code(GPU_FIELDS[0]), np.int32),
            "value": np.tile(np.arange(300.0), 10),
        }
    )
    frame = frame_from_tables(series, [table.slice(0, 1500), table.slice(1500)], "j", 1.0, 0.0, 10.0)
    np.testing.assert_allclose(frame.metrics[GPU_FIELDS[0].key][0], np.full(10, 149.5))


def test_a_builder_finishes_once() -> None:
    builder = FrameBuilder(_series(), "j", 0.0, 10.0, 1.0)
    builder.frame()
    with pytest.raises(TelemetryError, match="already called"):
        builder.frame()
