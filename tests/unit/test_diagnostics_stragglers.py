"""Stragglers: a rank far slower than all others is reported alone; the what-if estimate (steps at the
peers' pace) against the generator's own step schedule; iteration-time what-if; too little telemetry
is said, not reported as missing data."""

from __future__ import annotations

import numpy as np
import pytest

from loadmaster.diagnostics import FindingKind, IterationTimes, diagnose, frame_from_tables, stragglers
from loadmaster.diagnostics.detectors import DetectorConfig, detect_missing, detect_straggler, group_spans
from loadmaster.diagnostics.frame import JobFrame
from loadmaster.diagnostics.iterations import slow_group, whatif_step_time_share
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
SEVERE = GpuRef("n1", 3)
MILD = (GpuRef("n1", 4), GpuRef("n2", 0))


def generated(faults: tuple[Fault, ...], start_s: float = 0.0) -> tuple[SyntheticTelemetry, JobFrame]:
    specs = tuple(NodeSpec(f"n{i}", 8) for i in range(4))
    gpus = tuple(GpuRef(n.hostname, g) for n in specs for g in range(8))
    plan = TelemetryPlan(specs, (PlannedJob("j", "ann", gpus, start_s, DURATION_S + 1),), faults, seed=3)
    gen = SyntheticTelemetry(plan)
    frame = frame_from_tables(
        gen.series(DURATION_S - 1), [gen.samples(start_s, DURATION_S)], job="j", step_s=1.0, start_s=0.0,
        end_s=DURATION_S,
    )  # fmt: skip
    return gen, frame


def true_step_time_share(gen: SyntheticTelemetry, row: int) -> float:
    """From the generator's schedule: the steps ``row`` slowed, at the other ranks' slowest compute."""
    schedule = gen.schedule(gen.jobs[0], DURATION_S)
    others = np.delete(schedule.compute, row, axis=0).max(axis=0)
    slowed = schedule.compute[row] > others + 1e-9
    base = schedule.stall + schedule.comm
    return float((base + others)[slowed].sum() / (base + schedule.slowest)[slowed].sum())


def test_group_spans_keeps_a_far_stronger_span_apart() -> None:
    spans = [(0, 10, 100, 0.22), (1, 12, 98, 0.06), (2, 11, 101, 0.07)]
    assert [[s[0] for s in g] for g in group_spans(spans)] == [[0, 2, 1]]
    assert [[s[0] for s in g] for g in group_spans(spans, max_ratio=2.0)] == [[0], [2, 1]]


def test_a_severe_straggler_is_reported_alone_beside_mildly_slow_ranks() -> None:
    faults = (
        Fault(FaultKind.STRAGGLER, 300, 900, gpus=(SEVERE,), magnitude=3.0),
        Fault(FaultKind.STRAGGLER, 300, 900, gpus=MILD, magnitude=1.4),
    )
    gen, frame = generated(faults)
    found = detect_straggler(frame, DetectorConfig())
    assert [f.gpus for f in found] == [("n1/3",), ("n1/4", "n2/0")]
    severe, mild = found
    assert severe.evidence.numbers["excess"] > 2 * mild.evidence.numbers["excess"]
    # The mild ranks hold no step: the severe one does; at the peers' pace it would leave the mild in charge.
    assert mild.evidence.numbers["whatif_step_time_share"] == 1.0
    row = [g.name for g in frame.gpus].index("n1/3")
    assert severe.evidence.numbers["whatif_step_time_share"] == pytest.approx(
        true_step_time_share(gen, row), abs=0.06
    )
    assert "less time" in severe.evidence.text


@pytest.mark.parametrize("magnitude", [1.3, 1.6, 2.5])
def test_the_what_if_estimate_matches_the_generated_steps(magnitude: float) -> None:
    gen, frame = generated((Fault(FaultKind.STRAGGLER, 300, 900, gpus=(SEVERE,), magnitude=magnitude),))
    (found,) = detect_straggler(frame, DetectorConfig())
    row = [g.name for g in frame.gpus].index("n1/3")
    share = found.evidence.numbers["whatif_step_time_share"]
    assert share == pytest.approx(true_step_time_share(gen, row), abs=0.06)
    assert found.evidence.numbers["whatif_speedup"] == pytest.approx(1 / share)


def iterations(times: list[list[float]]) -> IterationTimes:
    matrix = np.array(times, dtype=np.float64)
    ranks = tuple(f"rank {i}" for i in range(matrix.shape[0]))
    return IterationTimes("j", ranks, np.arange(1, matrix.shape[1] + 1, dtype=np.float64), matrix)


def test_iteration_what_if_is_the_step_maximum_with_the_straggler_at_the_peers_median() -> None:
    it = iterations([[1.0, 1.0], [1.1, 1.2], [0.9, 1.0], [3.0, 2.0]])
    # Steps wait for the slowest: 3.0 + 2.0 today; rank 3 at the others' median (1.0, 1.0): 1.1 + 1.2.
    assert whatif_step_time_share(it, [3], 0, 1) == pytest.approx(2.3 / 5.0)


def test_iteration_findings_count_iterations_and_give_units() -> None:
    rng = np.random.default_rng(0)
    times = 1.0 + 0.01 * rng.standard_normal((8, 200))
    times[5, 80:120] = 2.0  # rank 5 straggles for 40 iterations
    it = iterations(times.tolist())
    (found,) = stragglers(it)
    assert found.gpus == ("rank 5",) and found.axis == "iteration"
    assert (found.start_s, found.end_s) == (81.0, 120.0)
    assert "in iterations 81-120" in found.summary and " s to " not in found.summary
    assert "by 0.999 s (median)" in found.evidence.text
    assert found.evidence.numbers["whatif_step_time_share"] == pytest.approx(0.5, abs=0.02)
    assert found.to_dict()["axis"] == "iteration"
    times[[1, 2], :] *= 3.0
    group = slow_group(iterations(times.tolist()))
    assert group is not None and set(group.gpus) == {"rank 1", "rank 2"}
    assert "against" in group.evidence.text and " s;" in group.evidence.text


def test_time_before_the_jobs_telemetry_began_is_not_missing_data() -> None:
    _, frame = generated((), start_s=1500.0)  # the window reaches 1,500 s back before the job's first sample
    assert detect_missing(frame, DetectorConfig()) == []
    diagnosis = diagnose(frame, with_overview=False)
    assert all(f.kind is not FindingKind.MISSING for f in diagnosis.findings)
    assert diagnosis.note is not None and "begins at 1500 s, 1500 s into the window" in diagnosis.note


def test_too_little_telemetry_gives_no_verdict_and_says_so() -> None:
    _, frame = generated((Fault(FaultKind.XID, 0, 3000, gpus=(SEVERE,)),), start_s=DURATION_S - 60.0)
    diagnosis = diagnose(frame)
    assert diagnosis.findings == () and diagnosis.telemetry_s == 60.0
    assert diagnosis.note is not None and diagnosis.note.startswith(
        "too little telemetry for a verdict: 60 s"
    )
    assert diagnosis.to_dict()["note"] == diagnosis.note
