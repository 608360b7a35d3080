"""Tiresias' LAS family (las, las-time, gittins, las-preempt) and its yarn placement."""

from __future__ import annotations

import dataclasses
import math

import numpy as np
import pytest

from builders import a_cluster, a_job, a_snapshot, bind_of, by_id, cycle, nodes_of, profile, trace
from loadmaster.errors import ConfigError
from loadmaster.model import ClusterSnapshot
from loadmaster.scheduling import CycleResult, Profile, Scheduler
from loadmaster.scheduling.framework import CycleContext
from loadmaster.scheduling.plugins.las import (
    Gittins,
    GittinsArgs,
    Las,
    LasArgs,
    LasCount,
    LasPreempt,
    LasTime,
)
from loadmaster.scheduling.plugins.yarn import Yarn
from loadmaster.scheduling.state import WorkingState
from loadmaster.sim import SimOptions, simulate


def _ctx(snapshot: ClusterSnapshot, now: float) -> CycleContext:
    return CycleContext(now, np.random.default_rng(0), snapshot, WorkingState.from_snapshot(snapshot))


def _with_service(snapshot: ClusterSnapshot, **service: tuple[float, float]) -> ClusterSnapshot:
    return dataclasses.replace(snapshot, service_s=service)


@pytest.mark.parametrize(
    ("gpus", "ran_s", "queue_2d", "queue_1d"),
    [
        (1, 0.0, 0, 0),
        (1, 3249.0, 0, 0),
        (1, 3250.0, 1, 1),  # the threshold itself demotes, as Tiresias' ``j_gt >= queue_limit``
        (4, 1000.0, 1, 0),  # 4,000 GPU-seconds: 2D demotes, 1D does not
        (8, 1000.0, 2, 0),
        (8, 7200.0, 2, 2),
    ],
)
def test_queue_by_attained_service(gpus: int, ran_s: float, queue_2d: int, queue_1d: int) -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    job = a_job("j").tasks(gpus).min_available(gpus).build()
    snapshot = _with_service(a_snapshot(cluster).pending(job).build(), j=(ran_s, 0.0, ran_s))
    assert Las().queue_of(job, snapshot, 10.0) == queue_2d
    assert LasTime().queue_of(job, snapshot, 10.0) == queue_1d


def test_running_part_counts_and_wake_is_the_next_demotion() -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    job = a_job("r").tasks(2).min_available(2)
    snapshot = _with_service(
        a_snapshot(cluster).running(job, "n0", since=100.0).build(), r=(1000.0, 100.0, 1000.0)
    )
    running = next(iter(snapshot.running))
    las = Las()
    # 1000 s before this run + 500 s of it, on 2 GPUs: 3,000 GPU-seconds, queue 0.
    assert las.attained(running.job, snapshot, 600.0, running) == 3000.0
    assert las.queue_of(running.job, snapshot, 600.0, running) == 0
    # 250 GPU-seconds more (125 s on 2 GPUs) reach 3,250; then 7,200 at 600 + 125 + 1975.
    assert las.wake_s(snapshot, 600.0) == 725.0
    assert las.wake_s(snapshot, 725.0) == 725.0 + (7200.0 - 3250.0) / 2
    assert las.wake_s(snapshot, 5000.0) == math.inf


def test_order_is_queue_then_submission() -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    old_long = a_job("a").submitted(0.0).build()
    new_short = a_job("b").submitted(50.0).build()
    snapshot = _with_service(
        a_snapshot(cluster).pending(old_long, new_short).build(), a=(5000.0, 40.0, 5000.0)
    )
    ctx = _ctx(snapshot, 60.0)
    las = Las()
    assert sorted([old_long, new_short], key=lambda j: las.order_key(j, ctx)) == [new_short, old_long]


@pytest.mark.parametrize(("now", "queue"), [(100.0, 1), (4040.0, 1), (4041.0, 0)])
def test_starvation_promotion(now: float, queue: int) -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    job = a_job("s").build()
    # Ran 4,000 s, stopped at 41 s: with knob 1 it goes back to queue 0 after waiting 4,000 s.
    snapshot = _with_service(a_snapshot(cluster).pending(job).build(), s=(4000.0, 41.0, 4000.0))
    las = Las(LasArgs(promote_knob=1.0))
    assert las.queue_of(job, snapshot, now) == queue
    if queue:
        assert las.wake_s(snapshot, now) == 4041.0


@pytest.mark.parametrize(
    ("args", "match"),
    [
        ({"thresholds": [7200, 3250]}, "strictly increasing"),
        ({"thresholds": [0]}, "positive"),
        ({"promote_knob": -1}, "promote_knob"),
    ],
)
def test_bad_args_name_the_field(args: dict[str, object], match: str) -> None:
    with pytest.raises(ConfigError, match=match):
        profile("las", args={"las": args})


def test_gittins_index_by_hand() -> None:
    # Samples 100, 200, 1000 GPU-seconds, quantum 150. At a=0: P(S<=150)=1/3;
    # E[min(S,150)] = (100 + 150 + 150)/3. At a=100 (two left): P = 1/2 (200 ends within 250),
    # E = (100 + 150)/2.
    g = Gittins(GittinsArgs(samples=(100.0, 200.0, 1000.0), quantum=150.0))
    assert g.index(0.0) == pytest.approx((1 / 3) / (400 / 3))
    assert g.index(100.0) == pytest.approx(0.5 / 125)
    assert g.index(1000.0) == 0.0


def test_gittins_needs_samples() -> None:
    with pytest.raises(ConfigError, match="samples"):
        profile("gittins")


def test_victims_are_lower_queues_lowest_and_latest_first() -> None:
    cluster = a_cluster().nodes(2, gpus=8).build()
    q2 = a_job("q2").submitted(0.0).tasks(8).min_available(8)
    q1_old = a_job("q1-old").submitted(1.0).tasks(4).min_available(4)
    q1_new = a_job("q1-new").submitted(2.0).tasks(4).min_available(4)
    waiting = a_job("w").submitted(3.0).tasks(8).min_available(8).build()
    snapshot = _with_service(
        a_snapshot(cluster)
        .running(q2, "n0", since=0.0)
        .running(q1_old, "n1", since=0.0)
        .running(q1_new, "n1", since=0.0)
        .pending(waiting)
        .build(),
        q2=(1000.0, 0.0, 1000.0),
    )
    # At t=1000: q2 has 8 x 2000 = 16,000 GPU-s (queue 2); q1-* 4 x 1000 = 4,000 (queue 1).
    ctx = _ctx(snapshot, 1000.0)
    victims = LasPreempt().select_victims(next(iter(snapshot.pending)), list(snapshot.running), ctx)
    assert [v.job.id for v in victims] == ["q2", "q1-new", "q1-old"]


@pytest.mark.parametrize(
    ("free", "tasks", "expected"),
    [
        ([4, 4, 4], 2, ["n0", "n0"]),  # fits one node: the first
        ([1, 3, 4], 3, ["n1"] * 3),  # the first node with room for all of it, not spread
        ([4, 2, 4], 6, ["n0"] * 4 + ["n1"] * 2),  # a whole free node, then the first with room for the rest
        ([3, 3, 3], 6, None),  # no wholly free node: waits though 9 GPUs are free
        ([1, 1, 1], 2, None),  # never spreads a small job
    ],
)
def test_yarn_placement(free: list[int], tasks: int, expected: list[str] | None) -> None:
    cluster = a_cluster().nodes(3, gpus=4).build()
    builder = a_snapshot(cluster)
    for i, gpus in enumerate(free):
        builder.used(f"n{i}", 4 - gpus)
    job = a_job("j").tasks(tasks).min_available(tasks).gpus(1)
    result = cycle(profile("fifo", "gang", "yarn"), builder.pending(job).build())
    bind = bind_of(result, "j")
    assert (nodes_of(cluster, bind) if bind else None) == expected
    assert Yarn.name == "yarn"


def test_simulated_las_preempts_and_resumes_without_losing_work() -> None:
    cluster = a_cluster().nodes(1, gpus=4).build()
    # A 4-GPU job runs alone from 0; at 1,000 s it has 4,000 GPU-seconds (queue 1), so a new
    # 4-GPU job (queue 0) preempts it; the first resumes when the second ends and finishes its rest.
    first = a_job("first").submitted(0.0).tasks(4).min_available(4).gpus(1)
    second = a_job("second").submitted(1000.0).tasks(4).min_available(4).gpus(1)
    jobs = [trace(first, 3000.0), trace(second, 500.0)]
    las = profile("las", "gang", "las-preempt")
    result = simulate(cluster, Scheduler(las), jobs, SimOptions(resume_preempted=True)).jobs
    assert by_id(result, "end_s") == {"first": 3500.0, "second": 1500.0}
    assert by_id(result, "preemptions") == {"first": 1, "second": 0}
    assert by_id(result, "lost_gpu_s") == {"first": 0.0, "second": 0.0}
    # Without resuming, the same preemption throws the first run away (the simulator's default).
    again = simulate(cluster, Scheduler(las), jobs, SimOptions()).jobs
    assert by_id(again, "end_s")["first"] == 4500.0
    assert by_id(again, "lost_gpu_s")["first"] == 4000.0


def test_demotion_wakes_the_simulator() -> None:
    cluster = a_cluster().nodes(1, gpus=1).build()
    # "long" runs from 0 and crosses 3,250 s at 3,250; "late" arrived at 3,000 in queue 0 behind
    # nothing preemptable until then: the wake at 3,250 lets it preempt then, not at long's end.
    long = a_job("long").submitted(0.0)
    late = a_job("late").submitted(3000.0)
    jobs = [trace(long, 10_000.0), trace(late, 100.0)]
    las = profile("las-time", "las-preempt", args={"las-preempt": {"gpu_time": False}})
    result = simulate(cluster, Scheduler(las), jobs, SimOptions(resume_preempted=True)).jobs
    assert by_id(result, "start_s")["late"] == 3250.0
    assert by_id(result, "end_s") == {"long": 10_100.0, "late": 3350.0}


def test_fifo_within_a_queue_is_by_entry() -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    # Both in queue 1 (>= 3,250 GPU-s). "early" was submitted first but crossed the threshold at
    # 2,000 + 3,250 - 0 = 5,250 s; "late" crossed at 1,000 + (3,250 - 3,000) = 1,250 s: it entered first.
    early = a_job("early").submitted(0.0).build()
    late = a_job("late").submitted(10.0).build()
    snapshot = _with_service(
        a_snapshot(cluster).pending(early, late).build(),
        early=(4000.0, 6000.0, 4000.0),
        late=(3500.0, 1500.0, 500.0),
    )
    ctx = _ctx(snapshot, 7000.0)
    las = Las()
    assert las.entered_s(early, 1, snapshot) == 5250.0
    assert las.entered_s(late, 1, snapshot) == 1250.0
    assert sorted([early, late], key=lambda j: las.order_key(j, ctx)) == [late, early]


def test_las_count_serves_by_priority_from_the_gpu_count() -> None:
    cluster = a_cluster().nodes(2, gpus=4).build()
    # 8 GPUs. Running: "old" (4 GPUs, queue 2 by 16,000 GPU-s). Waiting: "big" (6 GPUs, queue 0),
    # "small" (2 GPUs, queue 1 by 4,000 GPU-s). Priority: big (6 of 8), small (2 left), old (none left).
    old = a_job("old").submitted(0.0).tasks(4).min_available(4)
    big = a_job("big").submitted(5.0).tasks(6).min_available(6).build()
    small = a_job("small").submitted(1.0).tasks(2).min_available(2).build()
    built = a_snapshot(cluster).running(old, "n0", since=0.0).pending(big, small).build()
    snapshot = _with_service(built, old=(0.0, 0.0, 0.0), small=(2000.0, 50.0, 2000.0))
    ctx = _ctx(snapshot, 4000.0)
    counted = LasCount()
    assert counted.served(ctx) == {"big", "small"}
    assert counted.admit(next(p for p in snapshot.pending if p.job.id == "small"), ctx).ok
    # las-preempt then offers the job the plan does not serve, whatever its queue.
    victims = LasPreempt().select_victims(next(iter(snapshot.pending)), list(snapshot.running), ctx)
    assert [v.job.id for v in victims] == ["old"]


@pytest.mark.parametrize(("tiresias", "wake"), [(False, 1562.5), (True, 1750.0)])
def test_wake_exact_or_as_tiresias(tiresias: bool, wake: float) -> None:
    cluster = a_cluster().nodes(1, gpus=4).build()
    job = a_job("r").tasks(4).min_available(4)
    snapshot = a_snapshot(cluster).running(job, "n0", since=750.0).build()
    # At 1,000 s: 250 s x 4 GPUs = 1,000 GPU-s. Exact crossing of 3,250: 562.5 s later. Tiresias'
    # jump: (3,250 - 250 s) // 4 = 750 s later (seconds taken from GPU-seconds: late).
    assert Las(LasArgs(tiresias_wake=tiresias)).wake_s(snapshot, 1000.0) == wake


class _Times(Scheduler):
    def __init__(self, chosen: Profile) -> None:
        super().__init__(chosen)
        self.times: list[float] = []

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        self.times.append(now)
        return super().cycle(snapshot, now, rng)


def test_a_stale_wake_runs_no_cycle() -> None:
    cluster = a_cluster().nodes(1, gpus=1).build()
    # "a" runs 0-1,000 and asked for a wake at 3,250; it ended first, so 3,250 is stale. "b" runs from
    # 1,000 and is demoted at 4,250, when "c" (waiting since 2) preempts it; "b" resumes at 4,260.
    jobs = [
        trace(a_job("a").submitted(0.0), 1000.0),
        trace(a_job("b").submitted(1.0), 5000.0),
        trace(a_job("c").submitted(2.0), 10.0),
    ]
    scheduler = _Times(profile("las-time", "las-preempt", args={"las-preempt": {"gpu_time": False}}))
    result = simulate(cluster, scheduler, jobs, SimOptions(resume_preempted=True)).jobs
    assert 3250.0 not in scheduler.times and 4250.0 in scheduler.times
    assert by_id(result, "end_s") == {"a": 1000.0, "b": 6010.0, "c": 4260.0}
