"""Each detector on a small synthetic job with known faults: targets and intervals found; a
fault-free job gives no findings."""

from __future__ import annotations

import numpy as np
import pytest

from loadmaster.diagnostics import Finding, FindingKind, JobFrame, detect, diagnose, frame_from_tables
from loadmaster.diagnostics.signals import change_points, envelope, k_medoids, robust_z
from loadmaster.telemetry.synthetic import (
    Fault,
    FaultKind,
    GpuRef,
    NodeSpec,
    PlannedJob,
    SyntheticTelemetry,
    TelemetryPlan,
)

DURATION_S = 2400.0
FAULTS = (
    Fault(FaultKind.STRAGGLER, 300, 800, gpus=(GpuRef("n1", 3),)),
    Fault(FaultKind.COMM, 1200, 1600, nodes=("n2",)),
    Fault(FaultKind.THERMAL, 1800, 2100, gpus=(GpuRef("n0", 5),)),
    Fault(FaultKind.MEMORY_LEAK, 400, 1500, gpus=(GpuRef("n3", 1),)),
    Fault(FaultKind.XID, 1000, 1100, gpus=(GpuRef("n3", 2),)),
    Fault(FaultKind.ECC, 1300, 2000, gpus=(GpuRef("n0", 0),)),
    Fault(FaultKind.MISSING, 500, 700, gpus=(GpuRef("n2", 7),)),
    Fault(FaultKind.IDLE, 1900, 2300, nodes=("n1",)),
)


def job_frame(faults: tuple[Fault, ...], seed: int = 3, nodes: int = 4) -> JobFrame:
    specs = tuple(NodeSpec(f"n{i}", 8) for i in range(nodes))
    gpus = tuple(GpuRef(n.hostname, g) for n in specs for g in range(8))
    plan = TelemetryPlan(specs, (PlannedJob("j", "ann", gpus, 0, DURATION_S + 1),), faults, seed=seed)
    gen = SyntheticTelemetry(plan)
    samples = gen.samples(0.0, DURATION_S)
    return frame_from_tables(
        gen.series(DURATION_S / 2), [samples], job="j", step_s=1.0, start_s=0.0, end_s=DURATION_S
    )


@pytest.fixture(scope="module")
def faulty() -> list[Finding]:
    return detect(job_frame(FAULTS))


def iou(f: Finding, fault: Fault) -> float:
    inter = max(0.0, min(f.end_s, fault.end_s) - max(f.start_s, fault.start_s))
    return inter / (max(f.end_s, fault.end_s) - min(f.start_s, fault.start_s))


def targets(fault: Fault) -> set[str]:
    gpus = {str(g) for g in fault.gpus}
    return gpus | {f"{n}/{i}" for n in fault.nodes for i in range(8)}


@pytest.mark.parametrize("fault", FAULTS, ids=lambda f: f.kind.value)
def test_each_fault_is_found_with_its_targets_and_interval(faulty: list[Finding], fault: Fault) -> None:
    kind = FindingKind(fault.kind.value)
    found = [f for f in faulty if f.kind is kind and set(f.gpus) & targets(fault)]
    assert found, f"no {kind} finding on {targets(fault)}: {[f.summary for f in faulty]}"
    best = max(found, key=lambda f: iou(f, fault))
    assert set(best.gpus) == targets(fault)
    if kind is FindingKind.STRAGGLER:
        # Straggling steps are chosen by their nominal start, so they run on past the declared end.
        assert abs(best.start_s - fault.start_s) <= 60
    else:
        assert iou(best, fault) >= 0.8, best.summary
    assert 0.0 < best.confidence <= 1.0
    assert best.evidence.metrics and best.evidence.text


def test_no_finding_targets_a_healthy_gpu(faulty: list[Finding]) -> None:
    faulted = set().union(*(targets(f) for f in FAULTS))
    for finding in faulty:
        assert set(finding.gpus) <= faulted, finding.summary


def test_fault_free_job_gives_no_findings() -> None:
    diagnosis = diagnose(job_frame((), seed=11))
    assert diagnosis.findings == ()
    assert diagnosis.overview is not None


def test_comm_evidence_names_the_link_and_the_job_wide_stall(faulty: list[Finding]) -> None:
    comm = next(f for f in faulty if f.kind is FindingKind.COMM)
    assert comm.nodes == ("n2",)
    assert comm.evidence.numbers["ib_share_of_peers"] < 0.3
    assert comm.evidence.numbers["job_sm_active_during"] != comm.evidence.numbers["job_sm_active_outside"]


def test_memory_leak_projects_out_of_memory(faulty: list[Finding]) -> None:
    leak = next(f for f in faulty if f.kind is FindingKind.MEMORY_LEAK)
    assert leak.evidence.numbers["growth_mib_per_min"] > 0
    assert leak.evidence.numbers["oom_in_s"] > 0


def test_change_points_find_a_step() -> None:
    x = np.concatenate([np.zeros(100), np.ones(50) * 5, np.zeros(100)]) + 0.1 * np.sin(np.arange(250))
    assert change_points(x) == [100, 150]


def test_robust_z_and_clustering_single_out_the_odd_rank() -> None:
    values = np.vstack([np.full(10, 0.5)] * 7 + [np.full(10, 0.9)])
    z = robust_z(values, floor=0.01)
    assert np.all(z[-1] > 10) and np.all(np.abs(z[:-1]) < 1)
    feats = np.column_stack([values.mean(axis=1), np.arange(8) * 1e-4])
    assert k_medoids(feats).minority() == [7]


def test_envelope_keeps_a_one_sample_spike() -> None:
    x = np.zeros((1, 10_000))
    x[0, 4321] = 7.0
    _, lo, hi = envelope(x, 100)
    assert hi.max() == 7.0 and lo.max() == 0.0 and hi.shape == (1, 100)
