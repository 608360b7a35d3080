"""Kubernetes semantics end to end: the official client, KubeCluster and the API double.

Taints, node affinity, cordons, ``allocatable.pods``, every quantity form on
foreign pods, and the reasons written for gangs short of pods and pods
waiting for their PodGroup.
"""

from __future__ import annotations

import copy
from collections.abc import Iterator
from typing import Any

import pytest
from kubernetes import client

from kube.helpers import a_node, a_pod, a_pod_group, wait_synced
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import KubeCluster, StepReport
from loadmaster.kube.profiles import ProfileScheduler
from loadmaster.kube.semantics import mig_layouts
from loadmaster.model.mig import layout_text
from loadmaster.scheduling import Scheduler
from loadmaster_testing.kube_api import KubeApiDouble


@pytest.fixture
def cluster(api: KubeApiDouble) -> Iterator[KubeCluster]:
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    clock = api.clock
    built = KubeCluster(
        client,
        Scheduler(load_profiles()["binpack"]),
        "a",
        lease=LeaderElector(client, "a", clock=clock),
        clock=clock,
    )
    built.start()
    yield built
    built.stop()


def step(api: KubeApiDouble, cluster: KubeCluster) -> StepReport:
    wait_synced(cluster, api.rv)
    return cluster.step()


def node(name: str, **spec: Any) -> dict[str, Any]:
    built = a_node(name)
    built["spec"] = spec
    return built


def pod(name: str, gpus: int = 1, **spec: Any) -> dict[str, Any]:
    built = a_pod(name, gpus)
    built["spec"].update(spec)
    return built


def foreign(name: str, node_name: str, memory: str = "1Gi", cpu: str = "1") -> dict[str, Any]:
    built = a_pod(name, 0)
    built["spec"]["schedulerName"] = "default-scheduler"
    built["spec"]["nodeName"] = node_name
    built["spec"]["containers"][0]["resources"] = {"requests": {"cpu": cpu, "memory": memory}}
    return built


def condition(api: KubeApiDouble, key: str) -> str:
    found = api.get("pods", key)
    assert found is not None
    scheduled = [c for c in found.get("status", {}).get("conditions", []) if c["type"] == "PodScheduled"]
    return str(scheduled[0]["message"]) if scheduled else ""


def bound_to(report: StepReport) -> dict[str, str]:
    return {key.split("/", 1)[1]: node_name for key, node_name in report.bound}


def test_taints_keep_pods_off_unless_tolerated(api: KubeApiDouble, cluster: KubeCluster) -> None:
    api.create("nodes", node("n0", taints=[{"key": "dedicated", "value": "infer", "effect": "NoSchedule"}]))
    api.create("nodes", node("n1", taints=[{"key": "flaky", "effect": "NoExecute"}]))
    api.create("pods", pod("plain"))
    api.create("pods", pod("tolerant", tolerations=[{"key": "dedicated", "operator": "Exists"}]))
    report = step(api, cluster)
    assert bound_to(report) == {"tolerant": "n0"}
    assert "didn't tolerate" in condition(api, "team-a/plain")


def test_cordoned_nodes_take_no_new_pods(api: KubeApiDouble, cluster: KubeCluster) -> None:
    api.create("nodes", node("n0", unschedulable=True))
    api.create("pods", pod("p"))
    assert step(api, cluster).bound == []
    assert "node-unschedulable: 1 node(s) were unschedulable" in condition(api, "team-a/p")
    client.CoreV1Api(api_client(host=api.url)).patch_node(
        "n0", {"spec": {"unschedulable": False}}
    )  # uncordon
    assert bound_to(step(api, cluster)) == {"p": "n0"}


def test_required_and_preferred_node_affinity(api: KubeApiDouble, cluster: KubeCluster) -> None:
    for name, zone in (("n0", "z1"), ("n1", "z2"), ("n2", "z3")):
        created = a_node(name, zone=zone)
        api.create("nodes", created)
    required = {
        "nodeSelectorTerms": [
            {
                "matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "NotIn", "values": ["z1"]}
                ]
            }
        ]
    }
    preferred = [
        {
            "weight": 10,
            "preference": {
                "matchExpressions": [
                    {"key": "topology.kubernetes.io/zone", "operator": "In", "values": ["z3"]}
                ]
            },
        }
    ]
    affinity = {
        "nodeAffinity": {
            "requiredDuringSchedulingIgnoredDuringExecution": required,
            "preferredDuringSchedulingIgnoredDuringExecution": preferred,
        }
    }
    api.create("pods", pod("p", affinity=affinity))
    nowhere = copy.deepcopy(affinity)
    nowhere["nodeAffinity"]["requiredDuringSchedulingIgnoredDuringExecution"]["nodeSelectorTerms"][0][
        "matchExpressions"
    ][0] = {"key": "gpu-gen", "operator": "Gt", "values": ["9"]}
    api.create("pods", pod("q", affinity=nowhere))
    report = step(api, cluster)
    assert bound_to(report) == {"p": "n2"}
    assert "required node affinity" in report.waiting["team-a/q"]


def test_allocatable_pods_counts_every_pod_on_the_node(api: KubeApiDouble, cluster: KubeCluster) -> None:
    small = a_node("n0")
    small["status"]["allocatable"]["pods"] = "2"
    api.create("nodes", small)
    api.create("pods", foreign("daemon-a", "n0"))
    api.create("pods", foreign("daemon-b", "n0"))
    api.create("pods", pod("p"))
    assert step(api, cluster).bound == []
    assert "pods: want 1 on one node, most free is 0 (allocatable pods) on n0" in condition(api, "team-a/p")


@pytest.mark.parametrize("memory", ["1e9", "1Ei", "1E", "0.5Gi", "+2.5e3", "12345678901234567890"])
def test_a_foreign_pod_with_any_valid_quantity_does_not_stop_the_scheduler(
    api: KubeApiDouble, cluster: KubeCluster, memory: str
) -> None:
    api.create("nodes", a_node("n0"))
    api.create("pods", foreign("other", "n0", memory=memory, cpu="1e-3"))
    api.create("pods", pod("p"))
    report = step(api, cluster)
    huge = memory in ("1Ei", "1E", "12345678901234567890")
    assert bound_to(report) == ({} if huge else {"p": "n0"})
    if huge:
        assert "memory: want 1024 MiB on one node, most free is 0 MiB on n0" in report.waiting["team-a/p"]


def test_gangs_short_of_pods_and_pods_without_their_podgroup_say_why(
    api: KubeApiDouble, cluster: KubeCluster
) -> None:
    api.create("nodes", a_node("n0"))
    api.create("podgroups", a_pod_group("g", 4))
    for i in range(2):
        api.create("pods", a_pod(f"g-{i}", 1, "g"))
    api.create("pods", a_pod("orphan", 1, "missing"))
    step(api, cluster)
    assert condition(api, "team-a/g-0") == "gang has 2 of minMember 4 pods"
    assert condition(api, "team-a/orphan") == "waiting for PodGroup team-a/missing"
    events = [e for e in api.objects("events") if e["reason"] == "FailedScheduling"]
    assert {e["involvedObject"]["name"] for e in events} >= {"g-0", "g-1", "orphan"}
    count = len(events)
    step(api, cluster)  # nothing changed: no new event
    assert len([e for e in api.objects("events") if e["reason"] == "FailedScheduling"]) == count


def priority_class(name: str, value: int, **extra: Any) -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.k8s.io/v1",
        "kind": "PriorityClass",
        "metadata": {"name": name},
        "value": value,
        **extra,
    }


@pytest.mark.parametrize(("policy", "evicted"), [("PreemptLowerPriority", ["team-a/running"]), ("Never", [])])
def test_priority_classes_from_the_api_decide_preemption(
    api: KubeApiDouble, policy: str, evicted: list[str]
) -> None:
    api_ = api_client(host=api.url)  # type: ignore[attr-defined]
    lease = LeaderElector(api_, "a", clock=api.clock)
    cluster = KubeCluster(api_, Scheduler(load_profiles()["priority"]), "a", lease=lease, clock=api.clock)
    cluster.start()
    try:
        # The built-in class table values "high" above "low": the API's values must win.
        api.create("priorityclasses", priority_class("high", 10, globalDefault=True))
        api.create("priorityclasses", priority_class("low", 1000, preemptionPolicy=policy))
        api.create("nodes", a_node("n0"))
        running = pod("running", 8)  # no class named: the globalDefault "high", 10
        running["spec"]["nodeName"] = "n0"
        running["status"] = {"phase": "Running", "startTime": "2023-11-14T00:00:00Z"}
        api.create("pods", running)
        api.create("pods", pod("urgent", 8, priorityClassName="low"))
        report = step(api, cluster)
        assert report.evicted == evicted
        if not evicted:
            assert "gpu" in report.waiting["team-a/urgent"]
    finally:
        cluster.stop()


def mig_node(name: str, product: str = "NVIDIA-A100-SXM4-80GB", **counts: int) -> dict[str, Any]:
    built = a_node(name, gpus=0)
    for profile, count in counts.items():
        built["status"]["allocatable"][f"nvidia.com/mig-{profile.replace('_', '.')}"] = str(count)
    built["metadata"]["labels"]["nvidia.com/gpu.product"] = product
    return built


def mig_pod(name: str, profile: str, **extra: Any) -> dict[str, Any]:
    built = a_pod(name, 0)
    built["spec"]["containers"][0]["resources"] = {
        "requests": {"cpu": "1", "memory": "1Gi"},
        "limits": {f"nvidia.com/mig-{profile}": "1"},
    }
    built["spec"].update(extra)
    return built


def test_mig_pods_are_placed_on_the_instances_nodes_advertise(
    api: KubeApiDouble, cluster: KubeCluster
) -> None:
    api.create("nodes", mig_node("m0", **{"1g_10gb": 2, "3g_40gb": 1}))
    other = mig_pod("other", "1g.10gb", schedulerName="default-scheduler", nodeName="m0")
    api.create("pods", other)  # another scheduler's pod holds one of the two 1g.10gb
    for i in range(2):
        api.create("pods", mig_pod(f"small-{i}", "1g.10gb"))
    api.create("pods", mig_pod("big", "3g.40gb"))
    report = step(api, cluster)
    assert sorted(bound_to(report)) == ["big", "small-0"]
    assert "MIG 1g.10gb: want 1 on one node, most free is 0 on m0" in report.waiting["team-a/small-1"]
    bound = api.get("pods", "team-a/big")
    assert bound is not None and bound["spec"]["nodeName"] == "m0"
    report = step(api, cluster)  # the next cycle counts what it bound: nothing more fits
    assert report.bound == []


def test_mig_layouts_pack_the_advertised_instances_by_nvidia_placement_rules() -> None:
    found = mig_layouts("NVIDIA-A100-SXM4-80GB", {"1g.10gb": 9, "3g.40gb": 2})
    assert found is not None
    model, layouts = found
    assert model.name == "A100-80GB"
    assert [layout_text(layout) for layout in layouts] == ["3g.40gb x2", "1g.10gb x7", "1g.10gb x2"]
    assert mig_layouts("unknown", {"1g.18gb": 1}) is not None  # the profile name says H200
    assert mig_layouts("unknown", {"9g.1gb": 1}) is None


def test_several_profiles_by_scheduler_name_in_one_process(api: KubeApiDouble) -> None:
    api_ = api_client(host=api.url)  # type: ignore[attr-defined]
    profiles = load_profiles()
    scheduler = ProfileScheduler(
        {"loadmaster": Scheduler(profiles["binpack"]), "gpu-spread": Scheduler(profiles["spread"])}
    )
    cluster = KubeCluster(
        api_, scheduler, "a", lease=LeaderElector(api_, "a", clock=api.clock), clock=api.clock
    )
    cluster.start()
    try:
        for name in ("n0", "n1"):
            api.create("nodes", a_node(name))
        api.create("pods", pod("packed-0", 2))
        api.create("pods", pod("packed-1", 2))
        api.create("pods", pod("spread-0", 2, schedulerName="gpu-spread"))
        api.create("pods", pod("spread-1", 2, schedulerName="gpu-spread"))
        api.create("pods", pod("not-ours", 2, schedulerName="default-scheduler"))
        report = step(api, cluster)
        where = bound_to(report)
        assert "not-ours" not in where and len(where) == 4
        assert where["packed-0"] == where["packed-1"]  # binpack
        # spread takes the node with most room: the one binpack left empty (it saw binpack's binds)
        assert where["spread-0"] == where["spread-1"] != where["packed-0"]
    finally:
        cluster.stop()


def test_any_valid_mig_count_packs_quickly_and_keeps_every_device() -> None:
    found = mig_layouts("NVIDIA-A100-SXM4-80GB", {"1g.10gb": 10**6, "3g.40gb": 5, "1g.20gb": 50})
    assert found is not None
    counts: dict[str, int] = {}
    for layout in found[1]:
        for instance in layout:
            counts[instance.profile] = counts.get(instance.profile, 0) + 1
    assert counts == {"1g.10gb": 112, "3g.40gb": 5, "1g.20gb": 50}  # at most 7 x 16 of one profile


def test_the_bound_pods_of_a_gang_short_of_pods_still_hold_their_gpus(
    api: KubeApiDouble, cluster: KubeCluster
) -> None:
    api.create("nodes", a_node("n0"))
    api.create("podgroups", a_pod_group("g", 4))
    for i in range(2):  # two members bound (a third was deleted), one recreated and waiting: 3 of 4
        member = a_pod(f"g-{i}", 4, "g")
        member["spec"]["nodeName"] = "n0"
        api.create("pods", member)
    api.create("pods", a_pod("g-2", 4, "g"))
    api.create("pods", pod("other", 4))
    report = step(api, cluster)
    assert report.bound == []  # n0's 8 GPUs are held by g-0 and g-1
    assert "gpu" in report.waiting["team-a/other"]
    assert report.waiting["team-a/g"] == "gang has 3 of minMember 4 pods"
