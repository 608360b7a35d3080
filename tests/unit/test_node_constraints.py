"""Taints, tolerations, node affinity, cordons and pod limits: the rules, then the plugins in a cycle.

Cases follow kube-scheduler's tests and sources (tainttoleration, nodeaffinity,
nodeunschedulable plugins; k8s.io/api toleration.go; apimachinery labels).
"""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from builders import a_cluster, a_job, a_node, a_snapshot, bind_of, cycle, nodes_of, profile
from loadmaster.config import load_cluster
from loadmaster.model import (
    NodeAffinity,
    PreferredTerm,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from loadmaster.scheduling import PluginSpec, Preempt, Scheduler
from loadmaster.scheduling.profile import with_plugins

# ----------------------------------------------------------------------------- tolerations

GPU_TAINT = Taint("nvidia.com/gpu", "present", "NoSchedule")


@pytest.mark.parametrize(
    ("toleration", "taint", "expected"),
    [
        (Toleration("nvidia.com/gpu", "Equal", "present", "NoSchedule"), GPU_TAINT, True),
        (Toleration("nvidia.com/gpu", "", "present", "NoSchedule"), GPU_TAINT, True),  # "" means Equal
        (Toleration("nvidia.com/gpu", "Equal", "absent", "NoSchedule"), GPU_TAINT, False),
        (Toleration("nvidia.com/gpu", "Exists", "", ""), GPU_TAINT, True),  # every effect
        (Toleration("nvidia.com/gpu", "Exists", "", "NoExecute"), GPU_TAINT, False),
        (Toleration("", "Exists"), GPU_TAINT, True),  # empty key + Exists: everything
        (Toleration("other", "Exists"), GPU_TAINT, False),
        (Toleration("n", "Lt", "10"), Taint("n", "5"), True),  # taint value below the toleration's
        (Toleration("n", "Lt", "10"), Taint("n", "15"), False),
        (Toleration("n", "Gt", "10"), Taint("n", "15"), True),
        (Toleration("n", "Gt", "x"), Taint("n", "15"), False),  # not an integer: no match
        (Toleration("n", "Bogus", "1"), Taint("n", "1"), False),
    ],
)
def test_a_toleration_tolerates_as_kubernetes_does(
    toleration: Toleration, taint: Taint, expected: bool
) -> None:
    assert toleration.tolerates(taint) is expected


# ----------------------------------------------------------------------------- selectors

LABELS = {"zone": "a", "gpus": "8", "disk": "ssd"}


@pytest.mark.parametrize(
    ("requirement", "expected"),
    [
        (Requirement("zone", "In", ("a", "b")), True),
        (Requirement("zone", "In", ("b",)), False),
        (Requirement("zone", "NotIn", ("b",)), True),
        (Requirement("missing", "NotIn", ("b",)), True),  # NotIn holds without the label
        (Requirement("zone", "Exists"), True),
        (Requirement("missing", "Exists"), False),
        (Requirement("missing", "DoesNotExist"), True),
        (Requirement("zone", "DoesNotExist"), False),
        (Requirement("gpus", "Gt", ("4",)), True),
        (Requirement("gpus", "Gt", ("8",)), False),
        (Requirement("gpus", "Lt", ("16",)), True),
        (Requirement("zone", "Gt", ("1",)), False),  # label not an integer
        (Requirement("missing", "Lt", ("1",)), False),  # Gt/Lt need the label
        (Requirement("gpus", "Gt", ("1", "2")), False),  # invalid: exactly one value
        (Requirement("zone", "In", ()), False),  # invalid: In needs values
        (Requirement("zone", "Exists", ("a",)), False),  # invalid: Exists takes none
        (Requirement("zone", "Like", ("a",)), False),
    ],
)
def test_a_requirement_matches_as_apimachinery_labels_do(requirement: Requirement, expected: bool) -> None:
    assert requirement.matches(LABELS) is expected


ZONE_A = SelectorTerm((Requirement("zone", "In", ("a",)),))
ZONE_B = SelectorTerm((Requirement("zone", "In", ("b",)),))
SSD = SelectorTerm((Requirement("disk", "In", ("ssd",)),))


@pytest.mark.parametrize(
    ("affinity", "expected"),
    [
        (NodeAffinity(), True),  # nothing required
        (NodeAffinity(required=(ZONE_B, ZONE_A)), True),  # terms are ORed
        (NodeAffinity(required=(ZONE_B,)), False),
        (NodeAffinity(required=(SelectorTerm((*ZONE_A.expressions, *ZONE_B.expressions)),)), False),  # ANDed
        (NodeAffinity(required=(SelectorTerm(),)), False),  # an empty term matches nothing
        (NodeAffinity(required=()), False),  # no term: nothing matches
        (NodeAffinity(required=(SelectorTerm(fields=(Requirement("metadata.name", "In", ("n0",)),)),)), True),
        (
            NodeAffinity(required=(SelectorTerm(fields=(Requirement("metadata.name", "In", ("n1",)),)),)),
            False,
        ),
        (
            NodeAffinity(required=(SelectorTerm(fields=(Requirement("metadata.name", "NotIn", ("n1",)),)),)),
            True,
        ),
    ],
)
def test_required_affinity_follows_node_selector_terms(affinity: NodeAffinity, expected: bool) -> None:
    assert affinity.allows("n0", LABELS) is expected


def test_preferred_affinity_sums_the_weights_of_matching_terms() -> None:
    affinity = NodeAffinity(
        preferred=(PreferredTerm(10, ZONE_A), PreferredTerm(5, SSD), PreferredTerm(7, ZONE_B))
    )
    assert affinity.preference("n0", LABELS) == 15
    assert NodeAffinity(preferred=(PreferredTerm(9, SelectorTerm()),)).preference("n0", LABELS) == 0


# ----------------------------------------------------------------------------- plugins in a cycle

KUBE = ("fifo", "gang", "binpack", "node-unschedulable", "taint-toleration", "node-affinity")


def test_one_scheduler_filters_again_when_the_node_table_changes() -> None:
    """A scheduler keeps each shape's allowed nodes across cycles where every filter reads only the
    job and the node table, but a live cluster's new table (a node cordoned since) is filtered anew."""
    scheduler = Scheduler(profile(*KUBE))
    rng = np.random.default_rng(0)
    job = a_job("j").gpus(8)
    open_table = a_cluster().node(a_node("n0")).node(a_node("n1")).build()
    first = scheduler.cycle(a_snapshot(open_table).used("n1", 8).pending(job).build(), 0.0, rng)
    assert nodes_of(open_table, bind_of(first, "j")) == ["n0"]
    cordoned = a_cluster().node(a_node("n0").cordoned()).node(a_node("n1")).build()
    second = scheduler.cycle(a_snapshot(cordoned).used("n1", 8).pending(job).build(), 60.0, rng)
    assert bind_of(second, "j") is None  # with the first table's mask it would take n0 again
    assert second.statuses["j"].reason.endswith("largest free block is 0 on n1")  # n0 is not looked at


def _placed(cluster_nodes: list, job) -> tuple[list[str], str]:  # type: ignore[no-untyped-def,type-arg]
    cluster = a_cluster()
    for node in cluster_nodes:
        cluster = cluster.node(node)
    table = cluster.build()
    result = cycle(profile(*KUBE), a_snapshot(table).pending(job).build())
    bind = bind_of(result, job.build().id)
    status = result.statuses.get(job.build().id)
    return (nodes_of(table, bind) if bind else []), (status.reason if status else "")


@pytest.mark.parametrize(
    ("nodes", "job", "where", "why"),
    [
        ([a_node("n0").taint("gpu", "x"), a_node("n1")], a_job("j"), ["n1"], ""),
        (
            [a_node("n0").taint("gpu", "x")],
            a_job("j"),
            [],
            "taints that the job didn't tolerate (e.g. {gpu: x} on n0)",
        ),
        ([a_node("n0").taint("gpu", "x", "NoExecute")], a_job("j"), [], "didn't tolerate"),
        ([a_node("n0").taint("gpu", "x")], a_job("j").tolerates(Toleration("gpu", "Exists")), ["n0"], ""),
        # PreferNoSchedule only scores: the clean node wins, the tainted one is used when it is all there is.
        ([a_node("n0").taint("s", "", "PreferNoSchedule"), a_node("n1").gpus(4)], a_job("j"), ["n1"], ""),
        ([a_node("n0").taint("s", "", "PreferNoSchedule")], a_job("j"), ["n0"], ""),
        ([a_node("n0").cordoned(), a_node("n1")], a_job("j"), ["n1"], ""),
        ([a_node("n0").cordoned()], a_job("j"), [], "node-unschedulable: 1 node(s) were unschedulable"),
        (
            [a_node("n0").cordoned()],
            a_job("j").tolerates(Toleration("node.kubernetes.io/unschedulable", "Exists", "", "NoSchedule")),
            ["n0"],
            "",
        ),
        (
            [a_node("n0").labels(zone="b"), a_node("n1").labels(zone="a")],
            a_job("j").affinity(NodeAffinity((ZONE_A,))),
            ["n1"],
            "",
        ),
        (
            [a_node("n0").labels(zone="b")],
            a_job("j").affinity(NodeAffinity((ZONE_A,))),
            [],
            "required node affinity",
        ),
        ([a_node("n0"), a_node("n1").labels(disk="ssd")], a_job("j").selector(disk="ssd"), ["n1"], ""),
        # Preferred affinity outweighs binpack's pull to the fuller node.
        (
            [a_node("n0").gpus(2), a_node("n1").labels(zone="a")],
            a_job("j").affinity(NodeAffinity(preferred=(PreferredTerm(1, ZONE_A),))),
            ["n1"],
            "",
        ),
        ([a_node("n0").gpus(2), a_node("n1")], a_job("j"), ["n0"], ""),  # without it, binpack decides
    ],
)
def test_node_constraints_decide_where_a_job_goes(nodes, job, where, why) -> None:  # type: ignore[no-untyped-def]
    placed, reason = _placed(nodes, job)
    assert placed == where
    assert why in reason


def test_a_node_takes_no_more_tasks_than_its_pod_limit() -> None:
    table = a_cluster().node(a_node("n0").max_pods(3)).node(a_node("n1").max_pods(110)).build()
    gang = a_job("g").tasks(4).gpus(1)
    result = cycle(profile(*KUBE), a_snapshot(table).pending(gang).build())
    placed = nodes_of(table, bind_of(result, "g"))  # type: ignore[arg-type]
    assert placed.count("n0") <= 3 and len(placed) == 4


def test_pod_limit_counts_running_tasks_and_says_why() -> None:
    table = a_cluster().node(a_node("n0").max_pods(2)).build()
    snapshot = a_snapshot(table).running(a_job("r").tasks(2).gpus(1), "n0").pending(a_job("j")).build()
    result = cycle(profile(*KUBE), snapshot)
    assert bind_of(result, "j") is None
    assert "pods: want 1 on one node, most free is 0 (allocatable pods) on n0" in result.statuses["j"].reason


def test_with_plugins_keeps_a_listed_plugin_and_appends_the_rest() -> None:
    base = profile("fifo", "binpack", "taint-toleration")
    added = with_plugins(
        base, [PluginSpec("taint-toleration", {}, 3.0), PluginSpec("node-affinity", {}, 2.0)]
    )
    assert [p.name for p in added.plugins] == ["fifo", "binpack", "taint-toleration", "node-affinity"]
    assert added.weights["taint-toleration"] == 1.0 and added.weights["node-affinity"] == 2.0
    assert with_plugins(added, [PluginSpec("node-affinity", {})]) is added


def test_every_job_of_the_same_tolerations_keeps_off_the_tainted_node() -> None:
    table = a_cluster().node(a_node("n0").taint("a")).node(a_node("n1")).build()
    jobs = [a_job(f"j{i}").gpus(1).submitted(i) for i in range(6)]
    result = cycle(profile(*KUBE), a_snapshot(table).pending(*jobs).build())
    assert {tuple(nodes_of(table, b)) for b in result.binds} == {("n1",)}
    assert np.sum([len(b.placements) for b in result.binds]) == 6


def test_a_resolved_priority_value_replaces_the_class_table_and_never_preempts_when_told() -> None:
    table = a_cluster().nodes(1, gpus=8).build()
    low = replace(a_job("low").gpus(8).priority("high").build(), priority_value=5)
    urgent = replace(a_job("urgent").gpus(8).priority("low").submitted(1).build(), priority_value=50)
    polite = replace(urgent, id="polite", may_preempt=False)
    chosen = profile(
        "priority",
        "fifo",
        "gang",
        "binpack",
        "priority-preempt",
        args={"priority-preempt": {"min_runtime_s": 0}},
    )
    result = cycle(chosen, a_snapshot(table).running(low, "n0").pending(urgent).build(), now=10)
    assert [d.job_id for d in result.decisions if isinstance(d, Preempt)] == ["low"]
    result = cycle(chosen, a_snapshot(table).running(low, "n0").pending(polite).build(), now=10)
    assert not [d for d in result.decisions if isinstance(d, Preempt)]


def test_a_simulated_cluster_can_taint_nodes_and_a_profile_honour_it(tmp_path: Path) -> None:
    spec = """\
name: tainted
resource_types:
  gpu: {gpu_model: test, gpu_memory_mib: 80000, cpu_milli_per_gpu: 0, memory_mib_per_gpu: 0}
pools:
  default:
    node_groups:
      - {name: infer, count: 1, resource_type: gpu, gpus: 8, taints: [{key: dedicated, value: inference}]}
      - {name: train, count: 1, resource_type: gpu, gpus: 4}
"""
    (tmp_path / "c.yaml").write_text(spec)
    table = load_cluster(str(tmp_path / "c.yaml")).nodes
    assert table.nodes[0].taints == (Taint("dedicated", "inference", "NoSchedule"),)
    snapshot = a_snapshot(table).pending(a_job("j").gpus(8), a_job("k").gpus(4).submitted(1)).build()
    honoured = cycle(profile("fifo", "gang", "binpack", "taint-toleration", strict=False), snapshot)
    assert bind_of(honoured, "j") is None and nodes_of(table, bind_of(honoured, "k")) == ["train-000"]  # type: ignore[arg-type]
    assert nodes_of(table, bind_of(cycle(profile("fifo", "gang", "binpack"), snapshot), "j")) == ["infer-000"]  # type: ignore[arg-type]
