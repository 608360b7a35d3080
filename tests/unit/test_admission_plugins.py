"""quota, dedicated, size-zones and resource-types: tables of small clusters computed by hand.

Cycle-level cases drive ``Scheduler.cycle`` on one snapshot; run-level cases
drive the simulator and read the job table. The builders do not set node
labels, running jobs or per-task CPU, so the helpers here add them.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

import numpy as np
import pytest

from builders import JobBuilder, a_cluster, a_job, a_node, a_snapshot, bind_of, by_id, cycle, nodes_of, trace
from loadmaster.errors import ConfigError
from loadmaster.model import (
    ClusterSnapshot,
    Job,
    Node,
    NodeTable,
    PendingJob,
    ResourceType,
    RunningJob,
    TaskPlacement,
    TaskRequest,
    TraceJob,
)
from loadmaster.scheduling import Code, PluginSpec, Preempt, Profile, Scheduler, build_profile
from loadmaster.scheduling.framework import CycleContext, VictimPlugin
from loadmaster.scheduling.plugins.admission import ADMISSION_PLUGINS
from loadmaster.scheduling.registry import PLUGINS
from loadmaster.scheduling.state import WorkingState
from loadmaster.sim import RunResult, SimOptions, simulate


def build(
    *specs: tuple[str, Mapping[str, Any]], strict: bool = False, actions: Sequence[str] = ("allocate",)
) -> Profile:
    """fifo (strict or not), gang, first-fit, then the given plugins with their arguments."""
    plugins = [PluginSpec("fifo", {"strict": strict}), PluginSpec("gang", {}), PluginSpec("first-fit", {})]
    return build_profile("test", actions, [*plugins, *(PluginSpec(n, a) for n, a in specs)])


def quota_profile(args: Mapping[str, Any], strict: bool = False) -> Profile:
    """A profile with quota; it needs the admit action, and the preempt action for its reclaim."""
    return build(("quota", args), strict=strict, actions=("admit", "allocate", "preempt"))


def job_of(group: str, gpus: float, job_id: str = "j", tasks: int = 1) -> JobBuilder:
    return a_job(job_id).user(f"u-{group}", group).gpus(gpus).tasks(tasks)


def simulate_jobs(cluster: NodeTable, chosen: Profile, jobs: list[TraceJob]) -> RunResult:
    return simulate(cluster, Scheduler(chosen), jobs, SimOptions(seed=0))


def test_every_plugin_is_registered_under_its_name() -> None:
    assert {name: cls.name for name, cls in ADMISSION_PLUGINS.items()} == {
        "quota": "quota",
        "dedicated": "dedicated",
        "size-zones": "size-zones",
        "resource-types": "resource-types",
    }


# quota


ORGS = {
    "ai": {
        "groups": {
            "lab-a": {"nominal": 8, "borrowing_limit": 4},
            "lab-b": {"nominal": 8, "lending_limit": 2},
            "lab-c": {"nominal": 4},
        }
    },
    "ml": {"groups": {"lab-m": {"nominal": 4}}},
}
"""org ai: lab-a borrows at most 4, lab-b lends at most 2, lab-c borrows and lends freely."""

BIG = a_cluster().nodes(8, gpus=8).build()
"""64 GPUs: room for every quota case, so only quota decides."""


def running(job: Job, node: int, start_s: float = 0.0) -> RunningJob:
    """``job`` holding whole GPUs from GPU 0 of ``node`` (one task per node)."""
    gpus = job.request.whole_gpus
    placement = TaskPlacement(node, tuple(range(gpus)), 1000, 0, 0)
    return RunningJob(job, (placement,), start_s)


def snapshot_with(
    cluster: NodeTable, held: Sequence[RunningJob], pending: Sequence[Job | JobBuilder]
) -> ClusterSnapshot:
    """A snapshot where each running job holds the first GPUs of its node."""
    builder = a_snapshot(cluster).pending(*pending)
    for r in held:
        builder.used(cluster.nodes[r.placements[0].node].name, r.job.request.whole_gpus)
    return replace(builder.build(), running=tuple(held))


def usage(*groups: tuple[str, int]) -> list[RunningJob]:
    """One running job per (group, GPUs), each on its own node."""
    return [running(job_of(g, n, f"r{i}-{g}").build(), i) for i, (g, n) in enumerate(groups)]


SURPLUS = {
    "orgs": {"o": {"nominal": 12, "groups": {"x": {"nominal": 4}, "y": {"nominal": 4, "lending_limit": 0}}}}
}
"""org o holds 12 GPUs, 4 of them unassigned; y lends nothing."""


@dataclass(frozen=True)
class QuotaCase:
    held: tuple[tuple[str, int], ...]
    group: str
    gpus: int
    code: Code
    says: str = ""
    args: Mapping[str, Any] | None = None


QUOTA_CASES = {
    "within nominal": QuotaCase((("lab-a", 4),), "lab-a", 4, Code.SUCCESS),
    "borrows up to its borrowing limit": QuotaCase((("lab-a", 8),), "lab-a", 4, Code.SUCCESS),
    "not beyond its borrowing limit": QuotaCase(
        (("lab-a", 8),),
        "lab-a",
        5,
        Code.WAIT,
        "quota lab-a: uses 8 of nominal 8 GPUs, needs 5; may borrow 4 more (borrowing limit 4), "
        "org ai can lend 6 more",
    ),
    "the excess only counts above nominal": QuotaCase((("lab-a", 6),), "lab-a", 6, Code.SUCCESS),
    "lending limit caps what a busy org lends": QuotaCase(
        (("lab-a", 8), ("lab-c", 4)), "lab-c", 2, Code.SUCCESS
    ),
    "lending limit respected": QuotaCase(
        (("lab-a", 8), ("lab-c", 4)),
        "lab-c",
        3,
        Code.WAIT,
        "quota lab-c: uses 4 of nominal 4 GPUs, needs 3; may borrow any amount (no borrowing limit), "
        "org ai can lend 2 more",
    ),
    "what others borrow is not lent twice": QuotaCase(
        (("lab-a", 8), ("lab-a", 2), ("lab-c", 4)), "lab-c", 1, Code.WAIT, "org ai can lend 0 more"
    ),
    "another org lends nothing": QuotaCase((("lab-m", 4),), "lab-m", 1, Code.WAIT, "org ml can lend 0 more"),
    "a group that can never borrow": QuotaCase(
        (), "lab-m", 5, Code.UNRESOLVABLE, "needs 5 GPUs, more than the group can ever hold (4: nominal 4"
    ),
    "a job larger than the group can ever hold": QuotaCase(
        (), "lab-a", 13, Code.UNRESOLVABLE, "needs 13 GPUs, more than the group can ever hold (12"
    ),
    "unknown group rejected": QuotaCase(
        (), "lab-z", 1, Code.UNRESOLVABLE, "group 'lab-z' has no quota (groups with quota: lab-a"
    ),
    "unknown group allowed": QuotaCase(
        (), "lab-z", 1, Code.SUCCESS, args={"orgs": ORGS, "unknown_group": "allow"}
    ),
    "the org's unassigned GPUs can be borrowed": QuotaCase(
        (("x", 4),),
        "x",
        4,
        Code.SUCCESS,
        args=SURPLUS,
    ),
    "but not more than the org holds": QuotaCase(
        (("x", 4),),
        "x",
        5,
        Code.WAIT,
        "org o can lend 4 more",
        args=SURPLUS,
    ),
}


@pytest.mark.parametrize("case", QUOTA_CASES.values(), ids=QUOTA_CASES.keys())
def test_quota_admission(case: QuotaCase) -> None:
    snapshot = snapshot_with(BIG, usage(*case.held), [job_of(case.group, case.gpus, "p").submitted(1)])
    result = cycle(quota_profile(case.args or {"orgs": ORGS}), snapshot)

    if case.code is Code.SUCCESS:
        assert bind_of(result, "p") is not None, result.statuses
        return
    assert bind_of(result, "p") is None
    status = result.statuses["p"]
    assert (status.code, status.plugin) == (case.code, "quota")
    assert case.says in status.reason


def test_two_jobs_of_one_cycle_cannot_together_exceed_the_quota() -> None:
    orgs = {"solo": {"groups": {"lab-s": {"nominal": 6, "borrowing_limit": 0}}}}
    snapshot = a_snapshot(BIG).pending(job_of("lab-s", 4, "first"), job_of("lab-s", 4, "second")).build()
    result = cycle(quota_profile({"orgs": orgs}), snapshot)

    assert bind_of(result, "first") is not None
    assert bind_of(result, "second") is None
    status = result.statuses["second"]
    assert status.code is Code.WAIT
    assert status.reason.startswith("quota lab-s: uses 4 of nominal 6 GPUs, needs 4")


def test_a_share_of_a_gpu_counts_as_that_share() -> None:
    orgs = {"solo": {"groups": {"lab-s": {"nominal": 1, "borrowing_limit": 0}}}}
    halves = [job_of("lab-s", 0.5, f"h{i}").submitted(i) for i in range(3)]
    result = cycle(quota_profile({"orgs": orgs}), a_snapshot(BIG).pending(*halves).build())

    assert [b.job_id for b in result.binds] == ["h0", "h1"]
    assert result.statuses["h2"].reason.startswith("quota lab-s: uses 1 of nominal 1 GPUs, needs 0.5")


def test_a_job_that_does_not_fit_the_cluster_uses_no_quota() -> None:
    # Two 4-GPU fragments: the 8-GPU job is admitted by quota but cannot be placed.
    cluster = a_cluster().nodes(2, gpus=8).build()
    orgs = {"solo": {"groups": {"lab-s": {"nominal": 8, "borrowing_limit": 0}}}}
    snapshot = (
        a_snapshot(cluster)
        .used("n0", 4)
        .used("n1", 4)
        .pending(job_of("lab-s", 8, "big").submitted(0), job_of("lab-s", 4, "small").submitted(1))
        .build()
    )
    result = cycle(quota_profile({"orgs": orgs}), snapshot)

    assert bind_of(result, "big") is None
    assert result.statuses["big"].plugin == "fit"
    assert result.statuses["big"].code is Code.UNSCHEDULABLE
    assert bind_of(result, "small") is not None  # 4 of 8 GPUs of quota: the big job took none


def test_partly_bound_gangs_count_and_only_their_remaining_tasks_are_asked_for() -> None:
    orgs = {"solo": {"groups": {"lab-s": {"nominal": 4, "borrowing_limit": 0}}}}
    partial = PendingJob(
        job_of("lab-s", 1, "partial", tasks=3).build(), (TaskPlacement(0, (0,), 1000, 0, 0),)
    )
    fresh = job_of("lab-s", 2, "fresh").submitted(1).build()
    snapshot = replace(a_snapshot(BIG).used("n0", 1).build(), pending=(partial, PendingJob(fresh)))
    result = cycle(quota_profile({"orgs": orgs}), snapshot)

    assert bind_of(result, "partial") is not None  # 1 held + 2 more = 3
    assert result.statuses["fresh"].reason.startswith("quota lab-s: uses 3 of nominal 4 GPUs, needs 2")


def test_quota_serialises_a_group_in_simulation_while_another_group_runs() -> None:
    orgs = {"ai": {"groups": {"lab-a": {"nominal": 4, "borrowing_limit": 0}, "lab-b": {"nominal": 12}}}}
    jobs = [trace(job_of("lab-a", 4, f"a{i}"), 100) for i in range(3)] + [trace(job_of("lab-b", 8, "b"), 100)]
    result = simulate_jobs(a_cluster().nodes(2, gpus=8).build(), quota_profile({"orgs": orgs}), jobs)

    assert by_id(result.jobs, "start_s") == {"a0": 0.0, "a1": 100.0, "a2": 200.0, "b": 0.0}


# quota: reclaim


RECLAIM_ORGS = {"orgs": ORGS, "min_runtime_s": 600}


def victims_of(
    pending: JobBuilder,
    held: Sequence[RunningJob],
    now: float = 1000.0,
    args: Mapping[str, Any] | None = None,
) -> list[str]:
    chosen = quota_profile(args or RECLAIM_ORGS)
    plugin: VictimPlugin = chosen.victims[0]
    snapshot = snapshot_with(BIG, held, [pending])
    ctx = CycleContext(now, np.random.default_rng(0), snapshot, WorkingState.from_snapshot(snapshot))
    return [r.job.id for r in plugin.select_victims(PendingJob(pending.build()), list(held), ctx)]


def lab_b_borrowing(b1_class: str = "normal") -> list[RunningJob]:
    """lab-b holds 14 of nominal 8 (b1 old, b2 younger, b3 too young); lab-c and lab-m stay within theirs."""
    return [
        running(job_of("lab-b", 8, "b1").priority(b1_class).build(), 0, start_s=0),
        running(job_of("lab-b", 4, "b2").build(), 1, start_s=300),
        running(job_of("lab-b", 2, "b3").build(), 2, start_s=950),
        running(job_of("lab-c", 4, "c1").build(), 3, start_s=0),
        running(job_of("lab-m", 2, "m1").build(), 4, start_s=0),
    ]


RECLAIM_CASES = {
    "borrowers' jobs, youngest first, while they still borrow": (
        job_of("lab-a", 4),
        1000.0,
        "normal",
        ["b2", "b1"],
    ),
    "lower priority first; the group then no longer borrows": (job_of("lab-a", 4), 1000.0, "low", ["b1"]),
    "jobs younger than min_runtime_s are spared": (job_of("lab-a", 4), 600.0, "normal", ["b1"]),
    "a job that would exceed its nominal may not reclaim": (job_of("lab-a", 12), 1000.0, "normal", []),
    "groups of other orgs never reclaim": (job_of("lab-m", 1), 1000.0, "normal", []),
    "a group without quota never reclaims": (job_of("lab-z", 1), 1000.0, "normal", []),
}


@pytest.mark.parametrize("case", RECLAIM_CASES.values(), ids=RECLAIM_CASES.keys())
def test_reclaim_victims(case: tuple[JobBuilder, float, str, list[str]]) -> None:
    pending, now, b1_class, expected = case
    assert victims_of(pending, lab_b_borrowing(b1_class), now) == expected


def test_no_victims_when_no_group_borrows() -> None:
    held = usage(("lab-b", 8), ("lab-c", 4))
    assert victims_of(job_of("lab-a", 8), held) == []


def test_reclaim_evicts_a_borrower_so_that_a_group_gets_its_nominal() -> None:
    # lab-b holds the whole 16-GPU cluster, 8 of them borrowed from lab-a.
    cluster = a_cluster().nodes(2, gpus=8).build()
    held = [
        running(job_of("lab-b", 8, "old").build(), 0, start_s=0),
        running(job_of("lab-b", 8, "young").build(), 1, start_s=500),
    ]
    orgs = {"ai": {"groups": {"lab-a": {"nominal": 8}, "lab-b": {"nominal": 8}}}}
    snapshot = snapshot_with(cluster, held, [job_of("lab-a", 8, "a").submitted(900)])
    result = cycle(quota_profile({"orgs": orgs}), snapshot, now=1200.0)

    assert [d.job_id for d in result.decisions if isinstance(d, Preempt)] == ["young"]
    bind = bind_of(result, "a")
    assert bind is not None
    assert nodes_of(cluster, bind) == ["n1"]


def test_waiting_jobs_of_one_group_and_size_ask_reclaim_once_per_state(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The preempt action asks the victim plugins once per ``victims_key`` until a bind or an
    eviction: five lab-a jobs of 4 GPUs, each within lab-a's nominal, none able to start on the
    full cluster, none with a borrower to reclaim from (lab-b holds its nominal, lab-z has no quota)."""
    cluster = a_cluster().nodes(2, gpus=8).build()
    held = [running(job_of("lab-b", 8, "b").build(), 0), running(job_of("lab-z", 8, "z").build(), 1)]
    orgs = {"ai": {"groups": {"lab-a": {"nominal": 8}, "lab-b": {"nominal": 8}}}}
    waiting = [job_of("lab-a", 4, f"a{i}").submitted(100 + i) for i in range(5)]
    chosen = quota_profile({"orgs": orgs, "unknown_group": "allow"})
    plugin = chosen.victims[0]
    asked: list[str] = []
    select = plugin.select_victims

    def counted(
        pending: PendingJob, running: Sequence[RunningJob], ctx: CycleContext
    ) -> Sequence[RunningJob]:
        asked.append(pending.job.id)
        return select(pending, running, ctx)

    monkeypatch.setattr(plugin, "select_victims", counted)
    result = cycle(chosen, snapshot_with(cluster, held, waiting), now=1200.0)
    assert not result.binds and not [d for d in result.decisions if isinstance(d, Preempt)]
    assert asked == ["a0"]
    assert plugin.victims_key(PendingJob(waiting[3].build())) == ("lab-a", 4.0)


# dedicated


def labelled(name: str, zone: str = "z0", **labels: str) -> Node:
    return replace(a_node(name).rack("r0", zone=zone).build(), labels=labels)


def table(*nodes: Node, types: Sequence[ResourceType] = ()) -> NodeTable:
    known = {t.name: t for t in types} or {"gpu": ResourceType("gpu", "test", 80_000, 0, 0)}
    return NodeTable.build(nodes, known)


SHARED_THEN_DEDICATED = table(
    labelled("n0"), labelled("n1"), labelled("d0", team="a"), labelled("d1", team="a")
)
"""First-fit prefers the shared nodes n0, n1; d0 and d1 are dedicated to lab-a."""

DEDICATED_CASES = {
    "the owner is confined to its nodes": ("lab-a", False, {}, "d0"),
    "with spill the owner may use shared nodes": ("lab-a", True, {}, "n0"),
    "another group never uses them": ("g1", False, {"n0": 8, "n1": 8}, None),
    "another group uses shared nodes": ("g1", False, {}, "n0"),
    "spill never reaches another group's nodes": ("lab-b", True, {}, "n0"),
}


@pytest.mark.parametrize("case", DEDICATED_CASES.values(), ids=DEDICATED_CASES.keys())
def test_dedicated_nodes(case: tuple[str, bool, dict[str, int], str | None]) -> None:
    group, spill, used, expected = case
    args = {"groups": {"lab-a": {"team": "a"}, "lab-b": {"team": "b"}}, "spill": spill}
    snapshot = a_snapshot(SHARED_THEN_DEDICATED)
    for node, gpus in used.items():
        snapshot.used(node, gpus)
    result = cycle(build(("dedicated", args)), snapshot.pending(job_of(group, 8, "j")).build())

    bind = bind_of(result, "j")
    if expected is None:
        assert bind is None
        assert result.statuses["j"].plugin in {"fit", "dedicated"}
    else:
        assert bind is not None
        assert nodes_of(SHARED_THEN_DEDICATED, bind) == [expected]


def test_jobs_that_can_never_fit_their_nodes_are_rejected_at_arrival() -> None:
    args = {"groups": {"lab-a": {"team": "a"}, "lab-x": {"team": "x"}}}
    jobs = [
        trace(job_of("lab-a", 8, "too-big", tasks=3), 10),
        trace(job_of("lab-a", 8, "fits", tasks=2), 10),
        trace(job_of("lab-x", 1, "no-nodes"), 10),
    ]
    result = simulate_jobs(SHARED_THEN_DEDICATED, build(("dedicated", args)), jobs)

    reasons = by_id(result.jobs, "reason")
    assert reasons["fits"] == ""
    assert reasons["too-big"].startswith("rejected")
    assert "gang of 3 tasks: 2 placed" in reasons["too-big"]
    assert (
        "dedicated: group lab-x may use only its dedicated nodes (team=x), and there are none"
        in (reasons["no-nodes"])
    )


def test_dedicated_filter_reasons_name_the_group_and_selector() -> None:
    chosen = build(("dedicated", {"groups": {"lab-a": {"team": "a"}}}))
    snapshot = a_snapshot(SHARED_THEN_DEDICATED).build()
    ctx = CycleContext(0.0, np.random.default_rng(0), snapshot, WorkingState.from_snapshot(snapshot))
    owner = chosen.filters[0].filter(job_of("lab-a", 1).build(), ctx)
    other = chosen.filters[0].filter(job_of("g1", 1).build(), ctx)

    assert owner.mask.tolist() == [False, False, True, True]
    assert "group lab-a may use only its dedicated nodes (team=a)" in owner.reason
    assert other.mask.tolist() == [True, True, False, False]
    assert "group g1 may use only shared nodes (dedicated: team=a to lab-a)" in other.reason
    assert chosen.filters[0].memo_key(job_of("lab-a", 1).build()) == "lab-a"


# size-zones


ZONED = table(
    labelled("s0", zone="small"),
    labelled("s1", zone="small"),
    labelled("l0", zone="large"),
    labelled("l1", zone="large"),
    labelled("o0", zone="open"),
)
"""Two small-zone nodes, two large-zone nodes, and one node in a zone no rule names."""

RULES = [{"zone": "small", "max_gpus": 4}, {"zone": "large", "min_gpus": 8}]

ZONE_CASES = {
    "a small job goes to the small zone": (1, (), {}, "s0"),
    "a large job goes to the large zone": (8, (), {}, "l0"),
    "a job no rule holds uses only open zones": (6, (), {}, "o0"),
    "a small job does not spill without overflow": (2, (), {"s0": 8, "s1": 8}, "o0"),
    "overflow lets a small job use the large zone": (2, ("small->large",), {"s0": 8, "s1": 8}, "l0"),
    "overflow is one way": (8, ("small->large",), {"l0": 8, "l1": 8}, "o0"),
    "a small job fills its own zone before open ones": (2, (), {"s0": 8}, "s1"),
}


@pytest.mark.parametrize("case", ZONE_CASES.values(), ids=ZONE_CASES.keys())
def test_size_zones(case: tuple[int, tuple[str, ...], dict[str, int], str]) -> None:
    gpus, overflow, used, expected = case
    snapshot = a_snapshot(ZONED)
    for node, taken in used.items():
        snapshot.used(node, taken)
    chosen = build(("size-zones", {"zones": RULES, "overflow": list(overflow)}))
    result = cycle(chosen, snapshot.pending(a_job("j").gpus(gpus)).build())

    bind = bind_of(result, "j")
    assert bind is not None, result.statuses
    assert nodes_of(ZONED, bind) == [expected]


def test_a_job_with_no_zone_and_no_open_nodes_is_rejected_with_the_rule() -> None:
    closed = table(labelled("s0", zone="small"), labelled("l0", zone="large"))
    jobs = [trace(a_job("six").gpus(6), 10), trace(a_job("one").gpus(1), 10)]
    result = simulate_jobs(closed, build(("size-zones", {"zones": RULES})), jobs)

    reasons = by_id(result.jobs, "reason")
    assert reasons["one"] == ""
    assert (
        "size-zones: a 6-GPU job matches no size rule, so it may use only zones no rule names: none"
        in (reasons["six"])
    )


# resource-types

A100 = ResourceType("a100", "A100", 81_920, cpu_milli_per_gpu=12_000, memory_mib_per_gpu=122_880)
T4 = ResourceType("t4", "T4", 16_384, cpu_milli_per_gpu=4_000, memory_mib_per_gpu=16_384)
TYPED = table(
    replace(labelled("t0"), resource_type="t4"),
    replace(labelled("a0"), resource_type="a100"),
    types=(A100, T4),
)


def typed_job(
    job_id: str, gpu_milli: int, cpu_milli: int = 0, memory_mib: int = 0, rtype: str | None = "a100"
) -> Job:
    request = TaskRequest(gpu_milli=gpu_milli, cpu_milli=cpu_milli, memory_mib=memory_mib)
    return replace(a_job(job_id).build(), request=request, resource_type=rtype)


TYPE_CASES = {
    "within the bundle": (typed_job("j", 1000, 12_000, 122_880), {}, "a0", ""),
    "oversized CPU": (
        typed_job("j", 1000, 64_000),
        {},
        None,
        "each task of 1 GPU(s) of type a100 asks 64000m CPU (the bundle is 12000m per GPU: at most 12000m)",
    ),
    "oversized memory": (typed_job("j", 2000, 0, 300_000), {}, None, "300000 MiB memory"),
    "half a GPU gets half a bundle": (typed_job("j", 500, 6_000), {}, "a0", ""),
    "and no more": (
        typed_job("j", 500, 7_000),
        {},
        None,
        "asks 7000m CPU (the bundle is 12000m per GPU: at most 6000m)",
    ),
    "no type when one is required": (
        typed_job("j", 1000, rtype=None),
        {},
        None,
        "resource-types: the job names no resource type; ask for one of a100, t4",
    ),
    "no type, not required: a type whose bundle fits": (
        typed_job("j", 1000, 8_000, rtype=None),
        {"require_type": False},
        "a0",
        "",
    ),
    "no type, not required, fits no bundle": (
        typed_job("j", 1000, 16_000, rtype=None),
        {"require_type": False},
        None,
        "exceeds the bundle of a100: 16000m CPU",
    ),
    "bundle not enforced": (typed_job("j", 1000, 64_000), {"enforce_bundle": False}, "a0", ""),
}


@pytest.mark.parametrize("case", TYPE_CASES.values(), ids=TYPE_CASES.keys())
def test_resource_types(case: tuple[Job, dict[str, bool], str | None, str]) -> None:
    job, args, node, says = case
    chosen = build(("resource-types", args))
    result = simulate_jobs(TYPED, chosen, [TraceJob(job, 10)])

    reason = by_id(result.jobs, "reason")["j"]
    if node is None:
        assert reason.startswith("rejected")
        assert says in reason
    else:
        assert reason == ""
        assert by_id(result.jobs, "node_names")["j"] == node


# configuration errors


ARG_ERRORS = {
    "negative nominal": (
        "quota",
        {"orgs": {"ai": {"groups": {"lab-a": {"nominal": -1}}}}},
        "args.orgs.ai.groups.lab-a.nominal",
        "greater than or equal to 0",
    ),
    "org below its groups": (
        "quota",
        {"orgs": {"ai": {"nominal": 4, "groups": {"lab-a": {"nominal": 8}}}}},
        "args.orgs.ai",
        "nominal 4 is below the sum of its groups' nominal quotas (8)",
    ),
    "a group in two orgs": (
        "quota",
        {"orgs": {"x": {"groups": {"g": {"nominal": 1}}}, "y": {"groups": {"g": {"nominal": 1}}}}},
        "args",
        "group 'g' is listed under both 'x' and 'y'",
    ),
    "unknown_group": ("quota", {"unknown_group": "maybe"}, "args.unknown_group", "'reject' or 'allow'"),
    "empty selector": ("dedicated", {"groups": {"lab-a": {}}}, "args", "groups.lab-a: the selector is empty"),
    "overflow to an unknown zone": (
        "size-zones",
        {"zones": RULES, "overflow": ["small->huge"]},
        "args",
        "overflow[0]: 'small->huge' names zone 'huge', which no rule names; zones: small, large",
    ),
    "overflow not of the form": (
        "size-zones",
        {"zones": RULES, "overflow": ["small-large"]},
        "args",
        "overflow[0]: 'small-large' is not of the form 'from->to'",
    ),
    "min above max": (
        "size-zones",
        {"zones": [{"zone": "z", "min_gpus": 8, "max_gpus": 4}]},
        "args.zones.0",
        "min_gpus 8",
    ),
    "require_type": ("resource-types", {"require_type": "perhaps"}, "args.require_type", "valid boolean"),
}


@pytest.mark.parametrize("case", ARG_ERRORS.values(), ids=ARG_ERRORS.keys())
def test_bad_args_are_config_errors_naming_the_field(case: tuple[str, dict[str, Any], str, str]) -> None:
    name, args, field, says = case
    with pytest.raises(ConfigError) as caught:
        build((name, args), actions=("admit", "allocate", "preempt"))

    assert caught.value.field == f"profiles.test.plugins[3].{field}"
    assert says in caught.value.detail


def test_every_victim_plugin_that_gives_keys_says_so() -> None:
    """``VictimPlugin.keyed`` is what the preempt action trusts: a plugin that overrides
    ``victims_key`` sets it, and one that does not leaves it False."""
    victims = {name: cls for name, cls in PLUGINS.items() if issubclass(cls, VictimPlugin)}
    assert "quota" in victims
    for name, cls in victims.items():
        assert cls.keyed == (cls.victims_key is not VictimPlugin.victims_key), name
