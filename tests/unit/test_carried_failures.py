"""A non-strict cycle starts with the failures of the last cycle that bound nothing, where they hold.

``scheduling.repeat.CarriedFailures``: each case runs the same cycles through a scheduler that
carries the failure memos over and one that never does, and compares everything a driver reads:
the decisions, every pending job's status (which the simulator writes into the job table) and the
random stream. The cases where something the failures depend on changed (free resources, a job
that sorts ahead of the last cycle's queue, a cycle that bound) must start afresh.
"""

from __future__ import annotations

from collections.abc import Callable

import pytest

from builders import (
    SHORTCUT_RUNS,
    CycleSeen,
    a_cluster,
    a_job,
    a_snapshot,
    assert_same_tables,
    lab_runs_with_and_without,
    profile,
    same_cycles,
)
from loadmaster.config import load_profiles
from loadmaster.model import ClusterSnapshot, Job
from loadmaster.scheduling import Profile, Scheduler
from loadmaster.scheduling import scheduler as scheduler_module
from loadmaster.scheduling.repeat import carries_failures

CLUSTER = a_cluster().nodes(2, gpus=8).build()
WIDE = a_job("wide").tasks(2).gpus(8).submitted(10).build()
"""Two whole nodes: fails while anything runs."""
BIG = a_job("big").gpus(6).submitted(20).build()
"""Fails on n1 once 4 GPUs of it are used, and on n0 (full)."""
BIGGER = a_job("bigger").gpus(7).submitted(30).build()
"""Asks more of everything than ``big``: fails as for a smaller request."""


def _snapshot(*pending: Job, used: int = 4) -> ClusterSnapshot:
    """n0 full, ``used`` GPUs of n1 taken (new arrays and pending objects each time, as a live driver's)."""
    return a_snapshot(CLUSTER).used("n0", 8).used("n1", used).pending(*pending).build()


Seen = CycleSeen


def _both(
    chosen: Profile, snapshots: list[tuple[ClusterSnapshot, float]]
) -> tuple[Scheduler, list[CycleSeen]]:
    """Run ``snapshots`` through a carrying scheduler and one that never carries; check each cycle agrees."""
    carrying, seen, _ = same_cycles(chosen, snapshots, off=("_carried",), seed=5)
    return carrying, seen


def _carried(scheduler: Scheduler) -> int:
    assert scheduler._carried is not None
    return scheduler._carried.carried


def test_an_arrival_on_the_same_full_cluster_starts_with_the_last_failures() -> None:
    chosen = load_profiles()["kube-default"]
    late = a_job("late").gpus(8).submitted(40).build()
    cycles = [(_snapshot(WIDE, BIG, BIGGER), 100.0), (_snapshot(WIDE, BIG, BIGGER, late), 200.0)]
    carrying, seen = _both(chosen, cycles)
    assert _carried(carrying) == 1
    reasons = dict(seen[1][1])
    assert "as for a smaller request" in reasons["bigger"]
    assert "as for a smaller request" in reasons["late"]  # found among the carried failures


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(lambda: _snapshot(WIDE, BIG, BIGGER, used=3), id="a job ended"),
        pytest.param(lambda: _snapshot(WIDE, BIG, BIGGER, used=5), id="a job started elsewhere"),
        pytest.param(
            lambda: _snapshot(a_job("early").gpus(7).submitted(5).build(), WIDE, BIG, BIGGER),
            id="a job that sorts ahead arrived",
        ),
        pytest.param(lambda: _snapshot(WIDE, BIGGER), id="a job of the last queue left"),
    ],
)
def test_a_cycle_after_a_change_starts_afresh(second: Callable[[], ClusterSnapshot]) -> None:
    chosen = load_profiles()["kube-default"]
    carrying, _ = _both(chosen, [(_snapshot(WIDE, BIG, BIGGER), 0.0), (second(), 1.0)])
    assert _carried(carrying) == 0


def test_a_cycle_that_bound_hands_nothing_on() -> None:
    chosen = load_profiles()["kube-default"]
    small = a_job("small").gpus(1).submitted(25).build()
    cycles = [(_snapshot(WIDE, BIG, small), 0.0), (_snapshot(WIDE, BIG), 1.0)]
    carrying, seen = _both(chosen, cycles)
    assert [d.job_id for d in seen[0][0]] == ["small"]
    assert _carried(carrying) == 0


def test_a_renumbering_of_shapes_between_two_cycles_hands_nothing_on(monkeypatch: pytest.MonkeyPatch) -> None:
    # Shape numbers are reset once a scheduler has seen too many (``Scheduler._trim``); the last
    # cycle's failures are keyed by the old numbers, which name other shapes after the reset.
    monkeypatch.setattr(scheduler_module, "_MEMO_LIMIT", 3)
    chosen = load_profiles()["kube-default"]
    first = a_job("first").gpus(3).submitted(1).build()
    small = a_job("small").gpus(3).submitted(30).build()
    cycles = [
        (_snapshot(first, used=0), 0.0),
        (_snapshot(BIG, BIGGER), 1.0),
        (_snapshot(BIG, BIGGER, small), 2.0),  # the numbering was reset before this cycle
    ]
    carrying, seen = _both(chosen, cycles)
    assert [d.job_id for d in seen[2][0]] == ["small"]  # 4 GPUs free on n1
    assert _carried(carrying) == 0


def test_a_long_queue_walked_by_verdict_classes_starts_with_the_last_failures() -> None:
    # From 1,024 waiting jobs the walk sorts the queue into verdict classes (allocate._walk_runs),
    # which the carried failures resolve before any visit.
    chosen = load_profiles()["kube-default"]
    queue = [a_job(f"q{i:04d}").gpus(5 + i % 4).submitted(10 + i).build() for i in range(1100)]
    late = a_job("late").gpus(2).submitted(5000).build()
    carrying, seen = _both(chosen, [(_snapshot(*queue), 0.0), (_snapshot(*queue, late), 1.0)])
    assert _carried(carrying) == 1
    assert [d.job_id for d in seen[1][0]] == ["late"]


def test_only_non_strict_profiles_whose_failures_depend_on_shape_and_state_carry_them() -> None:
    profiles = load_profiles()
    assert carries_failures(profiles["kube-default"]) and carries_failures(profiles["binpack-skip"])
    shipped = ("binpack", "fifo", "sds", "nsml", "slurm", "fair", "learned", "spread")
    assert not any(carries_failures(profiles[name]) for name in shipped)
    assert carries_failures(profile("fifo", "gang", "binpack", strict=False))
    assert not carries_failures(profile("fifo", "gang", "random", strict=False))  # scores draw
    # A filter that leaves a note for its cycle: its masks are made again each cycle.
    assert not carries_failures(profile("fifo", "cuda-compat", "spread", strict=False))


@pytest.mark.parametrize(("name", "load"), SHORTCUT_RUNS)
def test_a_simulation_that_carries_failures_is_the_same_run(name: str, load: float) -> None:
    (carried_table, carrying), (fresh_table, fresh) = lab_runs_with_and_without(name, load, ("_carried",))
    assert _carried(carrying) > 0
    assert carrying.cycles == fresh.cycles  # every cycle: the same binds, every job's status
    assert_same_tables(carried_table, fresh_table)
