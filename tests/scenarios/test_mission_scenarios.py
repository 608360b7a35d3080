"""The scheduling behaviours docs/design-principles.md asks for, each on a small cluster computed by hand.

Every case names its cluster, its jobs and the exact placements or start
times the mission implies. Cycle-level cases call ``Scheduler.cycle`` on one
snapshot; run-level cases drive the simulator and read the job table.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import pytest

from builders import (
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
from loadmaster.model import NodeTable, TraceJob
from loadmaster.scheduling import Code, Scheduler
from loadmaster.sim import RunResult, SimOptions, simulate

PLACERS = ("first-fit", "binpack", "spread", "random")
"""Every built-in placement (score) plugin."""


def run(
    cluster: NodeTable, plugins: tuple[str, ...], jobs: list[TraceJob], strict: bool = True
) -> tuple[RunResult, RecordingScheduler]:
    scheduler = RecordingScheduler(profile(*plugins, strict=strict))
    return simulate(cluster, scheduler, jobs, SimOptions(seed=0)), scheduler


# 1. Gang scheduling: all workers start together or none do.

THREE_FREE = {
    "one node, 3 of 4 GPUs free": (a_cluster().nodes(1, gpus=4), {"n0": 1}),
    "two nodes, 2 + 1 GPUs free": (a_cluster().nodes(2, gpus=2), {"n1": 1}),
}


@pytest.mark.parametrize("layout", THREE_FREE.values(), ids=THREE_FREE.keys())
def test_gang_of_four_is_not_bound_on_three_free_gpus(layout: tuple) -> None:
    builder, used = layout
    snapshot = a_snapshot(builder.build())
    for node, gpus in used.items():
        snapshot.used(node, gpus)
    result = cycle(profile("fifo", "gang", "first-fit"), snapshot.pending(a_job("g").tasks(4)).build())

    assert bind_of(result, "g") is None
    status = result.status_of("g", "default")
    assert status is not None
    assert status.code is Code.UNSCHEDULABLE
    assert "gang of 4 tasks" in status.reason
    assert "3 placed" in status.reason


@pytest.mark.parametrize("layout", THREE_FREE.values(), ids=THREE_FREE.keys())
def test_without_gang_three_of_four_workers_are_bound_and_do_not_start(layout: tuple) -> None:
    builder, used = layout
    snapshot = a_snapshot(builder.build())
    for node, gpus in used.items():
        snapshot.used(node, gpus)
    result = cycle(profile("fifo", "first-fit"), snapshot.pending(a_job("g").tasks(4)).build())

    bind = bind_of(result, "g")
    assert bind is not None
    assert not bind.starts
    assert len(bind.placements) == 3


@dataclass(frozen=True)
class GangRun:
    plugins: tuple[str, ...]
    binds: list[tuple[float, int, bool]]
    """(time, tasks bound, starts) of each Bind of the gang."""
    held_idle_gpu_s: float


@pytest.mark.parametrize(
    "case",
    [
        GangRun(("fifo", "gang", "first-fit"), binds=[(100.0, 4, True)], held_idle_gpu_s=0.0),
        # 3 GPUs held from t=10 to t=100 by workers that cannot run yet.
        GangRun(("fifo", "first-fit"), binds=[(10.0, 3, False), (100.0, 1, True)], held_idle_gpu_s=270.0),
    ],
    ids=["gang", "no-gang"],
)
def test_gang_starts_all_workers_together_once_gpus_free_up(case: GangRun) -> None:
    cluster = a_cluster().nodes(1, gpus=4).build()
    jobs = [trace(a_job("b").submitted(0), 100), trace(a_job("g").tasks(4).submitted(10), 50)]
    result, scheduler = run(cluster, case.plugins, jobs)

    binds = [(b.time_s, len(b.bind.placements), b.bind.starts) for b in scheduler.binds_of("g")]
    assert binds == case.binds
    assert by_id(result.jobs, "start_s")["g"] == 100.0
    assert by_id(result.jobs, "end_s")["g"] == 150.0
    assert by_id(result.jobs, "held_idle_gpu_s")["g"] == case.held_idle_gpu_s


# 2. FIFO: fair, but leaves GPUs idle behind a large head-of-line job.


@pytest.mark.parametrize(
    ("strict", "expected_start", "free_gpus_at_3"),
    [
        (True, {"b": 0.0, "h": 100.0, "s1": 200.0, "s2": 200.0}, 4.0),
        (False, {"b": 0.0, "h": 100.0, "s1": 2.0, "s2": 3.0}, 2.0),
    ],
    ids=["strict", "not-strict"],
)
def test_fifo_head_of_line_blocking(strict: bool, expected_start: dict, free_gpus_at_3: float) -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    jobs = [
        trace(a_job("b").gpus(4).submitted(0), 100),
        trace(a_job("h").gpus(8).submitted(1), 100),
        trace(a_job("s1").submitted(2), 10),
        trace(a_job("s2").submitted(3), 10),
    ]
    result, _ = run(cluster, ("fifo", "gang", "first-fit"), jobs, strict=strict)

    assert by_id(result.jobs, "start_s") == expected_start
    timeline = result.timeline
    assert timeline.free_gpus[list(timeline.time_s).index(3.0)] == free_gpus_at_3


def test_strict_fifo_blocked_status_names_the_head_job() -> None:
    snapshot = (
        a_snapshot(a_cluster().nodes(1, gpus=8).build())
        .used("n0", 4)
        .pending(a_job("h").gpus(8).submitted(1), a_job("s1").submitted(2), a_job("s2").submitted(3))
        .build()
    )
    result = cycle(profile("fifo", "gang", "first-fit"), snapshot)

    assert result.binds == ()
    head = result.status_of("h", "default")
    assert head is not None
    assert "gpu: want 8 on one node, largest free block is 4 on n0" in head.reason
    for small in ("s1", "s2"):
        status = result.status_of(small, "default")
        assert status is not None
        assert status.code is Code.WAIT
        assert "queued behind h" in status.reason


# 3. Bin packing: a 1-GPU job goes to the used host, keeping the empty one whole.


@pytest.mark.parametrize(
    ("placer", "small_on", "large_on"),
    [("binpack", "a", "b"), ("spread", "b", None), ("first-fit", "b", None)],
)
def test_binpack_puts_a_small_job_on_the_used_host(placer: str, small_on: str, large_on: str | None) -> None:
    # b is listed first, so an index tie-break alone would send the small job there.
    cluster = a_cluster().node(a_node("b").gpus(4)).node(a_node("a").gpus(4)).build()
    snapshot = (
        a_snapshot(cluster)
        .used("a", 3)
        .pending(a_job("small").submitted(0), a_job("large").gpus(4).submitted(1))
        .build()
    )
    result = cycle(profile("fifo", "gang", placer, strict=False), snapshot)

    small = bind_of(result, "small")
    assert small is not None
    assert nodes_of(cluster, small) == [small_on]
    large = bind_of(result, "large")
    if large_on is None:
        assert large is None
        status = result.status_of("large", "default")
        assert status is not None
        assert "gpu: want 4 on one node, largest free block is 3 on b" in status.reason
    else:
        assert large is not None
        assert nodes_of(cluster, large) == [large_on]


# 4. Spread versus bin packing: how many whole nodes stay free for large jobs.


@pytest.mark.parametrize(
    ("placer", "jobs_per_node", "whole_free_nodes", "large_start"),
    [
        ("binpack", {"n0": 8}, 3, 10.0),
        ("first-fit", {"n0": 8}, 3, 10.0),
        # Spread puts 2 small jobs on every node; n0 frees first, when s0 and s4 end.
        ("spread", {"n0": 2, "n1": 2, "n2": 2, "n3": 2}, 0, 1004.0),
    ],
)
def test_binpack_keeps_whole_nodes_free_and_spread_does_not(
    placer: str, jobs_per_node: dict, whole_free_nodes: int, large_start: float
) -> None:
    cluster = a_cluster().nodes(4, gpus=8).build()
    small = [trace(a_job(f"s{i}").submitted(i), 1000) for i in range(8)]
    large = trace(a_job("large").gpus(8).submitted(10), 100)
    result, _ = run(cluster, ("fifo", "gang", placer), [*small, large])

    names = by_id(result.jobs, "node_names")
    used = Counter(names[f"s{i}"] for i in range(8))
    assert used == jobs_per_node
    assert sum(node.name not in used for node in cluster.nodes) == whole_free_nodes
    assert by_id(result.jobs, "start_s")["large"] == large_start


# 5. A job that fits on one node lands on one node; a larger one takes whole nodes.


@dataclass(frozen=True)
class Topology:
    gpus_per_node: tuple[int, ...]
    used: dict[str, int]
    job: JobBuilder
    tasks_per_node: tuple[int, ...]
    """Sorted task counts per node the job uses."""
    only_on: tuple[str, ...] | None = None
    """The exact nodes, where every placer must agree."""
    never_on: str | None = None
    """A node no placer may use."""


TOPOLOGY = {
    "4x1 gang on the only node with 4 free": Topology(
        (8, 8, 8), {"n0": 6, "n1": 4, "n2": 5}, a_job("j").tasks(4), (4,), ("n1",)
    ),
    "4x1 gang on an empty cluster stays on one node": Topology((8, 8, 8, 8), {}, a_job("j").tasks(4), (4,)),
    "2x8 takes two whole nodes": Topology(
        (8, 8, 8), {"n1": 4}, a_job("j").tasks(2).gpus(8), (1, 1), ("n0", "n2")
    ),
    "4x4 on 8-GPU nodes uses exactly two nodes": Topology(
        (8, 8, 8, 8), {}, a_job("j").tasks(4).gpus(4), (2, 2)
    ),
    "4x4 prefers nodes that take two tasks": Topology(
        (8, 8, 8, 8), {"n0": 4}, a_job("j").tasks(4).gpus(4), (2, 2), never_on="n0"
    ),
}


@pytest.mark.parametrize("placer", PLACERS)
@pytest.mark.parametrize("case", TOPOLOGY.values(), ids=TOPOLOGY.keys())
def test_gang_topology_uses_as_few_nodes_as_possible(case: Topology, placer: str) -> None:
    builder = a_cluster()
    for i, gpus in enumerate(case.gpus_per_node):
        builder = builder.node(a_node(f"n{i}").gpus(gpus))
    cluster = builder.build()
    snapshot = a_snapshot(cluster)
    for node, gpus in case.used.items():
        snapshot.used(node, gpus)
    result = cycle(profile("fifo", "gang", placer), snapshot.pending(case.job).build())

    bind = bind_of(result, "j")
    assert bind is not None
    assert bind.starts
    per_node = Counter(nodes_of(cluster, bind))
    assert tuple(sorted(per_node.values())) == case.tasks_per_node
    if case.only_on is not None:
        assert tuple(sorted(per_node)) == case.only_on
    if case.never_on is not None:
        assert case.never_on not in per_node
    job = case.job.build()
    for placement in bind.placements:
        assert len(placement.gpu_indices) == job.request.whole_gpus


@pytest.mark.parametrize(
    ("job", "nodes_used"),
    [(a_job("j").tasks(2).gpus(8), 2), (a_job("j").tasks(4).gpus(4), 2), (a_job("j").tasks(4), 1)],
    ids=["2x8", "4x4", "4x1"],
)
def test_job_table_counts_the_nodes_a_job_used(job: JobBuilder, nodes_used: int) -> None:
    result, _ = run(a_cluster().nodes(4, gpus=8).build(), ("fifo", "gang", "binpack"), [trace(job, 10)])

    assert by_id(result.jobs, "nodes_used")["j"] == nodes_used
    assert len(by_id(result.jobs, "node_names")["j"].split(",")) == nodes_used


# 6. A job that can never fit is rejected at arrival and never blocks a strict queue.

NEVER_FITS = {
    "one 16-GPU task on 8-GPU nodes": (a_job("x").gpus(16), "gpu: want 16 on one node"),
    "a pool that does not exist": (a_job("x").pool("nope"), "no node matches pool=nope"),
    "a gang larger than the cluster": (a_job("x").tasks(3).gpus(8), "3 tasks: 2 placed"),
}


@pytest.mark.parametrize("gang", [True, False], ids=["gang", "no-gang"])
@pytest.mark.parametrize(("job", "why"), NEVER_FITS.values(), ids=NEVER_FITS.keys())
def test_a_job_that_never_fits_is_rejected_and_does_not_block(job: JobBuilder, why: str, gang: bool) -> None:
    cluster = a_cluster().nodes(2, gpus=8).build()
    plugins = ("fifo", "gang", "first-fit") if gang else ("fifo", "first-fit")
    verdict = Scheduler(profile(*plugins)).feasible(job.build(), cluster)
    assert verdict.code is Code.UNRESOLVABLE

    jobs = [trace(job.submitted(0), 10), trace(a_job("s").submitted(1), 10)]
    result, scheduler = run(cluster, plugins, jobs)

    assert math.isnan(by_id(result.jobs, "start_s")["x"])
    reason = by_id(result.jobs, "reason")["x"]
    assert reason.startswith("rejected")
    assert why in reason
    assert by_id(result.jobs, "start_s")["s"] == 1.0
    assert scheduler.binds_of("x") == []


# 7. Priority: a high-priority job submitted later starts first when both wait.


@pytest.mark.parametrize(
    ("plugins", "expected_start"),
    [
        (("priority", "fifo", "gang", "first-fit"), {"b": 0.0, "lo": 120.0, "mid": 110.0, "top": 100.0}),
        (("fifo", "gang", "first-fit"), {"b": 0.0, "lo": 100.0, "mid": 110.0, "top": 120.0}),
    ],
    ids=["priority", "fifo-only"],
)
def test_priority_class_orders_waiting_jobs(plugins: tuple[str, ...], expected_start: dict) -> None:
    cluster = a_cluster().nodes(1, gpus=1).build()
    jobs = [
        trace(a_job("b").submitted(0), 100),
        trace(a_job("lo").priority("low").submitted(1), 10),
        trace(a_job("mid").priority("normal").submitted(2), 10),
        trace(a_job("top").priority("critical").submitted(3), 10),
    ]
    result, _ = run(cluster, plugins, jobs)

    assert by_id(result.jobs, "start_s") == expected_start


# 8. Fractional GPUs: two half-GPU tasks share one GPU under bin packing.


@pytest.mark.parametrize(
    ("placer", "jobs", "shared"),
    [
        ("binpack", [a_job("f1"), a_job("f2")], True),
        ("first-fit", [a_job("f1"), a_job("f2")], True),
        ("spread", [a_job("f1"), a_job("f2")], False),
        ("binpack", [a_job("f1").tasks(2)], True),
    ],
    ids=["binpack", "first-fit", "spread", "binpack-one-job-two-tasks"],
)
def test_half_gpu_tasks_share_a_gpu(placer: str, jobs: list[JobBuilder], shared: bool) -> None:
    cluster = a_cluster().nodes(2, gpus=2).build()
    snapshot = a_snapshot(cluster).pending(*(j.gpus(0.5) for j in jobs)).build()
    result = cycle(profile("fifo", "gang", placer), snapshot)

    placements = [p for b in result.binds for p in b.placements]
    assert len(placements) == 2
    assert all(p.gpu_milli == 500 and len(p.gpu_indices) == 1 for p in placements)
    slots = {(p.node, p.gpu_indices[0]) for p in placements}
    assert (len(slots) == 1) is shared
    if not shared:
        assert {p.node for p in placements} == {0, 1}


def test_half_gpu_jobs_run_side_by_side_on_one_gpu() -> None:
    cluster = a_cluster().nodes(1, gpus=1).build()
    jobs = [trace(a_job(f"f{i}").gpus(0.5).submitted(i), 100) for i in range(3)]
    result, _ = run(cluster, ("fifo", "gang", "binpack"), jobs)

    assert by_id(result.jobs, "start_s") == {"f0": 0.0, "f1": 1.0, "f2": 100.0}


# 9. Every job left pending when the run ends says why.


def deadlock_jobs() -> list[TraceJob]:
    """Without gang, two 3-worker jobs each grab 2 of 4 GPUs and wait for each other forever.

    x holds 2 GPUs until t=100; lo binds 2 workers at t=1; at t=100 the
    higher-priority hi goes first and binds the 2 GPUs x freed.
    """
    return [
        trace(a_job("x").gpus(2).submitted(0), 100),
        trace(a_job("lo").tasks(3).submitted(1), 10),
        trace(a_job("hi").tasks(3).priority("high").submitted(2), 10),
    ]


NO_GANG = ("priority", "fifo", "first-fit")


@pytest.mark.parametrize("strict", [True, False], ids=["strict", "not-strict"])
def test_jobs_pending_at_the_end_carry_a_reason(strict: bool) -> None:
    result, scheduler = run(a_cluster().nodes(1, gpus=4).build(), NO_GANG, deadlock_jobs(), strict=strict)

    starts = by_id(result.jobs, "start_s")
    assert starts["x"] == 0.0
    assert [(b.time_s, len(b.bind.placements)) for b in scheduler.binds_of("lo")] == [(1.0, 2)]
    assert [(b.time_s, len(b.bind.placements)) for b in scheduler.binds_of("hi")] == [(100.0, 2)]
    reasons = by_id(result.jobs, "reason")
    for job in ("lo", "hi"):
        assert math.isnan(starts[job])
        assert reasons[job].startswith("still pending")
        assert "gang of 3 tasks: 2 placed" in reasons[job]
    assert reasons["x"] == ""


def test_gang_avoids_the_deadlock() -> None:
    plugins = ("priority", "fifo", "gang", "first-fit")
    result, _ = run(a_cluster().nodes(1, gpus=4).build(), plugins, deadlock_jobs())

    assert by_id(result.jobs, "start_s") == {"x": 0.0, "lo": 110.0, "hi": 100.0}
    assert set(by_id(result.jobs, "reason").values()) == {""}


# Regressions: bugs this suite found, each kept as a scenario (docs/design-principles.md, habit 8).


def test_held_idle_gpu_s_counts_workers_of_a_job_that_never_starts() -> None:
    result, _ = run(a_cluster().nodes(1, gpus=4).build(), NO_GANG, deadlock_jobs())

    # lo held 2 idle GPUs from t=1 until the run ended at t=100; hi bound its 2 at t=100.
    held = by_id(result.jobs, "held_idle_gpu_s")
    assert held["lo"] == 198.0
    assert held["hi"] == 0.0


def test_periodic_ticks_end_when_only_stuck_jobs_remain() -> None:
    scheduler = RecordingScheduler(profile(*NO_GANG), max_cycles=2000)
    result = simulate(
        a_cluster().nodes(1, gpus=4).build(), scheduler, deadlock_jobs(), SimOptions(period_s=60)
    )

    assert by_id(result.jobs, "reason")["lo"].startswith("still pending")
    assert by_id(result.jobs, "held_idle_gpu_s")["lo"] == 198.0


def test_periodic_ticks_run_while_a_job_runs() -> None:
    result = simulate(
        a_cluster().nodes(1, gpus=1).build(),
        Scheduler(profile("fifo", "gang", "first-fit")),
        [trace(a_job("a"), 1000)],
        SimOptions(period_s=60),
    )

    # A tick once pushed its successor only if a job was already running, so a job that
    # started in the first tick's own cycle ran without any periodic cycle.
    sampled = result.timeline.time_s.tolist()
    assert {60.0 * k for k in range(1, 17)} <= set(sampled)  # every tick before the job ends at 1000
    assert max(sampled) <= 1000.0 + 60.0  # and the ticks stop once nothing can change


def test_min_available_gang_starts_with_part_of_its_workers() -> None:
    snapshot = (
        a_snapshot(a_cluster().nodes(1, gpus=4).build())
        .used("n0", 1)
        .pending(a_job("some").tasks(4).min_available(2))
        .build()
    )
    result = cycle(profile("fifo", "gang", "first-fit"), snapshot)

    bind = bind_of(result, "some")
    assert bind is not None
    assert bind.starts
    assert len(bind.placements) == 3


def test_min_available_gang_is_not_refused_for_an_earlier_jobs_failure() -> None:
    # The failed-shape memo once ignored min_available, so "some" inherited the failure of "all".
    snapshot = (
        a_snapshot(a_cluster().nodes(1, gpus=4).build())
        .used("n0", 1)
        .pending(a_job("all").tasks(4).submitted(0), a_job("some").tasks(4).min_available(2).submitted(1))
        .build()
    )
    result = cycle(profile("fifo", "gang", "first-fit", strict=False), snapshot)

    assert bind_of(result, "all") is None
    bind = bind_of(result, "some")
    assert bind is not None  # as when it is alone in the queue (the test above)
    assert bind.starts
    assert len(bind.placements) == 3


@pytest.mark.parametrize(
    "plugins",
    [("fifo", "gang", "first-fit"), ("priority", "fifo", "gang", "first-fit")],
    ids=["fifo", "priority+fifo"],
)
def test_fifo_breaks_submit_time_ties_by_job_id(plugins: tuple[str, ...]) -> None:
    cluster = a_cluster().nodes(1, gpus=1).build()
    jobs = [trace(a_job("b").submitted(0), 10), trace(a_job("a").submitted(0), 10)]
    result, _ = run(cluster, plugins, jobs)

    assert by_id(result.jobs, "start_s") == {"a": 0.0, "b": 10.0}
