"""A strict FIFO cycle that repeats the last one is answered with its result (``scheduling.repeat``).

Each case runs the same cycles through a scheduler that skips repeat cycles and
one that never does, and compares everything a driver reads: the decisions, the
status of every pending job (``CycleResult.status_of``, which the simulator
writes into the job table) and the random stream left after the cycle. The
cases where something the walk reads changed (a job ended, a job that sorts
ahead arrived, a job arrived in another lane) must run the full cycle.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Callable

import numpy as np
import pytest

from builders import (
    CycleSeen,
    StatusLog,
    a_cluster,
    a_job,
    a_snapshot,
    assert_same_tables,
    profile,
    same_cycles,
)
from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model import ClusterSnapshot, Job, JobTable, NodeTable, TraceJob
from loadmaster.scheduling import Profile, Scheduler
from loadmaster.scheduling.repeat import skips_repeats
from loadmaster.sim import SimOptions, simulate

CLUSTER = a_cluster().nodes(2, gpus=8).build()
HEAD = a_job("head").tasks(2).gpus(8).submitted(10).build()
"""Two whole nodes: blocked while anything runs."""
BEHIND = a_job("behind").gpus(1).submitted(20).build()
"""Would fit at once, but strict FIFO keeps it behind the head."""


def _snapshot(*pending: Job, used: int = 4) -> ClusterSnapshot:
    """``used`` GPUs of n0 taken (new arrays and new pending objects each time, as a live driver's)."""
    return a_snapshot(CLUSTER).used("n0", used).pending(*pending).build()


Seen = CycleSeen


def _both(
    chosen: Profile, snapshots: list[tuple[ClusterSnapshot, float]]
) -> tuple[Scheduler, list[CycleSeen]]:
    """Run ``snapshots`` through a skipping scheduler and a full one; check each cycle agrees."""
    skipping, seen, rng = same_cycles(chosen, snapshots, off=("_repeats",))
    assert rng.random() == np.random.default_rng(3).random()  # no cycle drew at all
    return skipping, seen


@pytest.mark.parametrize("name", ["binpack", "fifo"])
def test_a_repeat_cycle_answers_as_a_full_cycle_with_new_arrivals_behind_the_head(name: str) -> None:
    chosen = load_profiles()[name]
    late = a_job("late").gpus(1).submitted(30).build()
    cycles = [(_snapshot(HEAD, BEHIND), 100.0), (_snapshot(HEAD, BEHIND, late), 200.0)]
    skipping, seen = _both(chosen, cycles)

    assert skipping.skipped_cycles == 1
    decisions, statuses = seen[1]
    assert decisions == ()
    reasons = {job_id: str(status) for job_id, status in statuses}
    assert "gang of 2 tasks" in reasons["head"]
    assert reasons["late"] == reasons["behind"]  # the arrival gets its lane's status
    assert "queued behind head in default (strict FIFO)" in reasons["late"]


def test_a_skipped_cycle_hands_out_its_own_mappings() -> None:
    chosen = load_profiles()["binpack"]
    scheduler = Scheduler(chosen)
    rng = np.random.default_rng(0)
    first = scheduler.cycle(_snapshot(HEAD, BEHIND), 0.0, rng)
    first.statuses.clear()  # type: ignore[attr-defined]  # a driver that empties what it was given
    again = scheduler.cycle(_snapshot(HEAD, BEHIND), 1.0, rng)
    assert scheduler.skipped_cycles == 1
    assert set(again.statuses) == {"head"}


@pytest.mark.parametrize(
    "second",
    [
        pytest.param(lambda: _snapshot(HEAD, BEHIND, used=0), id="a job ended: the head starts"),
        pytest.param(lambda: _snapshot(HEAD, BEHIND, used=3), id="a job ended: the head still waits"),
        pytest.param(
            lambda: _snapshot(a_job("early").gpus(1).submitted(5).build(), HEAD, BEHIND),
            id="a job that sorts ahead arrived",
        ),
        pytest.param(
            lambda: _snapshot(HEAD, BEHIND, a_job("other").gpus(1).submitted(30).queue("q2").build()),
            id="a job arrived in another lane",
        ),
        pytest.param(
            lambda: _snapshot(a_job("head").tasks(2).gpus(8).submitted(10).min_available(1).build(), BEHIND),
            id="the head is another job of the same id",
        ),
    ],
)
def test_a_cycle_after_a_change_is_run_in_full(second: Callable[[], ClusterSnapshot]) -> None:
    chosen = load_profiles()["binpack"]
    skipping, _ = _both(chosen, [(_snapshot(HEAD, BEHIND), 0.0), (second(), 1.0)])
    assert skipping.skipped_cycles == 0


def test_each_lane_keeps_its_head_and_a_skip_needs_every_head_unchanged() -> None:
    chosen = load_profiles()["binpack"]
    head2 = a_job("head2").tasks(2).gpus(8).submitted(15).queue("q2").build()
    behind2 = a_job("behind2").gpus(1).submitted(25).queue("q2").build()
    late2 = a_job("late2").gpus(1).submitted(40).queue("q2").build()
    cycles = [
        (_snapshot(HEAD, head2, BEHIND, behind2), 0.0),
        (_snapshot(HEAD, head2, BEHIND, behind2, late2), 1.0),  # repeat: arrivals behind both heads
        (_snapshot(HEAD, BEHIND, behind2, late2), 2.0),  # q2's head left (cancelled): full cycle, binds
    ]
    skipping, seen = _both(chosen, cycles)
    assert skipping.skipped_cycles == 1
    reasons = {job_id: str(status) for job_id, status in seen[1][1]}
    assert "queued behind head2 in q2 (strict FIFO)" in reasons["late2"]
    assert "queued behind head in default (strict FIFO)" in reasons["behind"]
    assert [d.job_id for d in seen[2][0]] == ["behind2", "late2"]


def test_only_profiles_whose_idle_cycle_reads_the_heads_alone_skip() -> None:
    profiles = load_profiles()
    assert all(skips_repeats(profiles[name]) for name in ("binpack", "fifo", "spread"))
    assert not any(skips_repeats(profiles[name]) for name in ("binpack-skip", "sds", "slurm", "kube-default"))
    assert skips_repeats(profile("fifo", "gang", "node-unschedulable", "binpack"))
    assert not skips_repeats(profile("fifo", "gang", "random"))  # scores draw
    assert not skips_repeats(profile("fifo", "gang", "binpack", args={"fifo": {"commit": True}}))
    assert not skips_repeats(profile("fifo", "gang", "binpack", strict=False))


def _in_two_lanes(jobs: list[TraceJob]) -> list[TraceJob]:
    """Every third job in a second queue: lanes block apart."""
    return [
        TraceJob(dataclasses.replace(t.job, queue="q2"), t.duration_s) if i % 3 == 0 else t
        for i, t in enumerate(jobs)
    ]


def _run(name: str, nodes: NodeTable, jobs: list[TraceJob], *, skip: bool) -> tuple[JobTable, StatusLog]:
    scheduler = StatusLog(load_profiles()[name], off=() if skip else ("_repeats",))
    return simulate(nodes, scheduler, jobs, SimOptions()).jobs, scheduler


@pytest.mark.parametrize("lanes", [1, 2])
@pytest.mark.parametrize("name", ["binpack", "fifo"])
def test_a_simulation_with_skips_is_the_same_run(name: str, lanes: int) -> None:
    cluster = load_cluster("lab")
    jobs = list(load_workload("lab", cluster, jobs=400, load=1.6).jobs)
    jobs = _in_two_lanes(jobs) if lanes == 2 else jobs
    fast, skipping = _run(name, cluster.nodes, jobs, skip=True)
    slow, full = _run(name, cluster.nodes, jobs, skip=False)
    assert skipping.skipped_cycles > 0
    assert skipping.cycles == full.cycles  # every cycle: the same binds, every job's status
    assert_same_tables(fast, slow)
