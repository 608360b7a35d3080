"""The baseline plugins: sjf, drf, f1, wfp3, unicep, multifactor and tetris.

Orders are checked end to end: on a cluster where every job fits, ``allocate``
binds jobs in queue order, so the order of the Binds is the order the plugin
chose; on a one-GPU cluster only the first job starts.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import replace

import numpy as np
import pytest

from builders import JobBuilder, a_cluster, a_job, a_node, a_snapshot, cycle, nodes_of
from loadmaster.errors import ConfigError
from loadmaster.model import ClusterSnapshot, Job, NodeTable, RunningJob, TaskPlacement, TaskRequest
from loadmaster.scheduling import PLUGINS, CycleResult, PluginSpec, Profile, build_profile
from loadmaster.scheduling.framework import CycleContext, OrderPlugin
from loadmaster.scheduling.plugins.baselines import BASELINE_PLUGINS
from loadmaster.scheduling.plugins.drf import DominantShares
from loadmaster.scheduling.plugins.hpc import f1_score, unicep_reference_score, unicep_score, wfp3_score
from loadmaster.scheduling.plugins.multifactor import Multifactor, MultifactorArgs
from loadmaster.scheduling.plugins.tetris import Tetris
from loadmaster.scheduling.state import WorkingState

DAY_S = 24 * 3600.0
ArgsMap = Mapping[str, object]


def one(name: str, **args: object) -> Profile:
    """A profile of the single plugin ``name`` with ``args``."""
    return build_profile("test", ["allocate"], [PluginSpec(name, args)])


def roomy_cluster() -> NodeTable:
    """Six 8-GPU nodes: room for every job of the order tables at once."""
    return a_cluster().nodes(6, gpus=8).build()


def snapshot_of(
    cluster: NodeTable,
    jobs: Sequence[JobBuilder],
    running: Sequence[RunningJob] = (),
    usage: Mapping[str, float] | None = None,
) -> ClusterSnapshot:
    built = a_snapshot(cluster).pending(*jobs).build()
    return replace(built, running=tuple(running), usage_gpu_s=dict(usage or {}))


def bind_order(result: CycleResult) -> list[str]:
    return [b.job_id for b in result.binds]


def context(snapshot: ClusterSnapshot, now: float) -> CycleContext:
    return CycleContext(
        now=now,
        rng=np.random.default_rng(0),
        snapshot=snapshot,
        state=WorkingState.from_snapshot(snapshot),
    )


def job(job_id: str, submit_s: float, limit_s: float, gpus: int = 1, user: str = "u1") -> JobBuilder:
    """A job of ``gpus`` GPUs in total (8-GPU tasks above 8)."""
    builder = a_job(job_id).submitted(submit_s).limit(limit_s).user(user)
    return builder.tasks(gpus // 8).gpus(8) if gpus > 8 else builder.gpus(gpus)


def test_every_baseline_is_registered_under_its_own_name() -> None:
    assert set(BASELINE_PLUGINS) == {
        "sjf",
        "drf",
        "f1",
        "wfp3",
        "unicep",
        "multifactor",
        "tetris",
        "random-order",
    }
    for name, cls in BASELINE_PLUGINS.items():
        assert cls.name == name
        assert PLUGINS[name] is cls


# Order tables. Jobs are (id, submit_s, limit_s, gpus); hand-computed scores in the comments.

HPC_JOBS = {
    # F1 = log10(r) * n + 870 * log10(max(s, 1))
    "f1": [
        ("a", 10, 100, 1),  # 2 * 1 + 870 * 1 = 872
        ("b", 1, 1000, 4),  # 3 * 4 + 870 * 0 = 12
        ("c", 100, 10, 8),  # 1 * 8 + 870 * 2 = 1748
        ("d", 0, 10_000, 2),  # 4 * 2 + 870 * log10(1) = 8
    ],
    # now = 1000. WFP3 = -(w/r)^3 * n; quirk w = -1 - s.
    "wfp3": [
        ("a", 0, 1000, 1),  # -(1000/1000)^3 = -1;        quirk (1/1000)^3 = 1e-9
        ("b", 500, 100, 1),  # -(500/100)^3 = -125;        quirk 5.01^3 = 125.75
        ("c", 900, 100, 8),  # -(100/100)^3 * 8 = -8;      quirk 9.01^3 * 8 = 5851.4
        ("d", 0, 4000, 8),  # -(1000/4000)^3 * 8 = -0.125; quirk (1/4000)^3 * 8 = 1.25e-10
    ],
    # now = 1000. UNICEP = -w / (log2(max(n, 2)) * log10(max(r, 10)));
    # quirk = -(w + 1e-15) / (log2(n + 1e-15) * r) with w = -1 - s.
    "unicep": [
        ("a", 0, 100, 1),  # -1000 / (1 * 2) = -500;      quirk 1 / (~1.6e-15 * 100), huge
        ("b", 500, 1000, 4),  # -500 / (2 * 3) = -83.3;   quirk 501 / (2 * 1000) = 0.2505
        ("c", 900, 10, 16),  # -100 / (4 * 1) = -25;      quirk 901 / (4 * 10) = 22.5
        ("d", 0, 5, 8),  # -1000 / (3 * 1) = -333.3;      quirk 1 / (3 * 5) = 0.0667
    ],
    "sjf": [
        ("a", 0, 300, 1),
        ("b", 5, 100, 1),
        ("c", 2, 100, 1),  # ties with b on time: earlier submit first
        ("d", 9, 50, 1),
    ],
}

ORDER_CASES = [
    ("sjf", {}, "sjf", ["d", "c", "b", "a"]),
    ("f1", {}, "f1", ["d", "b", "a", "c"]),
    ("wfp3", {}, "wfp3", ["b", "c", "a", "d"]),
    ("wfp3", {"reference_quirk": True}, "wfp3", ["d", "a", "b", "c"]),
    ("unicep", {}, "unicep", ["a", "d", "b", "c"]),
    ("unicep", {"reference_quirk": True}, "unicep", ["d", "b", "c", "a"]),
]


@pytest.mark.parametrize(("plugin", "args", "table", "expected"), ORDER_CASES)
def test_order_plugin_binds_jobs_in_its_order(
    plugin: str, args: ArgsMap, table: str, expected: list[str]
) -> None:
    jobs = [job(*row) for row in HPC_JOBS[table]]
    result = cycle(one(plugin, **args), snapshot_of(roomy_cluster(), jobs), now=1000.0)

    assert bind_order(result) == expected


@pytest.mark.parametrize(("plugin", "args", "table", "expected"), ORDER_CASES)
def test_only_the_first_in_order_starts_on_a_one_gpu_cluster(
    plugin: str, args: ArgsMap, table: str, expected: list[str]
) -> None:
    tiny = a_cluster().nodes(1, gpus=1).build()
    jobs = [job(*row[:3], gpus=1) for row in HPC_JOBS[table]]
    ctx = context(snapshot_of(tiny, jobs), 1000.0)
    [order_plugin] = one(plugin, **args).order
    first = min(jobs, key=lambda j: order_plugin.order_key(j.build(), ctx)).job_id

    result = cycle(one(plugin, **args), snapshot_of(tiny, jobs), now=1000.0)

    assert bind_order(result) == [first]


# Formulas against hand-computed values.

FORMULA_CASES = [
    # (formula, submit_s, limit_s, gpus, wait_s, expected)
    ("f1", 10.0, 100.0, 1, None, 872.0),
    ("f1", 0.0, 10_000.0, 2, None, 8.0),
    ("f1", 0.5, 10.0, 3, None, 3.0),  # s below 1 counts as 1
    ("f1", 1000.0, 1.0, 8, None, 2610.0),
    ("wfp3", 0.0, 1000.0, 1, 1000.0, -1.0),
    ("wfp3", 0.0, 4000.0, 8, 1000.0, -0.125),
    ("wfp3", 500.0, 100.0, 1, -501.0, 125.751501),  # quirk wait: -1 - 500
    ("unicep", 0.0, 100.0, 1, 1000.0, -500.0),  # n = 1 counts as 2
    ("unicep", 0.0, 5.0, 8, 1000.0, -1000.0 / 3.0),  # r = 5 counts as 10
    ("unicep", 500.0, 1000.0, 4, 500.0, -500.0 / 6.0),
    ("unicep-reference", 500.0, 1000.0, 4, -501.0, 501.0 / 2000.0),
    ("unicep-reference", 0.0, 5.0, 8, -1.0, 1.0 / 15.0),
]


@pytest.mark.parametrize(("formula", "submit_s", "limit_s", "gpus", "wait", "expected"), FORMULA_CASES)
def test_hpc_formulas_match_hand_computed_values(
    formula: str, submit_s: float, limit_s: float, gpus: int, wait: float | None, expected: float
) -> None:
    built = job("j", submit_s, limit_s, gpus).build()
    if formula == "f1":
        value = f1_score(built)
    elif formula == "wfp3":
        assert wait is not None
        value = wfp3_score(built, wait)
    elif formula == "unicep":
        assert wait is not None
        value = unicep_score(built, wait)
    else:
        assert wait is not None
        value = unicep_reference_score(built, wait)

    assert value == pytest.approx(expected, rel=1e-9)


QUIRK_KEY_CASES = [
    # (plugin, quirk, submit_s, limit_s, gpus, now, expected score)
    ("wfp3", False, 100.0, 300.0, 2, 700.0, -16.0),  # w = 600: -(600/300)^3 * 2
    ("wfp3", True, 100.0, 300.0, 2, 700.0, -((-101.0 / 300.0) ** 3) * 2),  # w = -101 whatever now is
    ("unicep", False, 100.0, 1000.0, 4, 700.0, -600.0 / (2.0 * 3.0)),
    ("unicep", True, 100.0, 1000.0, 4, 700.0, (101.0 - 1e-15) / (math.log2(4.0 + 1e-15) * 1000.0)),
]


@pytest.mark.parametrize(
    ("plugin", "quirk", "submit_s", "limit_s", "gpus", "now", "expected"), QUIRK_KEY_CASES
)
def test_reference_quirk_changes_the_wait_in_the_key(
    plugin: str, quirk: bool, submit_s: float, limit_s: float, gpus: int, now: float, expected: float
) -> None:
    jobs = [job("j", submit_s, limit_s, gpus)]
    [order_plugin] = one(plugin, reference_quirk=quirk).order
    key = order_plugin.order_key(jobs[0].build(), context(snapshot_of(roomy_cluster(), jobs), now))

    assert key[0] == pytest.approx(expected, rel=1e-12)
    assert key[1:] == (submit_s, "j")


def test_quirk_key_does_not_depend_on_the_time() -> None:
    jobs = [job("j", 100.0, 300.0, 2)]
    [order_plugin] = one("wfp3", reference_quirk=True).order
    keys = {
        order_plugin.order_key(jobs[0].build(), context(snapshot_of(roomy_cluster(), jobs), now))
        for now in (200.0, 9e6)
    }

    assert len(keys) == 1


@pytest.mark.parametrize(("strict", "expected"), [(True, []), (False, ["long"])])
def test_strict_blocks_the_queue_behind_a_head_that_cannot_start(strict: bool, expected: list[str]) -> None:
    tiny = a_cluster().nodes(1, gpus=1).build()
    jobs = [job("short-but-wide", 0, 10, gpus=2), job("long", 0, 1000, gpus=1)]

    result = cycle(one("sjf", strict=strict), snapshot_of(tiny, jobs))

    assert bind_order(result) == expected


# DRF: alice holds 4 of 16 GPUs (dominant share 0.25); bob holds 1 GPU but 160 of 256 cores (0.625).


def holding(owner: str, group: str, gpus: int, cpu_milli: int, node: int) -> RunningJob:
    running = a_job(f"run-{owner}").user(owner, group).build()
    half = TaskPlacement(
        node=node, gpu_indices=tuple(range(gpus)), gpu_milli=1000, cpu_milli=cpu_milli // 2, memory_mib=0
    )
    rest = replace(half, node=1 - node, gpu_indices=(), gpu_milli=0)
    return RunningJob(job=running, placements=(half, rest), start_s=0.0)


DRF_RUNNING = (holding("alice", "g1", 4, 16_000, 0), holding("bob", "g2", 1, 160_000, 1))
DRF_PENDING = [
    a_job("bob-1").user("bob", "g2").submitted(1),
    a_job("carol-1").user("carol", "g2").submitted(2),
    a_job("alice-1").user("alice", "g1").submitted(3),
]


@pytest.mark.parametrize(
    ("level", "expected"),
    [
        ("user", ["carol-1", "alice-1", "bob-1"]),  # 0 < 0.25 < 0.625
        ("group", ["alice-1", "bob-1", "carol-1"]),  # g1 0.25 < g2 0.625, then submit time
        ("both", ["alice-1", "carol-1", "bob-1"]),  # g1 first; within g2 carol (0) before bob
    ],
)
def test_drf_serves_the_smallest_dominant_share_first(level: str, expected: list[str]) -> None:
    cluster = a_cluster().nodes(2, gpus=8).build()
    snapshot = snapshot_of(cluster, DRF_PENDING, running=DRF_RUNNING)

    assert bind_order(cycle(one("drf", level=level), snapshot)) == expected


def test_drf_computes_shares_once_per_cycle() -> None:
    cluster = a_cluster().nodes(2, gpus=8).build()
    ctx = context(snapshot_of(cluster, DRF_PENDING, running=DRF_RUNNING), 0.0)
    [drf] = one("drf").order

    keys = [drf.order_key(j.build(), ctx) for j in DRF_PENDING]
    cached = ctx.data["drf"]
    drf.order_key(DRF_PENDING[0].build(), ctx)

    assert isinstance(cached, DominantShares)
    assert ctx.data["drf"] is cached
    assert cached.user == pytest.approx({"alice": 0.25, "bob": 0.625})
    assert cached.group == pytest.approx({"g1": 0.25, "g2": 0.625})
    assert keys[0] == (0.625, 1.0, "bob-1")


# Multifactor.


def multifactor_key(
    args: MultifactorArgs, jobs: Sequence[JobBuilder], usage: Mapping[str, float], now: float
) -> dict[str, float]:
    """Each job's priority under ``args``."""
    plugin = Multifactor(args)
    ctx = context(snapshot_of(a_cluster().nodes(2, gpus=8).build(), jobs, usage=usage), now)
    return {j.job_id: -float(plugin.order_key(j.build(), ctx)[0]) for j in jobs}


@pytest.mark.parametrize(
    "args",
    [
        MultifactorArgs(queue_weights={"interactive": 0.9}),
        MultifactorArgs(favor_small=True, fairshare_level="both", max_age_s=3600.0),
        MultifactorArgs(age_weight=3.3, size_weight=0.7, fairshare_level="group"),
    ],
)
def test_multifactor_keys_of_a_whole_queue_equal_the_one_job_keys(args: MultifactorArgs) -> None:
    rng = np.random.default_rng(3)
    jobs = [
        a_job(f"j{i}")
        .user(f"u{i % 5}", group=f"g{i % 2}")
        .tasks(int(rng.integers(1, 5)))
        .gpus(int(rng.choice([1, 2, 8])))
        .queue(str(rng.choice(["interactive", "training", "other"])))
        .priority(str(rng.choice(["high", "normal", "low", "unknown-class"])))
        .submitted(float(rng.uniform(0, 9 * DAY_S)))
        for i in range(60)
    ]
    usage = {f"user/u{i}": float(i * 1234.5) for i in range(5)} | {"group/g0": 99.0}
    plugin = Multifactor(args)
    ctx = context(snapshot_of(a_cluster().nodes(2, gpus=8).build(), jobs, usage=usage), 8 * DAY_S)
    built = [j.build() for j in jobs]
    assert plugin.order_keys(built, ctx) == [plugin.order_key(j, ctx) for j in built]


def test_multifactor_priority_matches_a_hand_computed_value() -> None:
    jobs = [
        a_job("x").user("u1").tasks(4).gpus(1).queue("interactive").priority("high").submitted(0),
        a_job("y").user("u2").submitted(0),
    ]
    usage = {"user/u1": 300.0, "user/u2": 100.0, "group/g1": 400.0}
    args = MultifactorArgs(queue_weights={"interactive": 0.9})

    priority = multifactor_key(args, jobs, usage, now=3.5 * DAY_S)["x"]

    # age 0.5, size 4/16, fairshare 2^(-0.75/0.5), queue 0.9, class "high" 0.55
    expected = 1000 * 0.5 + 1000 * 0.25 + 10000 * 2**-1.5 + 1000 * 0.9 + 1000 * 0.55
    assert priority == pytest.approx(expected)


FAIRSHARE_CASES = [
    # (args, job, expected fair-share factor). Usage: u1 300, u2 100, u3 0; g1 400, g2 0.
    # Users u1, u2, u3 are seen, so equal shares are 1/3 each; groups g1, g2 get 1/2.
    ({}, "x", 2 ** (-0.75 / (1 / 3))),
    ({}, "z", 1.0),  # no usage: the full factor
    ({"shares": {"user/u1": 3.0}}, "x", 2 ** (-0.75 / (3 / 5))),  # raw shares 3, 1, 1
    ({"shares": {"user/u1": 0.0}}, "x", 0.0),  # no share: no fair-share priority
    ({"shares": {"user/u9": 3.0}}, "y", 2 ** (-0.25 / (1 / 6))),  # a named idle user counts in the total
    ({"fairshare_level": "group"}, "x", 2 ** (-1.0 / 0.5)),
    ({"fairshare_level": "group"}, "z", 1.0),
    ({"fairshare_level": "both"}, "x", 2 ** (-1.0 / 0.5) * 2 ** (-0.75 / (1 / 3))),
]


@pytest.mark.parametrize(("args", "job_id", "expected"), FAIRSHARE_CASES)
def test_multifactor_fairshare_factor(args: dict[str, object], job_id: str, expected: float) -> None:
    jobs = [
        a_job("x").user("u1", "g1").submitted(0),
        a_job("y").user("u2", "g1").submitted(0),
        a_job("z").user("u3", "g2").submitted(0),
    ]
    usage = {"user/u1": 300.0, "user/u2": 100.0, "group/g1": 400.0}
    only_fairshare = {
        "age_weight": 0,
        "size_weight": 0,
        "queue_weight": 0,
        "class_weight": 0,
        "fairshare_weight": 1,
    }
    [plugin] = one("multifactor", **only_fairshare, **args).order
    assert isinstance(plugin, Multifactor)
    ctx = context(snapshot_of(a_cluster().nodes(2, gpus=8).build(), jobs, usage=usage), 0.0)

    key = plugin.order_key(next(j.build() for j in jobs if j.job_id == job_id), ctx)

    assert -float(key[0]) == pytest.approx(expected)


@pytest.mark.parametrize(
    ("weights", "winner"),
    [
        ({"age_weight": 1000, "fairshare_weight": 0}, "old-heavy"),
        ({"age_weight": 0, "fairshare_weight": 10000}, "new-light"),
        ({}, "new-light"),  # defaults: fair share dominates, 1000 + 2872 < 8706
        ({"age_weight": 10000, "fairshare_weight": 1000}, "old-heavy"),
    ],
)
def test_multifactor_weights_decide_between_age_and_fairshare(weights: dict[str, float], winner: str) -> None:
    tiny = a_cluster().nodes(1, gpus=1).build()
    jobs = [
        a_job("old-heavy").user("alice").submitted(0),
        a_job("new-light").user("bob").submitted(7 * DAY_S),
    ]
    usage = {"user/alice": 9000.0, "user/bob": 1000.0}

    result = cycle(one("multifactor", **weights), snapshot_of(tiny, jobs, usage=usage), now=7 * DAY_S)

    assert bind_order(result) == [winner]


@pytest.mark.parametrize(("favor_small", "winner"), [(False, "big"), (True, "small")])
def test_multifactor_size_factor_can_favor_small_jobs(favor_small: bool, winner: str) -> None:
    jobs = [a_job("small").gpus(1).submitted(0), a_job("big").gpus(8).submitted(1)]
    priorities = multifactor_key(MultifactorArgs(favor_small=favor_small), jobs, {}, now=0.0)

    assert max(priorities, key=lambda j: priorities[j]) == winner


def test_multifactor_orders_5000_jobs_by_priority() -> None:
    # Its speed is measured by benchmarks/cycle_latency.py, not asserted here.
    rng = np.random.default_rng(3)
    jobs = [
        a_job(f"j{i}")
        .user(f"u{rng.integers(50)}", f"g{rng.integers(5)}")
        .submitted(float(i))
        .gpus(int(rng.choice([1, 2, 4, 8])))
        .queue(str(rng.choice(["default", "interactive"])))
        .build()
        for i in range(5000)
    ]
    usage = {f"user/u{i}": float(i * 100) for i in range(50)}
    snapshot = replace(a_snapshot(roomy_cluster()).pending(*jobs).build(), usage_gpu_s=usage)
    [plugin] = one("multifactor", queue_weights={"interactive": 0.8}).order
    ctx = context(snapshot, now=10_000.0)
    ordered = sorted((p.job for p in snapshot.pending), key=lambda j: plugin.order_key(j, ctx))

    assert len(ordered) == 5000
    keys = [plugin.order_key(j, ctx)[0] for j in ordered]
    assert keys == sorted(keys)


# Tetris: n0 has 2 free GPUs and all 128 cores; n1 has 8 free GPUs and 48 of 128 cores.


def tetris_snapshot(request: TaskRequest) -> ClusterSnapshot:
    cluster = a_cluster().nodes(2, gpus=8).build()
    pending = replace(a_job("t").build(), request=request)
    built = a_snapshot(cluster).used("n0", 6).pending(pending).build()
    return replace(built, cpu_free_milli=np.array([128_000, 48_000], dtype=np.int64))


TETRIS_CASES = [
    # CPU-heavy: n0 = 1/8 * 2/8 + 32/128 * 128/128 = 0.28125; n1 = 1/8 * 8/8 + 32/128 * 48/128 = 0.21875
    (TaskRequest(gpu_milli=1000, cpu_milli=32_000), [0.28125, 0.21875], "n0"),
    # GPU only: n0 = 1/8 * 2/8 = 0.03125; n1 = 1/8 * 8/8 = 0.125
    (TaskRequest(gpu_milli=1000), [0.03125, 0.125], "n1"),
    # half a GPU and a little CPU: n0 = 0.5/8 * 2/8 + 8/128 * 1; n1 = 0.5/8 * 1 + 8/128 * 48/128
    (TaskRequest(gpu_milli=500, cpu_milli=8000), [0.078125, 0.0859375], "n1"),
]


@pytest.mark.parametrize(("request_", "scores", "node"), TETRIS_CASES)
def test_tetris_prefers_the_node_whose_free_vector_aligns(
    request_: TaskRequest, scores: list[float], node: str
) -> None:
    snapshot = tetris_snapshot(request_)
    [pending] = snapshot.pending
    ctx = context(snapshot, 0.0)

    assert Tetris().score(pending.job, request_, ctx) == pytest.approx(scores)
    [bind] = cycle(one("tetris"), snapshot).binds
    assert nodes_of(snapshot.nodes, bind) == [node]


def test_tetris_weights_and_nodes_without_a_resource() -> None:
    cluster = a_cluster().node(a_node("cpu-only").gpus(0)).nodes(1, gpus=8).build()
    request = TaskRequest(gpu_milli=0, cpu_milli=16_000, memory_mib=1024)
    snapshot = a_snapshot(cluster).pending(replace(a_job("t").build(), request=request)).build()
    ctx = context(snapshot, 0.0)
    [pending] = snapshot.pending

    scores = Tetris().score(pending.job, request, ctx)
    cpu_only = Tetris(Tetris.Args(memory_weight=0.0)).score(pending.job, request, ctx)

    assert np.all(np.isfinite(scores))
    assert scores == pytest.approx([0.125 + 1024 / 1_048_576] * 2)
    assert cpu_only == pytest.approx([0.125, 0.125])


# Profile validation.

BAD_ARGS = [
    ("drf", {"level": "bogus"}, "args.level", "'user', 'group' or 'both'"),
    ("wfp3", {"reference_quirk": "maybe"}, "args.reference_quirk", "valid boolean"),
    ("unicep", {"strict": "sometimes"}, "args.strict", "valid boolean"),
    ("sjf", {"reverse": True}, "args.reverse", "unknown argument"),
    ("multifactor", {"queue_weights": {"q": 1.5}}, "args.queue_weights.q", "less than or equal to 1"),
    ("multifactor", {"classes": {"high": -0.1}}, "args.classes.high", "greater than or equal to 0"),
    ("multifactor", {"max_age_s": 0}, "args.max_age_s", "greater than 0"),
    ("multifactor", {"fairshare_level": "team"}, "args.fairshare_level", "'user', 'group' or 'both'"),
    ("multifactor", {"shares": {"alice": 1.0}}, "args.shares.alice", "pattern"),
    ("multifactor", {"age_weight": -5}, "args.age_weight", "greater than or equal to 0"),
    ("tetris", {"cpu_weight": -1}, "args.cpu_weight", "greater than or equal to 0"),
]


@pytest.mark.parametrize(("plugin", "args", "field", "message"), BAD_ARGS)
def test_bad_arguments_are_rejected_naming_the_field(
    plugin: str, args: ArgsMap, field: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        one(plugin, **args)

    assert caught.value.field.startswith(f"profiles.test.plugins[0].{field}")
    assert message in caught.value.detail


@pytest.mark.parametrize("plugin", ["sjf", "drf", "f1", "wfp3", "unicep", "multifactor"])
def test_order_baselines_go_before_fifo_not_after(plugin: str) -> None:
    fifo = PluginSpec("fifo", {})
    built = build_profile("test", ["allocate"], [PluginSpec(plugin, {}), fifo])

    assert [p.name for p in built.order] == [plugin, "fifo"]
    with pytest.raises(ConfigError, match=f"{plugin} is listed after fifo"):
        build_profile("test", ["allocate"], [fifo, PluginSpec(plugin, {})])


@pytest.mark.parametrize("plugin", ["sjf", "drf", "f1", "wfp3", "unicep", "multifactor"])
def test_order_baselines_are_order_plugins_that_do_not_follow_submission(plugin: str) -> None:
    [built] = one(plugin).plugins

    assert isinstance(built, OrderPlugin)
    assert not built.follows_submission_order
    assert not built.strict


# Determinism: the same snapshot, time and seed give the same decisions.


def mixed_snapshot() -> ClusterSnapshot:
    rng = np.random.default_rng(11)
    cluster = a_cluster().nodes(3, gpus=8).nodes(2, gpus=4).build()
    jobs: list[Job] = []
    for i in range(30):
        builder = (
            a_job(f"j{i:02d}")
            .user(f"u{rng.integers(4)}", f"g{rng.integers(2)}")
            .submitted(float(rng.integers(0, 500)))
            .limit(float(rng.choice([60, 600, 3600, 36_000])))
            .tasks(int(rng.choice([1, 1, 2])))
            .gpus(float(rng.choice([0.5, 1, 2, 4])))
        )
        jobs.append(builder.build())
    running = (holding("u0", "g0", 2, 8000, 0),)
    return replace(
        a_snapshot(cluster).used("n0", 2).pending(*jobs).build(),
        running=running,
        usage_gpu_s={"user/u0": 500.0, "user/u1": 50.0, "group/g0": 550.0},
    )


DETERMINISM_PROFILES = [
    ["sjf", "gang", "tetris"],
    ["drf", "fifo", "gang", "binpack"],
    ["f1", "gang"],
    ["wfp3", "tetris"],
    ["unicep", "gang"],
    ["multifactor", "gang", "tetris"],
]


@pytest.mark.parametrize("names", DETERMINISM_PROFILES, ids="+".join)
def test_same_snapshot_time_and_seed_give_the_same_decisions(names: list[str]) -> None:
    chosen = build_profile("test", ["allocate"], [PluginSpec(n, {}) for n in names])
    snapshot = mixed_snapshot()

    first = cycle(chosen, snapshot, now=900.0, seed=5)
    second = cycle(chosen, snapshot, now=900.0, seed=5)

    assert first.decisions == second.decisions
    assert first.binds, "the workload should start some jobs"
    assert {k: s.reason for k, s in first.statuses.items()} == {
        k: s.reason for k, s in second.statuses.items()
    }


def test_pending_order_of_the_snapshot_does_not_matter() -> None:
    snapshot = mixed_snapshot()
    shuffled = replace(snapshot, pending=tuple(reversed(tuple(snapshot.pending))))
    chosen = one("multifactor")

    assert cycle(chosen, snapshot, now=900.0).decisions == cycle(chosen, shuffled, now=900.0).decisions
