"""The production policies (docs/design-principles.md) beyond FIFO and packing, each on a cluster by hand.

Backfill (EASY and conservative), multi-queue lanes, priority preemption,
rack-aware gang placement, quotas with reclaim, the explain trace, and every
shipped profile on the built-in workload. Unless a case says otherwise, a
job's time limit equals its duration, so reservations are exact.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import pytest

from builders import (
    SHARED_GPU_PROMISE,
    JobBuilder,
    RecordingScheduler,
    a_cluster,
    a_job,
    a_node,
    a_snapshot,
    bind_of,
    by_id,
    cycle,
    nodes_of,
    profile,
    trace,
)
from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model import ClusterSnapshot, NodeTable, RunningJob, TraceJob
from loadmaster.scheduling import Bind, Code, CycleResult, Preempt, Profile, Reserve, Scheduler
from loadmaster.scheduling.framework import CycleContext
from loadmaster.scheduling.plugins.backfill import Backfill, BackfillArgs
from loadmaster.scheduling.state import WorkingState
from loadmaster.sim import RunResult, SimOptions, simulate

FIFO = profile("fifo", "gang", "first-fit")
EASY = profile("fifo", "gang", "first-fit", "backfill", args={"backfill": {"mode": "easy"}})
CONSERVATIVE = profile("fifo", "gang", "first-fit", "backfill", args={"backfill": {"mode": "conservative"}})


def exact(job: JobBuilder, duration_s: float) -> TraceJob:
    """A job whose time limit is its true duration, so that every reservation is exact."""
    return trace(job.limit(duration_s), duration_s)


class ResultRecorder(RecordingScheduler):
    """Keeps the time and result of every cycle, to read statuses after a run."""

    def __init__(self, chosen: Profile) -> None:
        super().__init__(chosen)
        self.results: list[tuple[float, CycleResult]] = []

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        result = super().cycle(snapshot, now, rng)
        self.results.append((now, result))
        return result


def run(
    cluster: NodeTable, chosen: Profile, jobs: list[TraceJob], period_s: float | None = None
) -> tuple[RunResult, ResultRecorder]:
    scheduler = ResultRecorder(chosen)
    return simulate(cluster, scheduler, jobs, SimOptions(seed=0, period_s=period_s)), scheduler


def starts(result: RunResult) -> dict[str, float]:
    return by_id(result.jobs, "start_s")


def mean_wait(result: RunResult) -> float:
    return float(np.nanmean(result.jobs.wait_s))


# 1. EASY backfill: a later job starts now only if it ends before the head's reservation
#    or uses GPUs the reservation does not need.


@dataclass(frozen=True)
class EasyCase:
    head: JobBuilder
    """8 or 6 GPUs on two 4-GPU nodes: it needs n0, which r holds until t=100."""
    starts: dict[str, float]
    long_on: str
    """Where the long 2-GPU job runs."""


EASY_CASES = {
    # h needs all 8 GPUs at t=100: the long job may not take any of them and runs after h.
    "long job would use reserved GPUs": EasyCase(
        a_job("h").tasks(2).gpus(4), {"r": 0.0, "h": 100.0, "s": 2.0, "L": 150.0}, "n0"
    ),
    # h needs 4 GPUs of n0 and 2 of n1 at t=100 (n1's GPUs 0 and 1): GPUs 2 and 3 of n1 are spare.
    "long job uses GPUs the reservation does not need": EasyCase(
        a_job("h").tasks(6).gpus(1), {"r": 0.0, "h": 100.0, "s": 2.0, "L": 3.0}, "n1"
    ),
}


def easy_jobs(head: JobBuilder) -> list[TraceJob]:
    return [
        exact(a_job("r").gpus(4).submitted(0), 100),
        exact(head.submitted(1), 50),
        exact(a_job("s").gpus(2).submitted(2), 50),  # ends at 52, before h's reservation at 100
        exact(a_job("L").gpus(2).submitted(3), 500),  # would run past t=100
    ]


@pytest.mark.parametrize("case", EASY_CASES.values(), ids=EASY_CASES.keys())
def test_easy_backfill_starts_only_jobs_that_cannot_delay_the_head(case: EasyCase) -> None:
    result, scheduler = run(a_cluster().nodes(2, gpus=4).build(), EASY, easy_jobs(case.head))

    assert starts(result) == case.starts
    assert by_id(result.jobs, "node_names")["L"] == case.long_on
    estimated = by_id(result.jobs, "estimated_start_s")
    assert estimated["h"] == 100.0
    assert all(math.isnan(estimated[j]) for j in ("r", "s"))
    # L is promised a start only once h has started and L is the first job waiting; it keeps it.
    assert math.isnan(estimated["L"]) or estimated["L"] == case.starts["L"]
    # Every cycle in which h waited gave it a reservation from t=100, and its status says so.
    waited = [(t, r.status_of("h", "default")) for t, r in scheduler.results if 1 <= t < 100]
    assert [t for t, _ in waited] == [1, 2, 3, 52]
    for _, status in waited:
        assert status is not None
        assert status.code is Code.WAIT
        assert status.estimated_start_s == 100.0
        assert "reserved from t=100s on n0, n1" in status.reason


@pytest.mark.parametrize("case", EASY_CASES.values(), ids=EASY_CASES.keys())
def test_easy_backfill_in_one_cycle(case: EasyCase) -> None:
    cluster = a_cluster().nodes(2, gpus=4).build()
    snapshot = (
        a_snapshot(cluster)
        .running(a_job("r").gpus(4).limit(100), "n0", since=0)
        .pending(*(t.job for t in easy_jobs(case.head)[1:]))
        .build()
    )
    result = cycle(EASY, snapshot, now=3)

    reserves = [d for d in result.decisions if isinstance(d, Reserve)]
    assert reserves == [Reserve("h", 100, (0, 1))]
    head = result.status_of("h", "default")
    assert head is not None
    assert head.estimated_start_s == 100.0
    short = bind_of(result, "s")
    assert short is not None
    assert nodes_of(cluster, short) == ["n1"]
    long = bind_of(result, "L")
    assert (long is not None) == (case.starts["L"] == 3.0)
    if long is not None:
        assert [p.gpu_indices for p in long.placements] == [(2, 3)]


# 2. Conservative backfill: every waiting job holds a reservation, so no later job delays any of them.


@pytest.mark.parametrize(
    ("chosen", "expected", "estimated"),
    [
        # x backfills at t=10 (it ends at 260, before h1's reservation at 300) and holds 2 of the
        # 6 GPUs h2 needs at t=100; h2 then waits until h1 is done: 400.
        # Once h1 starts at 300, h2 is the first job waiting and reserves from 400.
        (EASY, {"r": 0.0, "r2": 0.0, "h1": 300.0, "h2": 400.0, "x": 10.0}, {"h1": 300.0, "h2": 400.0}),
        # h2 reserves t=100..200 on r's 4 GPUs and the 2 free ones, so x may not take them.
        (
            CONSERVATIVE,
            {"r": 0.0, "r2": 0.0, "h1": 300.0, "h2": 100.0, "x": 400.0},
            {"h1": 300.0, "h2": 100.0, "x": 400.0},
        ),
    ],
    ids=["easy", "conservative"],
)
def test_conservative_backfill_protects_the_second_job_in_line(
    chosen: Profile, expected: dict[str, float], estimated: dict[str, float]
) -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    jobs = [
        exact(a_job("r").gpus(4).submitted(0), 100),
        exact(a_job("r2").gpus(2).submitted(0), 300),
        exact(a_job("h1").gpus(8).submitted(1), 100),
        exact(a_job("h2").gpus(6).submitted(2), 100),
        exact(a_job("x").gpus(2).submitted(10), 250),
    ]
    result, _ = run(cluster, chosen, jobs)

    assert starts(result) == expected
    found = {j: v for j, v in by_id(result.jobs, "estimated_start_s").items() if not math.isnan(v)}
    assert found == estimated


def test_conservative_backfill_starts_a_job_on_the_shared_gpus_it_reserved() -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    jobs = [
        exact(a_job(name).tasks(tasks).gpus(gpus).submitted(submit), run_s)
        for name, tasks, gpus, submit, run_s in SHARED_GPU_PROMISE
    ]
    result, _ = run(cluster, CONSERVATIVE, jobs)

    promised = {j: v for j, v in by_id(result.jobs, "estimated_start_s").items() if not math.isnan(v)}
    assert promised["j18"] == 383.0
    assert {j: starts(result)[j] for j in promised} == promised


# 3. Backfill against strict FIFO on the same jobs: shorter waits, and the head starts no later.


@dataclass(frozen=True)
class BackfillGain:
    cluster: NodeTable
    jobs: list[TraceJob]
    head: str
    """The first job that has to wait."""
    fifo: dict[str, float]
    backfill: dict[str, float]


GAINS = {
    "small jobs behind an 8-GPU head": BackfillGain(
        a_cluster().nodes(1, gpus=8).build(),
        [
            exact(a_job("b").gpus(4).submitted(0), 100),
            exact(a_job("h").gpus(8).submitted(1), 100),
            exact(a_job("s1").submitted(2), 10),
            exact(a_job("s2").submitted(3), 10),
        ],
        "h",
        fifo={"b": 0.0, "h": 100.0, "s1": 200.0, "s2": 200.0},
        backfill={"b": 0.0, "h": 100.0, "s1": 2.0, "s2": 3.0},
    ),
    "a short and a long job behind a 2x4 head": BackfillGain(
        a_cluster().nodes(2, gpus=4).build(),
        easy_jobs(a_job("h").tasks(2).gpus(4)),
        "h",
        fifo={"r": 0.0, "h": 100.0, "s": 150.0, "L": 150.0},
        backfill={"r": 0.0, "h": 100.0, "s": 2.0, "L": 150.0},
    ),
    "a gang head, and small jobs that fit around it on a second node": BackfillGain(
        a_cluster().nodes(2, gpus=4).build(),
        [
            exact(a_job("b").gpus(3).submitted(0), 300),
            # From t=300, h reserves all of n0 and GPUs 0-1 of n1.
            exact(a_job("h").tasks(6).submitted(1), 100),
            exact(a_job("s1").submitted(2), 200),  # on n0, ends at 202
            exact(a_job("s2").submitted(3), 400),  # on n1's spare GPU 2
        ],
        "h",
        fifo={"b": 0.0, "h": 300.0, "s1": 300.0, "s2": 300.0},
        backfill={"b": 0.0, "h": 300.0, "s1": 2.0, "s2": 3.0},
    ),
}


@pytest.mark.parametrize("chosen", [EASY, CONSERVATIVE], ids=["easy", "conservative"])
@pytest.mark.parametrize("case", GAINS.values(), ids=GAINS.keys())
def test_backfill_cuts_the_mean_wait_and_never_delays_the_head(case: BackfillGain, chosen: Profile) -> None:
    fifo, _ = run(case.cluster, FIFO, case.jobs)
    backfilled, _ = run(case.cluster, chosen, case.jobs)

    assert starts(fifo) == case.fifo
    assert starts(backfilled) == case.backfill
    assert starts(backfilled)[case.head] == starts(fifo)[case.head]
    assert mean_wait(backfilled) < mean_wait(fifo)


# 4. Multi-queue: 1-GPU jobs no longer wait behind an 8-GPU head, and 8-GPU jobs keep their order.

MULTI_QUEUE = profile("fifo", "multi-queue", "gang", "binpack")


def multi_queue_jobs() -> list[TraceJob]:
    """n0 (8 GPUs) is busy until t=100; n1 (4 GPUs) is free for the 1-GPU jobs all along."""
    return [
        exact(a_job("busy").gpus(8).submitted(0), 100),
        exact(a_job("big").gpus(8).submitted(1), 100),
        exact(a_job("s1").submitted(2), 50),
        exact(a_job("s2").submitted(3), 50),
        exact(a_job("s3").submitted(4), 50),
        exact(a_job("big2").gpus(8).submitted(5), 10),
        exact(a_job("s4").submitted(6), 50),
    ]


@pytest.mark.parametrize(
    ("chosen", "expected"),
    [
        (
            profile("fifo", "gang", "binpack"),
            # s4 waits behind big2, which waits for big to end.
            {"busy": 0.0, "big": 100.0, "s1": 100.0, "s2": 100.0, "s3": 100.0, "big2": 200.0, "s4": 200.0},
        ),
        (
            MULTI_QUEUE,
            {"busy": 0.0, "big": 100.0, "s1": 2.0, "s2": 3.0, "s3": 4.0, "big2": 200.0, "s4": 6.0},
        ),
    ],
    ids=["strict-fifo", "multi-queue"],
)
def test_multi_queue_lets_small_jobs_pass_a_large_head(chosen: Profile, expected: dict[str, float]) -> None:
    cluster = a_cluster().node(a_node("n0").gpus(8)).node(a_node("n1").gpus(4)).build()
    result, _ = run(cluster, chosen, multi_queue_jobs())

    assert starts(result) == expected
    names = by_id(result.jobs, "node_names")
    assert {names[j] for j in ("s1", "s2", "s3", "s4")} == {"n1"}
    assert names["big"] == names["big2"] == "n0"


def test_multi_queue_blocks_each_lane_behind_its_own_head() -> None:
    cluster = a_cluster().node(a_node("n0").gpus(8)).node(a_node("n1").gpus(4)).build()
    snapshot = (
        a_snapshot(cluster)
        .running(a_job("busy").gpus(8).limit(100), "n0")
        .pending(*(t.job for t in multi_queue_jobs()[1:]))
        .build()
    )
    result = cycle(MULTI_QUEUE, snapshot, now=6)

    assert [b.job_id for b in result.binds] == ["s1", "s2", "s3", "s4"]
    assert MULTI_QUEUE.lane(a_job("big").gpus(8).build()) == "default/large"
    assert MULTI_QUEUE.lane(a_job("s").gpus(4).build()) == "default/small"
    head = result.status_of("big", "default/large")
    assert head is not None
    assert head.code is Code.UNSCHEDULABLE
    behind = result.status_of("big2", "default/large")
    assert behind is not None
    assert behind.code is Code.WAIT
    assert "queued behind big in default/large" in behind.reason


SMALL_STREAM_STARVES_LARGE = pytest.mark.xfail(
    strict=True,
    reason=(
        "multi-queue alone holds no reservation: size lanes stop small jobs from blocking behind a "
        "large head, but small jobs keep taking the GPUs the 8-GPU job waits for; with backfill "
        "(sds, slurm) its reservation holds them (documented in docs/plugins/queues-and-preemption.md)"
    ),
)


@pytest.mark.parametrize(
    "chosen",
    [
        pytest.param(EASY, id="fifo+gang+first-fit+backfill"),
        pytest.param(MULTI_QUEUE, id="fifo+multi-queue+gang+binpack", marks=SMALL_STREAM_STARVES_LARGE),
        pytest.param(load_profiles()["sds"], id="builtin:sds"),
        pytest.param(load_profiles()["slurm"], id="builtin:slurm"),
    ],
)
def test_a_stream_of_small_jobs_does_not_overtake_a_large_job_forever(chosen: Profile) -> None:
    # One 8-GPU node: busy holds 4 GPUs until t=100; big needs all 8 from t=1; a 1-GPU job of
    # 20 s arrives every 5 s until t=1497, so about 4 GPUs are always taken by small jobs.
    cluster = a_cluster().nodes(1, gpus=8).build()
    jobs = [exact(a_job("busy").gpus(4).submitted(0), 100), exact(a_job("big").gpus(8).submitted(1), 100)]
    jobs += [exact(a_job(f"s{i:03}").submitted(2 + 5 * i), 20) for i in range(300)]
    result, _ = run(cluster, chosen, jobs)

    assert starts(result)["big"] == 100.0


# 5. Preemption: a high-priority gang evicts the fewest lower-priority jobs, whole, and they restart.

PREEMPT = profile("priority", "fifo", "gang", "binpack", "priority-preempt")


def preempt_snapshot(started: dict[str, float], pending: JobBuilder) -> ClusterSnapshot:
    """n0 runs two 2-GPU low jobs a and b; n1 runs one 4-GPU low gang c (2 tasks of 2)."""
    return (
        a_snapshot(a_cluster().nodes(2, gpus=4).build())
        .running(a_job("a").gpus(2).priority("low"), "n0", since=started["a"])
        .running(a_job("b").gpus(2).priority("low"), "n0", since=started["b"])
        .running(a_job("c").tasks(2).gpus(2).priority("low"), "n1", since=started["c"])
        .pending(pending)
        .build()
    )


HIGH_GANG = a_job("hp").tasks(2).gpus(2).priority("high").submitted(900)

FEWEST = {
    "c is youngest": ({"a": 100.0, "b": 100.0, "c": 300.0}, ["c"], "n1"),
    # a ran only 500 s (min_runtime_s is 600): b alone is not enough, so c it is.
    "a is too young to evict": ({"a": 500.0, "b": 100.0, "c": 50.0}, ["c"], "n1"),
    # c ran only 500 s: a and b are the only way.
    "c is too young to evict": ({"a": 100.0, "b": 100.0, "c": 500.0}, ["a", "b"], "n0"),
    "a and b are youngest": pytest.param(
        {"a": 100.0, "b": 100.0, "c": 50.0},
        ["c"],
        "n1",
    ),
}


@pytest.mark.parametrize(("started", "victims", "lands_on"), FEWEST.values(), ids=FEWEST.keys())
def test_preemption_evicts_the_fewest_eligible_jobs(
    started: dict[str, float], victims: list[str], lands_on: str
) -> None:
    snapshot = preempt_snapshot(started, HIGH_GANG)
    result = cycle(PREEMPT, snapshot, now=1000)

    assert sorted(d.job_id for d in result.decisions if isinstance(d, Preempt)) == victims
    bind = bind_of(result, "hp")
    assert bind is not None
    assert bind.starts
    assert nodes_of(snapshot.nodes, bind) == [lands_on, lands_on]
    # Preemptions come before the bind that needs their GPUs.
    assert [type(d) for d in result.decisions] == [Preempt] * len(victims) + [Bind]


def test_no_preemption_of_jobs_younger_than_min_runtime() -> None:
    snapshot = preempt_snapshot({"a": 500.0, "b": 500.0, "c": 500.0}, HIGH_GANG)
    result = cycle(PREEMPT, snapshot, now=1000)

    assert result.decisions == ()
    status = result.status_of("hp", "default")
    assert status is not None
    assert status.code is Code.UNSCHEDULABLE


@dataclass(frozen=True)
class PreemptRun:
    arrives_s: float
    period_s: float | None
    evicted_s: float
    """When the low gang is evicted (it has run min_runtime_s = 600 by then)."""


@pytest.mark.parametrize(
    "case",
    [
        PreemptRun(arrives_s=700, period_s=None, evicted_s=700),
        # Arriving at t=300, hp waits until lo has run 600 s; a periodic cycle notices at t=600.
        PreemptRun(arrives_s=300, period_s=60, evicted_s=600),
    ],
    ids=["old-enough", "waits-for-min-runtime"],
)
def test_preempted_gang_is_evicted_whole_requeued_and_restarts(case: PreemptRun) -> None:
    cluster = a_cluster().nodes(2, gpus=4).build()
    jobs = [
        trace(a_job("lo").tasks(2).gpus(4).priority("low").submitted(0), 1000),
        trace(a_job("hp").tasks(2).gpus(2).priority("high").submitted(case.arrives_s), 100),
    ]
    result, scheduler = run(cluster, PREEMPT, jobs, period_s=case.period_s)

    hp_end = case.evicted_s + 100
    assert starts(result) == {"lo": hp_end, "hp": case.evicted_s}
    assert by_id(result.jobs, "end_s") == {"lo": hp_end + 1000, "hp": hp_end}
    assert by_id(result.jobs, "preemptions") == {"lo": 1, "hp": 0}
    assert by_id(result.jobs, "lost_gpu_s") == {"lo": 8 * case.evicted_s, "hp": 0.0}
    assert by_id(result.jobs, "node_names") == {"lo": "n0,n1", "hp": "n0"}
    # Both tasks of lo were released: after the eviction only hp's 4 GPUs are taken.
    timeline = result.timeline
    assert timeline.free_gpus[list(timeline.time_s).index(case.evicted_s)] == 4.0
    assert [t for t, r in scheduler.results if any(isinstance(d, Preempt) for d in r.decisions)] == [
        case.evicted_s
    ]


# 6. Topology: a multi-node job stays in one rack; a gang that fits one node is never split.


@dataclass(frozen=True)
class RackCase:
    racks: tuple[str, ...]
    """Rack of node n<i>; every node has 8 GPUs."""
    used: dict[str, int]
    job: JobBuilder
    nodes: tuple[str, ...] | None
    """The exact nodes where every placer agrees; None: any nodes of one rack."""
    spans: int = 1
    """Racks the job must use: one, unless no rack can hold it."""


RACKS = [
    pytest.param(
        RackCase(("r0", "r1", "r0", "r1"), {}, a_job("j").tasks(2).gpus(8), None),
        id="2x8 on two racks of two empty nodes (interleaved)",
    ),
    pytest.param(
        RackCase(("r0", "r1", "r0", "r1"), {"n0": 4}, a_job("j").tasks(2).gpus(8), ("n1", "n3")),
        id="2x8 skips the rack that has one free node",
    ),
    pytest.param(
        RackCase(("r0", "r1", "r2", "r1"), {}, a_job("j").tasks(2).gpus(8), ("n1", "n3")),
        id="2x8 goes to the only rack that holds it whole",
    ),
    pytest.param(
        RackCase(("r0", "r1"), {}, a_job("j").tasks(2).gpus(8), ("n0", "n1"), spans=2),
        id="2x8 on two racks of one node each spans both",
    ),
    pytest.param(
        RackCase(
            ("r0", "r0", "r1", "r1"), {"n0": 6, "n1": 6, "n2": 4, "n3": 7}, a_job("j").tasks(4), ("n2",)
        ),
        id="4x1 on the one node that holds it, not spread over a rack",
    ),
    pytest.param(
        RackCase(("r0", "r1", "r0", "r1"), {"n0": 7, "n1": 6, "n2": 5}, a_job("j").tasks(4), ("n3",)),
        id="4x1 on the empty node rather than over three partly used ones",
    ),
]


@pytest.mark.parametrize("placer", ["first-fit", "binpack", "spread", "random"])
@pytest.mark.parametrize("case", RACKS)
def test_gang_placement_stays_in_one_rack(case: RackCase, placer: str) -> None:
    builder = a_cluster()
    for i, rack in enumerate(case.racks):
        builder = builder.node(a_node(f"n{i}").gpus(8).rack(rack))
    cluster = builder.build()
    snapshot = a_snapshot(cluster)
    for node, gpus in case.used.items():
        snapshot.used(node, gpus)
    built = snapshot.pending(case.job).build()
    for seed in range(5):  # random placement must hold for every seed
        result = cycle(profile("fifo", "gang", placer), built, seed=seed)

        bind = bind_of(result, "j")
        assert bind is not None
        assert bind.starts
        used = Counter(nodes_of(cluster, bind))
        assert len(used) == math.ceil(case.job.build().gpus / 8)
        assert len({cluster.nodes[p.node].rack for p in bind.placements}) == case.spans
        if case.nodes is not None:
            assert tuple(sorted(used)) == case.nodes


# 7. Quotas with reclaim, through the shipped `fair` profile (lab-a: nominal 48, may borrow 32).


@pytest.mark.parametrize(
    ("b_arrives", "reclaimed_at"),
    [(2000.0, 2000.0), (1000.0, 1800.0)],
    ids=["after-min-runtime", "waits-for-min-runtime"],
)
def test_fair_profile_reclaims_borrowed_gpus_by_preemption(b_arrives: float, reclaimed_at: float) -> None:
    # 12 nodes x 8 = 96 GPUs. lab-a runs 10 jobs of 8 GPUs: 48 of its own and 32 borrowed from
    # the idle labs; its 11th job waits on quota although 16 GPUs are free. lab-b then asks for
    # 24 GPUs, within its nominal of 40: 16 are free, the last 8 are reclaimed from lab-a's
    # youngest job (a00 by id, all started at 0) once it has run min_runtime_s (1800 s; a
    # periodic cycle every 600 s notices).
    fair = load_profiles()["fair"]
    cluster = a_cluster().nodes(12, gpus=8).build()
    lab_a = [trace(a_job(f"a{i:02}").gpus(8).user("ua", "lab-a"), 10_000) for i in range(11)]
    lab_b = [trace(a_job(f"b{i}").gpus(8).user("ub", "lab-b").submitted(b_arrives), 1000) for i in range(3)]
    result, scheduler = run(cluster, fair, [*lab_a, *lab_b], period_s=600)

    start = starts(result)
    assert {j: start[j] for j in ("b0", "b1", "b2")} == {"b0": b_arrives, "b1": b_arrives, "b2": reclaimed_at}
    assert all(start[f"a{i:02}"] == 0.0 for i in range(1, 10))
    # a00 restarts when lab-b's first jobs end; a10 still waits on quota until an a-job ends.
    assert start["a00"] == b_arrives + 1000
    assert start["a10"] == 10_000.0
    preempted = {j: n for j, n in by_id(result.jobs, "preemptions").items() if n}
    assert preempted == {"a00": 1}
    assert by_id(result.jobs, "lost_gpu_s")["a00"] == 8 * reclaimed_at
    first = next(r for t, r in scheduler.results if t == 0)
    status = first.status_of("a10", "default")
    assert status is not None
    assert "quota lab-a: uses 80 of nominal 48 GPUs, needs 8; may borrow 0 more" in status.reason


# 8. Explain: a job's story, each change of status with its time.


@pytest.mark.parametrize(
    ("chosen", "waiting"),
    [
        (FIFO, "waiting: [fit] unschedulable: gpu: want 4 on one node, largest free block is 0 on n0"),
        (EASY, "waiting: [backfill] wait: reserved from t=100s on n0; now: gpu: want 4 on one node, "),
    ],
    ids=["fifo", "easy-backfill"],
)
def test_explain_tells_the_story_of_a_job(chosen: Profile, waiting: str) -> None:
    cluster = a_cluster().nodes(1, gpus=4).build()
    jobs = [exact(a_job("b").gpus(4).submitted(0), 100), exact(a_job("j").gpus(4).submitted(10), 50)]
    result = simulate(cluster, Scheduler(chosen), jobs, SimOptions(explain=frozenset({"j"})))

    story = result.explanations["j"]
    assert [t for t, _ in story] == [10.0, 10.0, 100.0, 150.0]
    assert [text.split(":")[0] for _, text in story] == ["submitted", "waiting", "started on n0", "finished"]
    assert story[1][1].startswith(waiting)
    assert set(result.explanations) == {"j"}


# 9. Every shipped profile runs the built-in lab workload to the end.


@pytest.fixture(scope="module")
def lab() -> tuple[NodeTable, list[TraceJob]]:
    cluster = load_cluster("lab")
    return cluster.nodes, load_workload("lab", cluster, jobs=300).jobs


@pytest.mark.parametrize("name", load_profiles())
def test_every_shipped_profile_runs_the_lab_workload(
    name: str, lab: tuple[NodeTable, list[TraceJob]]
) -> None:
    nodes, jobs = lab
    result = simulate(nodes, Scheduler(load_profiles()[name]), jobs, SimOptions(seed=0))

    table = result.jobs
    assert len(table) == 300
    ended = ~np.isnan(table.end_s)
    reasons = np.array([bool(str(r)) for r in table.reason])
    assert np.all(ended | reasons), (
        f"{name}: jobs neither ended nor say why: {table.job_id[~(ended | reasons)]}"
    )
    assert np.all(table.end_s[ended] == table.start_s[ended] + table.duration_s[ended])
    assert np.all(table.start_s[ended] >= table.submit_s[ended])


# Regressions: bugs this suite found, each kept as a scenario (docs/design-principles.md, habit 8).


@pytest.mark.parametrize("chosen", [EASY, CONSERVATIVE], ids=["easy", "conservative"])
def test_backfill_does_not_let_a_later_job_delay_the_head_when_the_job_ahead_starts(
    chosen: Profile,
) -> None:
    # r1 and r2 end at t=100; P takes 6 of the 8 GPUs then; H needs all 8 when P ends at 200;
    # Q would hold 2 GPUs until t=1100 if it started at t=100.
    cluster = a_cluster().nodes(1, gpus=8).build()
    jobs = [
        exact(a_job("r1").gpus(6).submitted(0), 100),
        exact(a_job("r2").gpus(2).submitted(0), 100),
        exact(a_job("P").gpus(6).submitted(1), 100),
        exact(a_job("H").gpus(8).submitted(2), 100),
        exact(a_job("Q").gpus(2).submitted(3), 1000),
    ]
    fifo, _ = run(cluster, FIFO, jobs)
    backfilled, _ = run(cluster, chosen, jobs)

    assert starts(fifo) == {"r1": 0.0, "r2": 0.0, "P": 100.0, "H": 200.0, "Q": 300.0}
    assert starts(backfilled)["H"] == 200.0


@pytest.mark.parametrize(
    ("early_ends", "expected"),
    [
        # Planned on r's limit, H's reservation is at t=3000, so Q (ends at 2002) backfills now and
        # H, which could have started when r really ended at t=1000, waits for Q.
        (None, {"r": 0.0, "H": 2002.0, "Q": 2.0}),
        # r planned to end at 3000 / 3 = 1000: Q would still hold GPUs H needs then, so it waits.
        (3.0, {"r": 0.0, "H": 1000.0, "Q": 1100.0}),
    ],
    ids=["on-limits", "early-ends-3"],
)
def test_early_ends_keep_a_wide_reservation_from_being_overtaken(
    early_ends: float | None, expected: dict[str, float]
) -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    chosen = profile("fifo", "gang", "first-fit", "backfill", args={"backfill": {"early_ends": early_ends}})
    jobs = [
        trace(a_job("r").gpus(4).limit(3000).submitted(0), 1000),
        exact(a_job("H").gpus(8).submitted(1), 100),
        exact(a_job("Q").gpus(4).submitted(2), 2000),
    ]
    result, _ = run(cluster, chosen, jobs)

    assert starts(result) == expected


def planned_run_s(backfill: Backfill, running: RunningJob, now: float) -> float:
    """What ``backfill`` expects ``running`` to run in all, asked at ``now``."""
    snapshot = a_snapshot(a_cluster().nodes(1, gpus=8).build()).build()
    ctx = CycleContext(now, np.random.default_rng(0), snapshot, WorkingState.from_snapshot(snapshot))
    return backfill.running_estimate_s(running, ctx)


def test_early_ends_never_plan_past_the_estimate_or_within_minutes_of_now() -> None:
    running = RunningJob(a_job("r").gpus(1).limit(1200).build(), (), 0.0)
    early = Backfill(BackfillArgs(early_ends=3.0))
    planned = {now: planned_run_s(early, running, now) for now in (0.0, 200.0, 700.0, 1000.0)}

    # limit / 3; elapsed + 5 min; 1.5 x elapsed; capped by the limit.
    assert planned == {0.0: 400.0, 200.0: 500.0, 700.0: 1050.0, 1000.0: 1200.0}
    assert planned_run_s(Backfill(), running, 0.0) == 1200.0
    with pytest.raises(ValueError, match="early_ends must be >= 1"):
        BackfillArgs(early_ends=0.5)


def test_a_job_kept_off_reserved_gpus_is_told_so() -> None:
    cluster = a_cluster().nodes(2, gpus=4).build()
    snapshot = (
        a_snapshot(cluster)
        .running(a_job("r").gpus(4).limit(100), "n0", since=0)
        .pending(*(t.job for t in easy_jobs(a_job("h").tasks(2).gpus(4))[1:]))
        .build()
    )
    result = cycle(EASY, snapshot, now=3)

    assert bind_of(result, "L") is None
    status = result.status_of("L", "default")
    assert status is not None
    assert "reserv" in status.reason


def test_no_eviction_for_a_job_that_already_fits() -> None:
    # n0: a long-running low-priority job (evictable); n1: 2 of 4 GPUs held by a high-priority job.
    # H (2 x 4 GPUs) cannot start even if the low job goes, so nothing may be evicted for it; J fits
    # n1's 2 free GPUs as it is (it only waits behind H in strict FIFO), so evicting for J would
    # throw away work for nothing. Found by the policy table: the shipped `fair` profile evicted
    # training jobs to start interactive jobs that already had room.
    cluster = a_cluster().nodes(2, gpus=4).build()
    snapshot = (
        a_snapshot(cluster)
        .running(a_job("low").gpus(4).priority("low").limit(100_000), "n0")
        .running(a_job("keep").gpus(2).priority("high").limit(100_000), "n1")
        .pending(
            a_job("H").tasks(2).gpus(4).priority("high").submitted(1),
            a_job("J").gpus(1).priority("high").submitted(2),
        )
        .build()
    )
    chosen = profile("priority", "fifo", "gang", "binpack", "priority-preempt")
    result = Scheduler(chosen).cycle(snapshot, 10_000.0, np.random.default_rng(0))

    assert not [d for d in result.decisions if isinstance(d, Preempt)]
