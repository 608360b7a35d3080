"""The official kubernetes client and KubeCluster against the in-process API double, faults included."""

from __future__ import annotations

import sys
import threading
import time
from collections import Counter
from collections.abc import Iterator
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from kube.helpers import a_node, a_pod, a_pod_group, wait_synced
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.model import Job, TaskRequest, TraceJob
from loadmaster.scheduling import Scheduler
from loadmaster.sim.simulator import SimOptions, Simulator
from loadmaster_testing.kube_api import KubeApiDouble

pytest.importorskip("kubernetes")


class FakeClock:
    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now


@pytest.fixture
def api() -> Iterator[KubeApiDouble]:
    double = KubeApiDouble(clock=FakeClock())
    double.url = double.serve()  # type: ignore[attr-defined]
    yield double
    double.close()


def a_cluster(
    api: KubeApiDouble, identity: str = "a", profile: str = "fifo", clock: FakeClock | None = None
) -> KubeCluster:
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    clock = clock or FakeClock()
    lease = LeaderElector(client, identity, clock=clock, monotonic=clock)
    cluster = KubeCluster(client, Scheduler(load_profiles()[profile]), identity, lease=lease, clock=clock)
    cluster.start()
    wait_synced(cluster, api.rv)
    return cluster


def gangs(api: KubeApiDouble, nodes: int = 3, gang: int = 4, gpus: int = 4) -> None:
    for i in range(nodes):
        api.create("nodes", a_node(f"n{i}"))
    api.create("podgroups", a_pod_group("g", gang))
    for i in range(gang):
        api.create("pods", a_pod(f"g-{i}", gpus, "g"))


def assert_safe(api: KubeApiDouble) -> None:
    """Nothing bound twice, no gang partly bound, every request body schema-valid."""
    assert api.invalid == []
    assert max(Counter(k for k, _ in api.bindings).values(), default=1) == 1
    pods = api.objects("pods")
    for group in {p["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") for p in pods} - {None}:
        members = [p for p in pods if p["metadata"]["labels"].get("scheduling.x-k8s.io/pod-group") == group]
        bound = sum(bool(p["spec"].get("nodeName")) for p in members)
        minimum = api.get("podgroups", f"team-a/{group}")["spec"]["minMember"]  # type: ignore[index]
        assert bound in (0, len(members)) or bound >= minimum, (
            f"gang {group}: {bound} of {len(members)} bound"
        )


def step_synced(api: KubeApiDouble, cluster: KubeCluster):  # type: ignore[no-untyped-def]
    wait_synced(cluster, api.rv)
    return cluster.step()


def test_gang_is_bound_whole_and_reasons_reach_the_pod(api: KubeApiDouble) -> None:
    gangs(api, nodes=3)
    api.create("pods", a_pod("huge", 6))
    api.create("pods", a_pod("later", 8))
    cluster = a_cluster(api)
    report = cluster.step()
    assert sorted(k for k, _ in report.bound) == [
        "team-a/g-0",
        "team-a/g-1",
        "team-a/g-2",
        "team-a/g-3",
        "team-a/huge",
    ]
    pod = api.get("pods", "team-a/later")
    assert pod is not None
    condition = next(c for c in pod["status"]["conditions"] if c["type"] == "PodScheduled")
    assert condition["status"] == "False" and "gpu" in condition["message"]
    assert any(e["involvedObject"]["name"] == "later" for e in api.objects("events"))
    assert_safe(api)
    cluster.stop()


def test_a_failed_bind_is_retried_while_the_gang_holds_its_room(api: KubeApiDouble) -> None:
    gangs(api, nodes=2)  # the gang fills both nodes
    cluster = a_cluster(api)
    api.conflict_next_binds(1)
    first = cluster.step()
    assert len(first.bound) == 3 and len(first.failed_binds) == 1 and first.rolled_back == []
    api.create("pods", a_pod("intruder", 4))  # must not take the failed pod's room meanwhile
    second = step_synced(api, cluster)
    assert second.bound == [(first.failed_binds[0], dict(first.planned_binds)[first.failed_binds[0]])]
    assert len(api.bindings) == 4 and "team-a/intruder" in second.waiting
    assert_safe(api)
    cluster.stop()


@pytest.mark.parametrize("fault", ["drop", "gone"])
def test_a_dropped_or_expired_watch_resumes_or_relists(api: KubeApiDouble, fault: str) -> None:
    gangs(api)
    cluster = a_cluster(api)
    cluster.step()  # becoming leader lists afresh once: count the relists after it
    relists = cluster.informers["pods"].relists
    api.compact() if fault == "gone" else api.drop_watches()
    api.create("pods", a_pod("solo", 2))
    report = step_synced(api, cluster)
    assert "team-a/solo" in {k for k, _ in report.bound}
    assert (cluster.informers["pods"].relists > relists) == (fault == "gone")
    assert_safe(api)
    cluster.stop()


@pytest.mark.parametrize("outage_s", [1.0, 30.0])
def test_the_api_unavailable_for_a_while(api: KubeApiDouble, outage_s: float) -> None:
    gangs(api)
    cluster = a_cluster(api)
    api.unavailable_for(outage_s)
    assert cluster.step().bound == []
    while api.down():
        time.sleep(0.05)
    report = step_synced(api, cluster)
    assert len(report.bound) == 4
    assert_safe(api)
    cluster.stop()


class Killed(BaseException):
    pass


def test_a_scheduler_killed_mid_gang_is_completed_by_its_successor(api: KubeApiDouble) -> None:
    gangs(api)
    first = a_cluster(api, "a")
    original = first._bind_pod
    calls: list[str] = []
    lock = threading.Lock()

    def die_after_two(key: str, node: str, gpus: str) -> str:
        with lock:
            calls.append(key)
            if len(calls) > 2:
                raise Killed
        return original(key, node, gpus)

    first._bind_pod = die_after_two  # type: ignore[method-assign]
    with pytest.raises(Killed):
        first.step()
    first.stop()
    second = a_cluster(api, "a")  # the restarted replica: same identity, state from the API only
    report = second.step()
    assert len(report.bound) == 2 and len(api.bindings) == 4
    assert_safe(api)
    second.stop()


def test_two_replicas_never_bind_at_once(api: KubeApiDouble) -> None:
    gangs(api)
    clock = FakeClock()
    a, b = a_cluster(api, "a", clock=clock), a_cluster(api, "b", clock=clock)
    assert a.step().leader
    assert not b.step().leader
    api.create("pods", a_pod("solo", 1))
    assert step_synced(api, b).bound == []
    clock.now += 60  # a stops renewing; its lease expires
    taken = step_synced(api, b)
    assert taken.leader and [k for k, _ in taken.bound] == ["team-a/solo"]
    assert not a.step().leader
    assert_safe(api)
    a.stop()
    b.stop()


def test_same_decisions_as_the_simulator(api: KubeApiDouble) -> None:
    for i in range(4):
        api.create("nodes", a_node(f"n{i}"))
    jobs = [("a", 2, 4), ("b", 1, 8), ("c", 3, 2), ("d", 1, 1), ("e", 2, 8), ("f", 4, 1)]
    trace = []
    for name, tasks, gpus in jobs:
        if tasks > 1:
            api.create("podgroups", a_pod_group(name, tasks))
        for t in range(tasks):
            api.create("pods", a_pod(f"{name}-{t}", gpus, name if tasks > 1 else None))
        job_id = f"team-a/{name}" if tasks > 1 else f"team-a/{name}-0"
        request = TaskRequest(gpu_milli=gpus * 1000, cpu_milli=1000, memory_mib=1024)
        job = Job(job_id, "team-a", "team-a", 1_700_000_000.0, tasks, request, 86_400.0)
        trace.append(TraceJob(job, 3600.0))
    cluster = a_cluster(api, profile="binpack")
    kube = Counter((k.rsplit("-", 1)[0] if k.count("-") > 1 else k, n) for k, n in cluster.step().bound)
    table = cluster.state.view().snapshot.nodes  # type: ignore[union-attr]
    sim = Simulator(table, Scheduler(load_profiles()["binpack"]), trace, SimOptions(seed=0))
    sim.start()
    sim.step()
    expected: Counter[tuple[str, str]] = Counter()
    for job_id, running in sim.cluster.running.items():
        for p in running.placements:
            expected[
                (
                    job_id if "-" not in job_id.split("/")[1] else job_id.rsplit("-", 1)[0],
                    table.nodes[p.node].name,
                )
            ] += 1
    assert kube == expected
    assert np.isfinite(len(expected)) and expected
    assert_safe(api)
    cluster.stop()
