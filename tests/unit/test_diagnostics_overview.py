"""The overview says plainly what it could not use: no numpy warnings for an absent metric, and no
suspects drawn from a trace too short to cluster (pytest turns warnings into errors)."""

from __future__ import annotations

import pyarrow as pa
import pyarrow.compute as pc
import pytest

from loadmaster.diagnostics import detect, frame_from_tables
from loadmaster.diagnostics.frame import JobFrame
from loadmaster.diagnostics.overview import MIN_OVERVIEW_S, overview
from loadmaster.telemetry.schema import field, field_code
from loadmaster.telemetry.synthetic import GpuRef, NodeSpec, PlannedJob, SyntheticTelemetry, TelemetryPlan


def job(duration_s: float, without: str | None = None) -> JobFrame:
    """A healthy 24-GPU job of ``duration_s`` seconds, optionally without one field."""
    specs = tuple(NodeSpec(f"n{i}", 8) for i in range(3))
    gpus = tuple(GpuRef(n.hostname, g) for n in specs for g in range(8))
    gen = SyntheticTelemetry(TelemetryPlan(specs, (PlannedJob("j", "bo", gpus, 0, 1201.0),), seed=5))
    samples: pa.Table = gen.samples(0.0, duration_s)
    if without is not None:
        samples = samples.filter(pc.not_equal(samples.column("field"), field_code(field(without))))
    return frame_from_tables(gen.series(600.0), [samples], job="j", step_s=1.0, start_s=0.0, end_s=duration_s)


def test_an_absent_metric_is_named_once_not_warned_about_per_gpu() -> None:
    view = overview(job(600.0, without="NVLINK_TX_BYTES"))

    assert "NVLINK_TX_BYTES" not in view.peer_z_max
    assert "NVLINK_TX_BYTES" not in view.metric_corr
    assert view.notes == (
        "not in the data: NVLINK_TX_BYTES (left out of the peer z-scores and correlations)",
    )
    assert view.to_dict()["notes"] == list(view.notes)


@pytest.mark.parametrize("duration_s", [2.0, 5.0, 120.0])
def test_a_trace_too_short_to_cluster_names_no_suspect_and_says_why(duration_s: float) -> None:
    frame = job(duration_s)
    view = overview(frame)

    assert detect(frame) == []
    assert view.suspects == ()
    assert f"less than the {MIN_OVERVIEW_S:.0f} s the clusters need" in " ".join(view.notes)


def test_a_long_enough_healthy_job_has_clusters_and_no_notes() -> None:
    view = overview(job(600.0))
    assert view.notes == ()
    assert set(view.peer_z_max) == {
        "SM_ACTIVE",
        "PIPE_TENSOR_ACTIVE",
        "GPU_UTIL",
        "POWER_USAGE",
        "GPU_TEMP",
        "FB_USED",
        "NVLINK_TX_BYTES",
    }
