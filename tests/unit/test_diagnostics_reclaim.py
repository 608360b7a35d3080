"""The reclaim rule, table-driven, and the report built from a store."""

from __future__ import annotations

import json

import numpy as np
import pytest

from loadmaster.diagnostics import ReclaimRule, reclaim_report
from loadmaster.diagnostics.reclaim import classify
from loadmaster.errors import TelemetryError
from loadmaster.telemetry.memory import MemoryStore
from loadmaster.telemetry.synthetic import (
    Fault,
    FaultKind,
    GpuRef,
    NodeSpec,
    PlannedJob,
    SyntheticTelemetry,
    TelemetryPlan,
    Workload,
)

NAN = float("nan")
RULE = ReclaimRule()


@pytest.mark.parametrize(
    ("util", "sm", "state"),
    [
        ([0.0] * 60, [0.0] * 240, "idle"),
        ([0.0] * 59 + [3.0], [0.0] * 240, "underused"),
        ([0.0] * 50 + [NAN] * 10, [0.0] * 240, "idle"),
        ([NAN] * 60, [NAN] * 240, "unknown"),
        ([0.0] * 30 + [NAN] * 30, [NAN] * 240, "unknown"),
        ([50.0] * 60, [0.1] * 240, "underused"),
        ([50.0] * 60, [0.1] * 200 + [0.9] * 40, "busy"),
        ([90.0] * 60, [0.7] * 240, "busy"),
    ],
    ids=["all-zero", "one-blip", "zero-with-gaps", "silent", "too-few-samples", "low-sm", "bursty", "busy"],
)
def test_rule(util: list[float], sm: list[float], state: str) -> None:
    assert classify(np.array(util), np.array(sm), RULE) == state


def test_rule_rejects_bad_settings() -> None:
    with pytest.raises(TelemetryError, match="idle_window_s"):
        ReclaimRule(idle_window_s=0)


def test_report_names_idle_job_and_user_with_an_action() -> None:
    specs = (NodeSpec("a", 8), NodeSpec("b", 8))
    jobs = (
        PlannedJob("train", "ann", tuple(GpuRef("a", g) for g in range(8)), 0, 9000),
        PlannedJob(
            "notebook", "bo", tuple(GpuRef("b", g) for g in range(2)), 0, 9000, workload=Workload.IDLE
        ),
        PlannedJob("half", "cy", tuple(GpuRef("b", g) for g in range(2, 6)), 0, 9000),
    )
    faults = (Fault(FaultKind.IDLE, 0, 9000, gpus=(GpuRef("b", 4), GpuRef("b", 5))),)
    gen = SyntheticTelemetry(TelemetryPlan(specs, jobs, faults, seed=2))
    store = MemoryStore()
    store.register(gen.series(3600.0))
    for table in gen.chunks(0.0, 7200.0, interval_s=30.0, chunk_s=3600.0):
        store.append(table)
    report = reclaim_report(store, 7200.0).to_dict()
    by_job = {row["job"]: row for row in report["jobs"]}
    assert set(by_job) == {"notebook", "half"}
    assert by_job["notebook"]["idle"] == ["b/0", "b/1"] and "preempt" in by_job["notebook"]["action"]
    assert by_job["half"]["idle"] == ["b/4", "b/5"] and "shrink" in by_job["half"]["action"]
    assert report["users"] == {
        "bo": {"idle_gpus": 2, "underused_gpus": 0},
        "cy": {"idle_gpus": 2, "underused_gpus": 0},
    }
    json.dumps(report)


def test_jobs_rank_by_wasted_gpu_hours_with_how_long_they_have_been_idle() -> None:
    specs = (NodeSpec("a", 8),)
    jobs = (
        PlannedJob("late", "ann", tuple(GpuRef("a", g) for g in range(4)), 0, 9000),
        PlannedJob(
            "notebook", "bo", tuple(GpuRef("a", g) for g in range(4, 6)), 0, 9000, workload=Workload.IDLE
        ),
    )
    faults = (Fault(FaultKind.IDLE, 5400, 9000, gpus=tuple(GpuRef("a", g) for g in range(4))),)
    gen = SyntheticTelemetry(TelemetryPlan(specs, jobs, faults, seed=2))
    store = MemoryStore()
    store.register(gen.series(3600.0))
    for table in gen.chunks(0.0, 9000.0, interval_s=30.0, chunk_s=3600.0):
        store.append(table)
    report = reclaim_report(store, 9000.0).to_dict()
    rows = [(r["job"], r["idle_for_s"], r["wasted_gpu_hours"]) for r in report["jobs"]]
    # notebook: 2 GPUs idle since its start (2.5 h each); late: 4 GPUs idle for the last hour (1 h each)
    assert [r[0] for r in rows] == ["notebook", "late"]
    assert rows[0][1] == pytest.approx(9000.0, abs=60) and rows[0][2] == pytest.approx(5.0, abs=0.1)
    assert rows[1][1] == pytest.approx(3600.0, abs=120) and rows[1][2] == pytest.approx(4.0, abs=0.15)
    assert report["wasted_gpu_hours"] == pytest.approx(rows[0][2] + rows[1][2])
