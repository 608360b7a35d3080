"""GPU-sharing policies (FGD paper baselines, FGD, fgd-balanced) and the openb sharing protocol.

Scores are hand-computed on tiny clusters of 8-GPU nodes with 128 cores and
1 TiB each (the builders' default), so CPU divides to 1.0 over the largest node.
"""

from __future__ import annotations

import itertools

import numpy as np
import pytest

from builders import a_cluster, a_job, a_node
from conftest import reference_data
from loadmaster.errors import ModelError
from loadmaster.model import ClusterSnapshot, Job, NodeTable, TaskPlacement, TaskRequest
from loadmaster.scheduling import PLUGINS, PluginSpec, build_profile
from loadmaster.scheduling.framework import CycleContext
from loadmaster.scheduling.plugins.fragmentation import (
    CompiledWorkload,
    NodeStats,
    TypicalTask,
    fragmentation,
    fragmentation_growth,
    node_stats,
    typical_workload,
)
from loadmaster.scheduling.plugins.sharing import (
    SHARING_PLUGINS,
    BestFit,
    DotProduct,
    FgdArgs,
    FgdBalanced,
    FgdBalancedArgs,
    FragmentationGradient,
    GpuClustering,
    GpuPacking,
    RandomShare,
    SharingPolicy,
    stranded_gpu,
)
from loadmaster.scheduling.state import WorkingState
from loadmaster.validation.fgd import (
    LEVELS,
    SeedRun,
    arrivals,
    discrete_curve,
    load_openb,
    place_all,
    run_seed,
)


def context(cluster: NodeTable, seed: int = 0) -> CycleContext:
    snapshot = ClusterSnapshot.empty(cluster)
    return CycleContext(0.0, np.random.default_rng(seed), snapshot, WorkingState.from_snapshot(snapshot))


def use(ctx: CycleContext, node: int, gpus: tuple[int, ...], milli: int, cpu: int = 0) -> TaskPlacement:
    placement = TaskPlacement(node, gpus, milli, cpu, 0)
    ctx.state.take(placement)
    return placement


def task(gpu_milli: int, cpu_milli: int = 0) -> Job:
    built = a_job("t").build()
    return Job(
        id="t",
        user=built.user,
        group=built.group,
        submit_s=0.0,
        tasks=1,
        request=TaskRequest(gpu_milli=gpu_milli, cpu_milli=cpu_milli),
        time_limit_s=1.0,
    )


def scores(policy: SharingPolicy, ctx: CycleContext, job: Job) -> list[float]:
    return policy.score(job, job.request, ctx).tolist()


def test_every_sharing_policy_is_registered_and_builds_from_a_profile() -> None:
    for name, cls in SHARING_PLUGINS.items():
        assert cls.name == name
        assert PLUGINS[name] is cls
        profile = build_profile("p", ["allocate"], [PluginSpec(name, {})])
        assert isinstance(profile.plugins[0], SharingPolicy)


def test_fgd_workload_argument_is_validated() -> None:
    spec = PluginSpec("fgd", {"workload": [{"cpu_milli": 1000, "gpu_milli": 500, "weight": 1.0}]})
    plugin = build_profile("p", ["allocate"], [spec]).plugins[0]
    assert isinstance(plugin, FragmentationGradient)
    with pytest.raises(ModelError, match="multiple"):
        TypicalTask(0, 1500, 1.0)


# Node choice, hand-computed. Nodes n0, n1, ... of 8 GPUs; `use` takes GPU shares first.


def test_best_fit_prefers_least_cpu_and_gpu_left() -> None:
    ctx = context(a_cluster().nodes(2).build())
    use(ctx, 0, (0, 1, 2, 3, 4, 5), 1000)  # n0: 2 GPUs free, n1: 8
    # n0: (1 - (0.5 * 128000/128000 + 0.5 * 1000/8000)) * 100 = 43.75; n1: (1 - (0.5 + 0.4375)) * 100 = 6.25
    assert scores(BestFit(), ctx, task(1000)) == [43.0, 6.0]


def test_dot_product_prefers_the_node_least_aligned_with_the_request() -> None:
    ctx = context(a_cluster().nodes(2).build())
    use(ctx, 0, (0, 1, 2, 3, 4, 5), 1000)
    # n0: 1 - (2000/8000 * 1000/8000) / 2 = 0.984375; n1: 1 - (8000/8000 * 1000/8000) / 2 = 0.9375
    assert scores(DotProduct(), ctx, task(1000)) == [98.0, 93.0]


def test_gpu_packing_prefers_the_tightest_partly_used_gpu() -> None:
    ctx = context(a_cluster().nodes(3).build())
    use(ctx, 1, (0,), 400)  # n1: a GPU with 600 free
    use(ctx, 2, (0,), 700)  # n2: a GPU with 300 free
    # share 250: n0 idle max(33 - 8, 8) = 25; n1 100 - 60 // 10 = 94; n2 100 - 30 // 10 = 97
    assert scores(GpuPacking(), ctx, task(250)) == [25.0, 94.0, 97.0]
    # share 500: n2's 300 is too small, a free GPU of a used node: max(50 - 1, 33) = 49
    assert scores(GpuPacking(), ctx, task(500)) == [25.0, 94.0, 49.0]
    # two whole GPUs on a used node: max(50 - 2, 33) = 48; no GPU: 0 everywhere
    assert scores(GpuPacking(), ctx, task(2000)) == [25.0, 48.0, 48.0]
    assert scores(GpuPacking(), ctx, task(0, 1000)) == [0.0, 0.0, 0.0]


def test_gpu_clustering_groups_tasks_of_the_same_gpu_kind() -> None:
    ctx = context(a_cluster().nodes(4).build())
    policy = GpuClustering()
    share, one = task(400), task(1000)
    policy.on_placed(share, use(ctx, 0, (0,), 400), ctx)  # n0: shares only
    policy.on_placed(one, use(ctx, 1, (0,), 1000), ctx)  # n1: one 1-GPU task
    policy.on_placed(share, use(ctx, 3, (0,), 400), ctx)  # n3: both kinds
    policy.on_placed(one, use(ctx, 3, (1,), 1000), ctx)
    # band * 25 + 25 * (8000 - free) // 8000: n0 75 + 1, n1 0 + 3, n2 25 + 0, n3 50 + 4
    assert scores(policy, ctx, share) == [76.0, 3.0, 25.0, 54.0]
    assert scores(policy, ctx, one) == [1.0, 78.0, 25.0, 54.0]


def test_random_share_is_seeded_and_picks_a_gpu_with_room() -> None:
    cluster = a_cluster().nodes(3).build()
    first, second = context(cluster, seed=7), context(cluster, seed=7)
    assert scores(RandomShare(), first, task(300)) == scores(RandomShare(), second, task(300))
    use(first, 0, (0, 1, 2, 3, 4, 5, 6), 900)  # only GPU 7 has room for 300
    for _ in range(5):
        assert RandomShare().choose_gpus(task(300), task(300).request, 0, first) == (7,)


# Fragmentation against a target workload, hand-computed (weights 0.5 / 0.25 / 0.25).

WORKLOAD = (TypicalTask(2000, 500, 0.5), TypicalTask(0, 1000, 0.25), TypicalTask(1000, 0, 0.25))


@pytest.mark.parametrize(
    ("gpus", "cpu", "expected"),
    [
        # fits 500 and 1000: only the 300 GPU is a fragment for both; a CPU-only task counts all 1300
        ([1000, 300], 10_000, 0.5 * 300 + 0.25 * 300 + 0.25 * 1300),
        # nothing GPU fits: every free milli-GPU counts for every shape
        ([400, 300], 10_000, 1.0 * 700),
        # no CPU for the 500 share (2000 cores): all of it is a fragment for that shape
        ([1000, 1000], 1_000, 0.5 * 2000 + 0.0 + 0.25 * 2000),
        ([0, 0], 10_000, 0.0),
    ],
)
def test_fragmentation_by_hand(gpus: list[int], cpu: int, expected: float) -> None:
    compiled = CompiledWorkload.of(WORKLOAD)
    measured = fragmentation(np.array([gpus]), np.array([cpu]), compiled)
    assert measured.tolist() == pytest.approx([expected])


def test_fgd_puts_a_share_where_it_leaves_room_for_the_typical_share() -> None:
    """Free [1000, 600], typical share 500: best fit takes the 600 GPU and strands 400; FGD does not."""
    cluster = a_cluster().node(a_node("n0").gpus(2)).build()
    ctx = context(cluster)
    use(ctx, 0, (1,), 400)
    fgd = FragmentationGradient(FgdArgs(workload=(TypicalTask(0, 500, 1.0),), integer_scores=False))
    job = task(200)
    growth = fgd.growth(job.request, np.array([0]), ctx)
    assert growth.tolist() == [[0.0, 400.0]]  # [800, 600] keeps both usable; [1000, 400] strands 400
    assert fgd.choose_gpus(job, job.request, 0, ctx) == (0,)
    assert BestFit().choose_gpus(job, job.request, 0, ctx) == (1,)


def test_fgd_integer_score_is_the_published_sigmoid() -> None:
    ctx = context(a_cluster().node(a_node("n0").gpus(2)).build())
    use(ctx, 0, (1,), 400)
    fgd = FragmentationGradient(FgdArgs(workload=(TypicalTask(0, 500, 1.0),)))
    # growth 0 -> int(100 * sigmoid(0)) = 50; growth 400 -> int(100 / (1 + e^0.4)) = 40
    assert fgd.candidate_scores(task(200).request, np.array([0]), ctx).tolist() == [[50.0, 40.0]]


def reference_fragmentation(gpus: list[int], cpu: int, workload: tuple[TypicalTask, ...]) -> float:
    """The paper's definition, shape by shape, written plainly."""
    free = sum(gpus)
    total = 0.0
    for t in workload:
        share = t.gpu_milli if t.gpu_milli < 1000 else 1000
        count = 1 if t.gpu_milli < 1000 else t.gpu_milli // 1000
        fits = t.gpu_milli > 0 and cpu >= t.cpu_milli and sum(g >= share for g in gpus) >= count
        total += t.weight * (sum(g for g in gpus if g < share) if fits else free)
    return total


def test_vectorised_fragmentation_and_growth_match_the_definition() -> None:
    rng = np.random.default_rng(3)
    shares = [100, 250, 500, 800, 1000, 2000, 4000, 0]
    workload = tuple(TypicalTask(int(rng.integers(0, 4)) * 4000, s, float(rng.random())) for s in shares)
    compiled = CompiledWorkload.of(workload)
    gpus = rng.choice(np.arange(0, 1001, 50), size=(40, 4))
    gpus[:10] = 1000
    cpu = rng.integers(0, 5, size=40) * 4000
    measured = fragmentation(gpus, cpu, compiled)
    expected = [reference_fragmentation(list(g), int(c), workload) for g, c in zip(gpus, cpu, strict=True)]
    assert measured.tolist() == pytest.approx(expected)
    for request in (
        TaskRequest(300, 4000),
        TaskRequest(1000, 0),
        TaskRequest(2000, 4000),
        TaskRequest(0, 4000),
    ):
        growth = fragmentation_growth(gpus, cpu, request, compiled)
        for row, column in itertools.product(range(40), range(growth.shape[1])):
            after = gpus[row].copy()
            if request.is_fractional:
                if after[column] < request.gpu_milli:
                    assert np.isnan(growth[row, column])
                    continue
                after[column] -= request.gpu_milli
            elif request.whole_gpus:
                free = np.flatnonzero(after == 1000)
                if len(free) < request.whole_gpus:
                    continue
                after[free[: request.whole_gpus]] = 0
            if cpu[row] < request.cpu_milli:
                continue
            new = reference_fragmentation(list(after), int(cpu[row]) - request.cpu_milli, workload)
            assert growth[row, column] == pytest.approx(new - expected[row]), (row, column)


def test_a_placement_that_changes_no_fit_has_a_growth_of_exactly_zero() -> None:
    # FGD scores a growth of 0 as 50 and one of 1e-12 as 49, so the stats cached for a node on its
    # own and the growth computed among many nodes must agree to the last bit (a matrix product did not).
    rng = np.random.default_rng(7)
    shares = rng.choice([100, 250, 500, 750, 1000, 2000, 4000, 8000], size=30)
    workload = tuple(
        TypicalTask(int(rng.integers(1, 33)) * 1000, int(g), float(rng.random())) for g in shares
    )
    compiled = CompiledWorkload.of(workload)
    gpus = rng.choice(np.arange(0, 1001, 50), size=(300, 8))
    cpu = (
        rng.integers(0, 64, size=300) * 2000 + 500
    )  # never at a shape's CPU, so 1 milli-core fewer changes no fit
    alone = [node_stats(gpus[i : i + 1], cpu[i : i + 1], compiled) for i in range(len(cpu))]
    cached = NodeStats(
        np.concatenate([a.counts for a in alone]),
        np.concatenate([a.usable for a in alone]),
        np.concatenate([a.frag for a in alone]),
    )
    growth = fragmentation_growth(gpus, cpu, TaskRequest(0, 1), compiled, cached)
    assert (growth == 0.0).all()


def test_typical_workload_keeps_the_most_frequent_shapes_up_to_coverage() -> None:
    requests = [TaskRequest(500, 1000)] * 6 + [TaskRequest(1000, 2000)] * 3 + [TaskRequest(0, 4000)]
    assert typical_workload(requests, coverage=0.9) == (
        TypicalTask(1000, 500, 6 / 9),
        TypicalTask(2000, 1000, 3 / 9),
    )
    assert len(typical_workload(requests, coverage=1.0)) == 3
    with pytest.raises(ModelError):
        typical_workload(requests, coverage=0.0)


def test_stranded_gpu_counts_free_gpu_the_free_cpu_cannot_serve() -> None:
    # 4000 milli-GPU free, 24000 milli-cores at 12 per milli-GPU serve 2000 of them
    assert stranded_gpu(np.array([4000.0, 1000.0]), np.array([24000.0, 24000.0]), 12.0).tolist() == [
        2000.0,
        0.0,
    ]


def test_fgd_balanced_prefers_the_cpu_rich_node_when_fragmentation_ties() -> None:
    cluster = a_cluster().nodes(2).build()
    ctx = context(cluster)
    use(ctx, 0, (0,), 1000, cpu=100_000)  # n0: 7 GPUs free, 28 cores; n1: 8 GPUs, 128 cores
    workload = (TypicalTask(4000, 1000, 1.0),)
    fgd = FragmentationGradient(FgdArgs(workload=workload, integer_scores=False))
    balanced = FgdBalanced(FgdBalancedArgs(workload=workload, integer_scores=False))
    job = task(1000, 8000)
    plain = fgd.score(job, job.request, ctx)
    assert plain[0] == plain[1]
    assert np.argmax(balanced.score(job, job.request, ctx)) == 1


# The openb protocol, small: one seed, shape and monotonicity (the full comparison is the benchmark).


@pytest.fixture(scope="module")
def openb():  # type: ignore[no-untyped-def]
    pods = reference_data("openb/openb_pod_list_default.csv")
    nodes = reference_data("openb/openb_node_list_gpu_node.csv")
    return load_openb(pods, nodes)


def test_openb_arrivals_hold_the_trace_then_draws_up_to_the_ratio(openb) -> None:  # type: ignore[no-untyped-def]
    assert len(openb.pods) == 8152
    assert openb.total_gpus == 6212
    order = arrivals(openb, np.random.default_rng(42), ratio=1.3)
    assert sorted(order[:8152].tolist()) == sorted(openb.pods.tolist())
    requested = sum(openb.shapes[s].gpu_milli for s in order)
    assert 1.29 * 6_212_000 < requested <= 1.3 * 6_212_000 + 7000


def test_discrete_curve_averages_the_pods_at_each_level() -> None:
    run = SeedRun(np.array([0, 10, 20, 60, 90]), np.array([0, 10, 20, 40, 40]), failed=1)
    curve = discrete_curve(run, total_gpus=10, levels=np.array([0, 1, 2, 5, 9, 12]))
    # arrival % = [0, 0.1, 0.2, 0.6, 0.9] rounds to [0, 0, 0, 1, 1]; level 2: none, within one: level 1
    assert curve[:3].tolist() == [0.1, 0.4, 0.4]
    assert np.isnan(curve[3:]).all()


def test_discrete_curve_rounds_a_level_mean_as_the_authors_pandas_does() -> None:
    # Levels 0 and 1 hold allocations of 0.01/0.02% and 0.02/0.03%: means 0.015 and 0.025, which
    # numpy rounds (times 100, half to even) to 0.02 and 0.02; an exact sum rounded by Python's
    # round gives 0.01 and 0.03 (0.015 is stored just below, 0.025 just above).
    run = SeedRun(np.array([0, 0, 1000, 1000]), np.array([10, 20, 20, 30]), failed=0)
    curve = discrete_curve(run, total_gpus=100, levels=np.array([0, 1]))
    assert curve.tolist() == [0.02, 0.02]


@pytest.mark.parametrize("policy", ["Best-fit", "FGD"])
def test_openb_one_seed_curve_is_monotone_and_saturates(openb, policy: str) -> None:  # type: ignore[no-untyped-def]
    run = run_seed(policy, openb, 42)
    curve = discrete_curve(run, openb.total_gpus)
    assert curve.shape == LEVELS.shape
    assert not np.isnan(curve).any()
    assert (np.diff(curve) >= 0).all()
    assert curve[50] == pytest.approx(50.0, abs=0.2)
    assert 90.0 < curve[-1] <= 100.0
    assert run.failed > 0


def test_openb_run_is_deterministic(openb) -> None:  # type: ignore[no-untyped-def]
    order = arrivals(openb, np.random.default_rng(1), ratio=0.3)
    node_order = np.arange(len(openb.nodes))
    runs = [place_all(RandomShare(), openb, order, node_order, np.random.default_rng(5)) for _ in range(2)]
    assert runs[0].allocated_milli.tolist() == runs[1].allocated_milli.tolist()
