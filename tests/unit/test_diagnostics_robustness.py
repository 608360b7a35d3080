"""Dirty input: missing samples, NaN values, counter resets and mixed sampling rates cause no crash;
a gap in the data is a finding of its own; the store and file readers give the same frame."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.parquet as pq

from loadmaster.diagnostics import FindingKind, detect, frame_from_files, frame_from_store, frame_from_tables
from loadmaster.telemetry.memory import MemoryStore
from loadmaster.telemetry.schema import field, field_code
from loadmaster.telemetry.store import series_table
from loadmaster.telemetry.synthetic import GpuRef, NodeSpec, PlannedJob, SyntheticTelemetry, TelemetryPlan

DURATION_S = 1200.0


def clean_job() -> tuple[SyntheticTelemetry, pa.Table]:
    specs = tuple(NodeSpec(f"n{i}", 8) for i in range(3))
    gpus = tuple(GpuRef(n.hostname, g) for n in specs for g in range(8))
    gen = SyntheticTelemetry(TelemetryPlan(specs, (PlannedJob("j", "bo", gpus, 0, DURATION_S + 1),), seed=5))
    return gen, gen.samples(0.0, DURATION_S)


def dirty(samples: pa.Table) -> pa.Table:
    """Drop 2% of samples at random, null 1% of values, a 5 s sampling rate on series 4,
    a counter reset on series 2 and a 200 s gap on series 9."""
    rng = np.random.default_rng(0)
    t = samples.column("time_s").to_numpy()
    s = samples.column("series").to_numpy()
    f = samples.column("field").to_numpy()
    v = samples.column("value").to_numpy().copy()
    keep = rng.random(t.size) > 0.02
    keep &= ~((s == 4) & (np.rint(t) % 5 != 0))
    keep &= ~((s == 9) & (t > 400) & (t <= 600))
    ecc = (s == 2) & (f == field_code(field("ECC_SBE_VOL_TOTAL")))
    v[ecc & (t < 700)] = 1000.0  # counted before a device reset, 0 after: a drop, not errors
    nulls = rng.random(t.size) < 0.01
    value = pa.array(np.where(nulls, 0.0, v), mask=nulls)
    table = pa.table({"time_s": t, "series": s, "field": f, "value": value})
    return table.filter(pa.array(keep))


def test_dirty_data_gives_only_the_gap_as_a_finding() -> None:
    gen, samples = clean_job()
    frame = frame_from_tables(
        gen.series(600.0), [dirty(samples)], job="j", step_s=1.0, start_s=0.0, end_s=DURATION_S
    )
    findings = detect(frame)
    assert [f.kind for f in findings] == [FindingKind.MISSING], [f.summary for f in findings]
    gap = findings[0]
    assert gap.gpus == ("n1/1",)
    assert abs(gap.start_s - 400) <= 2 and abs(gap.end_s - 600) <= 2
    assert frame.native_step_s[4] == 5.0


def test_all_nan_values_are_missing_data_not_a_crash() -> None:
    gen, samples = clean_job()
    nan = pc.if_else(
        pc.equal(samples.column("series"), 7), pa.scalar(None, pa.float64()), samples.column("value")
    )
    table = samples.set_column(3, "value", nan)
    frame = frame_from_tables(gen.series(600.0), [table], job="j", step_s=1.0, start_s=0.0, end_s=DURATION_S)
    findings = detect(frame)
    assert [(f.kind, f.gpus) for f in findings] == [(FindingKind.MISSING, ("n0/7",))]


def test_coarser_grid_and_store_and_files_agree(tmp_path: Path) -> None:
    gen, samples = clean_job()
    series = gen.series(600.0)
    from_tables = frame_from_tables(series, [samples], job="j", step_s=10.0, start_s=0.0, end_s=DURATION_S)
    store = MemoryStore()
    store.register(series)
    store.append(samples)
    from_store = frame_from_store(store, "j", 0.0, DURATION_S, 10.0)
    np.testing.assert_allclose(from_store.metric("SM_ACTIVE"), from_tables.metric("SM_ACTIVE"), rtol=1e-9)
    pq.write_table(samples, tmp_path / "samples.parquet")
    pq.write_table(series_table(series), tmp_path / "series.parquet")
    from_files = frame_from_files(
        tmp_path / "samples.parquet", tmp_path / "series.parquet", job="j", step_s=10.0
    )
    np.testing.assert_allclose(from_files.metric("SM_ACTIVE"), from_tables.metric("SM_ACTIVE"), rtol=1e-9)
    assert detect(from_store) == []
