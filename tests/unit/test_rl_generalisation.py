"""benchmarks/rl_generalisation.py: its core runs on a smoke configuration and gives every field.

The benchmark itself takes minutes; here each kind of task runs on a few dozen jobs.
"""

from __future__ import annotations

import math
from pathlib import Path
from types import ModuleType

import pytest

from builders import load_benchmark


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("rl_generalisation")


@pytest.fixture(scope="module")
def measured(bench: ModuleType) -> list[object]:
    return [
        *bench.lab_task(("heldout-wide", 1.1, 10000, 48, "lab")),
        *bench.swf_task(("lublin-aaroh@1.1", 1981, 48)),
        *bench.swf_task(("lublin-1 (in-family)", 1981, 48)),
    ]


def test_every_task_runs_every_policy_in_both_modes(bench: ModuleType, measured: list[object]) -> None:
    per_task = 2 * len(bench.POLICIES)
    assert len(measured) == 3 * per_task
    assert {(m.workload, m.backfill, m.policy) for m in measured} == {  # type: ignore[attr-defined]
        (w, b, p)
        for w in ("heldout-wide@1.1", "lublin-aaroh@1.1", "lublin-1 (in-family)")
        for b in (False, True)
        for p in bench.POLICIES
    }
    assert all(m.bsld >= 1 for m in measured)  # type: ignore[attr-defined]


def test_clairvoyant_sjf_is_sjf_where_limits_are_run_times(measured: list[object]) -> None:
    """Lublin data requests no time (-1), so the protocol's limits are the run times already."""
    swf = [m for m in measured if m.workload.startswith("lublin")]  # type: ignore[attr-defined]
    by = {(m.workload, m.backfill, m.policy): m.bsld for m in swf}  # type: ignore[attr-defined]
    for (workload, backfill, policy), value in by.items():
        if policy == "clairvoyant:run":
            assert value == by[workload, backfill, "SJF"]


def test_rows_and_targets_have_their_fields(
    bench: ModuleType, measured: list[object], tmp_path: Path
) -> None:
    rows = bench.summarise(measured)
    assert len(rows) == 6
    for row in rows:
        assert {
            "workload",
            "what",
            "backfill",
            "checkpoint",
            "counted",
            "units",
            "mean_bounded_slowdown",
            "best_heuristic",
            "advantage",
            "advantage_ci95",
            "advantage_per_unit",
            "within_2pct",
            "best_clairvoyant",
            "headroom",
            "headroom_share",
        } <= set(row)
        means = row["mean_bounded_slowdown"]
        assert row["best_heuristic"] == min(bench.HEURISTICS, key=means.__getitem__)
        assert math.isclose(row["advantage"], 1 - means["learned"] / means[row["best_heuristic"]])
        assert row["within_2pct"] == (row["advantage"] >= -0.02)
    ckpt = {(r["workload"], r["backfill"]): r["checkpoint"] for r in rows}
    assert ckpt["heldout-wide@1.1", False] == ckpt["heldout-wide@1.1", True] == "lab"
    assert ckpt["lublin-aaroh@1.1", False] == "lublin"
    assert ckpt["lublin-aaroh@1.1", True] == "lublin-backfill"
    assert [r["counted"] for r in rows if r["workload"] == "lublin-1 (in-family)"] == [False, False]

    checks = bench.targets(rows)
    assert set(checks) == {
        f"{name}@{mode}"
        for name in ("never_2pct_behind", "ahead_on_average")
        for mode in ("no-backfill", "backfill")
    }
    for check in checks.values():
        assert {"target", "measured", "pass"} <= set(check)
        assert isinstance(check["pass"], bool)
    assert (
        "of 2 within" in checks["never_2pct_behind@backfill"]["measured"]
    )  # the in-family row is not counted

    figure = tmp_path / "plot.png"
    bench.plot(rows, figure)
    assert figure.stat().st_size > 0


def test_arrivals_compressed_to_the_asked_load(bench: ModuleType) -> None:
    jobs = bench._trace("lublin-aaroh.swf")[1981:2100]
    scaled = bench.at_load(jobs, 1.1)
    submit = [t.job.submit_s for t in scaled]
    work = math.fsum(t.duration_s * t.job.request.gpu_milli / 1000 for t in scaled)
    assert math.isclose(work / ((max(submit) - min(submit)) * 256), 1.1)
    assert [t.duration_s for t in scaled] == [t.duration_s for t in jobs]
    assert submit == sorted(submit)


def test_the_lab_rows_name_the_checkpoint_asked_for(bench: ModuleType, measured: list[object]) -> None:
    rows = bench.summarise(measured, "lab-family")
    ckpt = {(r["workload"], r["backfill"]): r["checkpoint"] for r in rows}
    assert ckpt["heldout-wide@1.1", True] == "lab-family"
    assert ckpt["lublin-aaroh@1.1", True] == "lublin-backfill"
    profile = bench.lab_profiles(True, "lab-family")["learned"]
    assert profile.order[0].policy.meta["train"]["family"] == "lab"  # type: ignore[attr-defined]


def test_a_lab_task_runs_the_modes_asked_for_with_their_checkpoints(
    bench: ModuleType, measured: list[object], tmp_path: Path
) -> None:
    """``--modes backfill`` with ``--lab-backfill-checkpoint``: the backfill rows only, with that
    checkpoint; every other policy measures as when both modes run."""
    one = bench.lab_task(("heldout-wide", 1.1, 10000, 48, ((True, "lab-family"),)))
    assert {(m.backfill, m.policy) for m in one} == {(True, p) for p in bench.POLICIES}
    both = {(m.backfill, m.policy): m.bsld for m in measured if m.workload == "heldout-wide@1.1"}  # type: ignore[attr-defined]
    assert all(m.bsld == both[True, m.policy] for m in one if m.policy != "learned")
    rows = bench.summarise(one, "lab", "lab-family")
    assert [(r["backfill"], r["checkpoint"]) for r in rows] == [(True, "lab-family")]
    assert set(bench.targets(rows)) == {"never_2pct_behind@backfill", "ahead_on_average@backfill"}
    assert bench.checkpoint("heldout-wide@1.1", False, "lab", "lab-family") == "lab"
    assert bench.checkpoint("lublin-aaroh@1.1", True, "lab", "lab-family") == "lublin-backfill"
    figure = tmp_path / "one-mode.png"
    bench.plot(rows, figure)
    assert figure.stat().st_size > 0
