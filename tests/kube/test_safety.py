"""The issue's failure scenarios, reproduced against the API double: each must stay safe.

Over-commit during a leader change, over-commit on preemption, a gang left
half bound by a crash, a rollback finished by a successor, lease expiry
judged by local time, an informer that meets a non-API error.
"""

from __future__ import annotations

import threading
import time
from collections import defaultdict
from collections.abc import Iterator
from typing import Any

import pytest

from kube.helpers import Clock, a_node, a_pod, a_pod_group, wait_synced
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import ROLLBACK_ANNOTATION, TIMEOUT_CONDITION, KubeCluster
from loadmaster.kube.watch import ClusterWatch
from loadmaster.scheduling import Scheduler
from loadmaster_testing.kube_api import KubeApiDouble

GPU = "nvidia.com/gpu"


@pytest.fixture
def clusters() -> Iterator[list[KubeCluster]]:
    made: list[KubeCluster] = []
    yield made
    for cluster in made:
        cluster.stop()


def replica(
    api: KubeApiDouble, clusters: list[KubeCluster], clock: Clock, identity: str, **options: Any
) -> KubeCluster:
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    lease = LeaderElector(client, identity, clock=clock, monotonic=clock)
    profile = options.pop("profile", "priority")
    cluster = KubeCluster(
        client, Scheduler(load_profiles()[profile]), identity, lease=lease, clock=clock, **options
    )
    cluster.start()
    wait_synced(cluster, api.rv)
    clusters.append(cluster)
    return cluster


def gpus_in_use(api: KubeApiDouble) -> dict[str, int]:
    """GPUs held per node by every pod bound there, Terminating ones included (they still run)."""
    used: dict[str, int] = defaultdict(int)
    for pod in api.objects("pods"):
        node = pod["spec"].get("nodeName")
        if node:
            used[node] += sum(int(c["resources"]["requests"].get(GPU, 0)) for c in pod["spec"]["containers"])
    return dict(used)


def owned(pod: dict[str, Any]) -> dict[str, Any]:
    pod["metadata"]["ownerReferences"] = [
        {"apiVersion": "batch/v1", "kind": "Job", "name": "j", "uid": "u-j", "controller": True}
    ]
    return pod


def gang(api: KubeApiDouble, name: str, members: int, gpus: int, timeout_s: int | None = None) -> None:
    group = a_pod_group(name, members)
    if timeout_s is not None:
        group["spec"]["scheduleTimeoutSeconds"] = timeout_s
    api.create("podgroups", group)
    for i in range(members):
        api.create("pods", owned(a_pod(f"{name}-{i}", gpus, name)))


@pytest.mark.parametrize("fenced", [True, False], ids=["fenced", "control-without-fence"])
def test_a_lease_lost_mid_gang_never_over_commits(
    api: KubeApiDouble, clusters: list[KubeCluster], clock: Clock, fenced: bool
) -> None:
    """Binds take 8 s each; B takes the lease after 15 s and binds a high-priority pod onto n1,
    where A had planned the rest of its gang. A must stop at its renew deadline (10 s)."""
    for i in range(2):
        api.create("nodes", a_node(f"n{i}"))
    a = replica(api, clusters, clock, "a", bind_workers=1)
    b = replica(api, clusters, clock, "b")
    assert a.step().leader and not b.step().leader
    gang(api, "g", 4, 4)
    wait_synced(a, api.rv)
    if not fenced:
        a.lease.holds_now = lambda: True  # type: ignore[method-assign]
    original = a._bind_pod
    started = clock.now

    def slow_bind(key: str, node: str, gpus: str) -> str:
        outcome = original(key, node, gpus)
        clock.now += 8
        if clock.now - started == 16:
            urgent = a_pod("urgent", 8)
            urgent["spec"]["priorityClassName"] = "high"
            api.create("pods", urgent)
            wait_synced(b, api.rv)
            taken = b.step()
            assert taken.leader and ("team-a/urgent", "n1") in taken.bound
        return outcome

    a._bind_pod = slow_bind  # type: ignore[method-assign]
    report = a.step()
    over = {n: g for n, g in gpus_in_use(api).items() if g > 8}
    if fenced:
        assert over == {} and report.fenced == 2
    else:
        assert over == {"n1": 16}  # the scenario: the control shows what the fence prevents


def test_a_preemptor_waits_for_its_victims_to_be_gone(
    api: KubeApiDouble, clusters: list[KubeCluster], clock: Clock
) -> None:
    api.create("nodes", a_node("n0"))
    api.create("pods", a_pod("low", 8))
    cluster = replica(api, clusters, clock, "a")
    assert [k for k, _ in cluster.step().bound] == ["team-a/low"]
    clock.now += 601  # past the priority plugin's min_runtime_s: low may be preempted
    high = a_pod("high", 8)
    high["spec"]["priorityClassName"] = "high"
    api.create("pods", high)
    wait_synced(cluster, api.rv)
    report = cluster.step()
    assert report.evicted == ["team-a/low"] and report.bound == []
    assert "preempted pods to terminate: team-a/low" in report.waiting["team-a/high"]
    victim = api.get("pods", "team-a/low")
    assert victim is not None and victim["metadata"]["deletionTimestamp"]  # Terminating, 30 s grace
    for _ in range(3):  # while it terminates: nothing else evicted, nothing bound, 8 GPUs in use
        clock.now += 5
        wait_synced(cluster, api.rv)
        again = cluster.step()
        assert again.evicted == [] and again.bound == []
        assert gpus_in_use(api) == {"n0": 8}
    clock.now += 30
    api.reap()
    wait_synced(cluster, api.rv)
    assert cluster.step().bound == [("team-a/high", "n0")]
    assert gpus_in_use(api) == {"n0": 8}


def test_a_gang_left_half_bound_is_released_after_its_timeout(
    api: KubeApiDouble, clusters: list[KubeCluster], clock: Clock
) -> None:
    """The issue's crash: 2 of 4 bound, then a pod of another scheduler takes the rest of the room."""
    api.create("nodes", a_node("n0"))
    gang(api, "g", 4, 2, timeout_s=30)
    bare = a_pod("g-3", 2, "g")  # replace one member by a pod nothing would recreate
    api.delete("pods", "team-a/g-3", 0)
    api.create("pods", bare)
    for key in ("team-a/g-0", "team-a/g-3"):
        api.bind("team-a", key.split("/")[1], {"apiVersion": "v1", "kind": "Binding",
                  "metadata": {"name": key.split("/")[1]}, "target": {"name": "n0"}})  # fmt: skip
    foreign = a_pod("foreign", 4)
    foreign["spec"]["schedulerName"] = "default-scheduler"
    foreign["spec"]["nodeName"] = "n0"
    api.create("pods", foreign)
    cluster = replica(api, clusters, clock, "b", profile="binpack")
    first = cluster.step()
    assert first.bound == [] and first.rolled_back == []
    group = api.get("podgroups", "team-a/g")
    assert (
        group is not None and group["status"]["phase"] == "Scheduling" and group["status"]["scheduled"] == 2
    )
    clock.now += 31
    wait_synced(cluster, api.rv)
    released = cluster.step()
    assert released.rolled_back == ["team-a/g"]
    group = api.get("podgroups", "team-a/g")
    assert group is not None and ROLLBACK_ANNOTATION in group["metadata"]["annotations"]
    assert group["status"]["phase"] == "Failed"
    owned_pod = api.get("pods", "team-a/g-0")
    assert owned_pod is not None and owned_pod["metadata"]["deletionGracePeriodSeconds"] == 30  # never 0
    bare_pod = api.get("pods", "team-a/g-3")
    assert bare_pod is not None and "deletionTimestamp" not in bare_pod["metadata"]
    assert any(c["type"] == TIMEOUT_CONDITION for c in bare_pod["status"]["conditions"])
    assert any(e["reason"] == "GangTimedOut" for e in api.objects("events"))
    clock.now += 30
    api.reap()
    wait_synced(cluster, api.rv)
    cluster.step()
    group = api.get("podgroups", "team-a/g")
    assert group is not None and ROLLBACK_ANNOTATION not in (group["metadata"].get("annotations") or {})


def test_a_successor_finishes_a_rollback_recorded_in_the_api(
    api: KubeApiDouble, clusters: list[KubeCluster], clock: Clock
) -> None:
    api.create("nodes", a_node("n0"))
    gang(api, "g", 4, 2)
    api.bind("team-a", "g-0", {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": "g-0"},
             "target": {"name": "n0"}})  # fmt: skip
    api.patch("podgroups", "team-a/g", {"metadata": {"annotations": {ROLLBACK_ANNOTATION: "timed out"}}})
    cluster = replica(api, clusters, clock, "successor")
    report = cluster.step()
    assert report.rolled_back == ["team-a/g"] and report.bound == []  # no bind while the release runs
    pod = api.get("pods", "team-a/g-0")
    assert pod is not None and pod["metadata"]["deletionTimestamp"]


def test_expiry_is_judged_on_the_local_clock_not_the_holders_timestamps(api: KubeApiDouble) -> None:
    """A holder whose wall clock runs an hour behind writes old renewTimes; it still holds the lease."""
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    local = Clock()
    behind = LeaderElector(client, "a", clock=lambda: local.now - 3600, monotonic=local)
    other = LeaderElector(client, "b", clock=local, monotonic=local)
    assert behind.acquire_or_renew()
    assert not other.acquire_or_renew()  # the old code took over at once: renewTime + 15 s < now
    for _ in range(5):
        local.now += 5
        assert behind.acquire_or_renew() and not other.acquire_or_renew()
    local.now += 16  # the holder stops renewing: 15 s later, locally, the lease is free
    assert other.acquire_or_renew() and not behind.holds_now()


def test_a_replica_that_cannot_read_the_lease_does_not_call_itself_standby(api: KubeApiDouble) -> None:
    """/readyz's leader-election check: leader, standby (knows who leads), or unknown (not ready)."""
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    local = Clock()
    leader = LeaderElector(client, "a", clock=local, monotonic=local)
    other = LeaderElector(client, "b", clock=local, monotonic=local)
    assert other.role() == "unknown"  # never read the Lease yet
    assert leader.acquire_or_renew() and not other.acquire_or_renew()
    assert (leader.role(), other.role()) == ("leader", "standby")
    api.unavailable_for(30)
    local.now += 16  # the leader's renew deadline lapsed; nobody could read the Lease since
    assert not other.acquire_or_renew() and not leader.acquire_or_renew()
    assert (leader.role(), other.role()) == ("unknown", "unknown")


def test_the_renewal_thread_keeps_the_lease_and_the_deadline_lapses_without_it(api: KubeApiDouble) -> None:
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    local = Clock()
    changes: list[bool] = []
    lease = LeaderElector(client, "a", monotonic=local, retry_period_s=0.01, on_change=changes.append)
    lease.start()
    try:
        assert _eventually(lease.holds_now)
        assert lease.background
    finally:
        lease.stop()
    local.now += 11  # no renewal for longer than the renew deadline
    assert not lease.holds_now() and changes == [True, False]
    with pytest.raises(ValueError, match="renew_deadline_s"):
        LeaderElector(client, "x", renew_deadline_s=20)


def test_the_informer_survives_any_error_and_reports_staleness(
    api: KubeApiDouble, clusters: list[KubeCluster], clock: Clock
) -> None:
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    cluster = KubeCluster(client, Scheduler(load_profiles()["fifo"]), "a")
    informer = cluster.informers["nodes"]
    original = informer._call
    failures = {"left": 3}
    lock = threading.Lock()

    def flaky(**kwargs: Any) -> Any:
        with lock:
            if failures["left"] > 0:
                failures["left"] -= 1
                raise RuntimeError("not an ApiException: a decoding bug, say")
        return original(**kwargs)

    informer._call = flaky  # type: ignore[method-assign]
    informer.backoff_s = 0.01
    cluster.start()
    clusters.append(cluster)
    api.create("nodes", a_node("n0"))
    wait_synced(cluster, api.rv)
    assert informer.alive() and informer.errors == 3 and "n0" in cluster.state.objects["nodes"]
    assert 0 <= cluster.staleness_s < 10


def test_pod_group_status_follows_the_gang(
    api: KubeApiDouble, clusters: list[KubeCluster], clock: Clock
) -> None:
    api.create("nodes", a_node("n0"))
    gang(api, "small", 2, 2)
    gang(api, "big", 2, 8)
    cluster = replica(api, clusters, clock, "a", profile="binpack")
    cluster.step()
    wait_synced(cluster, api.rv)
    cluster.step()
    small, big = api.get("podgroups", "team-a/small"), api.get("podgroups", "team-a/big")
    assert small is not None and big is not None
    assert (small["status"]["phase"], small["status"]["scheduled"], small["status"]["running"]) == (
        "Running",
        2,
        2,
    )
    assert small["status"]["scheduleStartTime"]
    assert big["status"]["phase"] == "Pending" and big["status"]["conditions"][0]["status"] == "False"
    assert "gpu" in big["status"]["conditions"][0]["message"]


def _eventually(check: Any, timeout_s: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        if check():
            return True
        time.sleep(0.01)
    return False


def test_a_failed_bind_is_not_retried_onto_room_another_scheduler_took(
    api: KubeApiDouble, clusters: list[KubeCluster], clock: Clock
) -> None:
    api.create("nodes", a_node("n0"))
    api.create("pods", a_pod("mine", 4))
    cluster = replica(api, clusters, clock, "a", profile="binpack")
    api.conflict_next_binds(1)
    assert cluster.step().failed_binds == ["team-a/mine"]
    foreign = a_pod("foreign", 6)
    foreign["spec"]["schedulerName"] = "default-scheduler"
    foreign["spec"]["nodeName"] = "n0"
    api.create("pods", foreign)
    wait_synced(cluster, api.rv)
    again = cluster.step()
    assert again.bound == [] and gpus_in_use(api) == {"n0": 6}
    assert "team-a/mine" in again.waiting  # decided afresh: it no longer fits


def test_a_pod_bound_to_a_deleted_node_does_not_stop_the_scheduler(
    api: KubeApiDouble, clusters: list[KubeCluster], clock: Clock
) -> None:
    """Found by the chaos model: a job whose only pod sat on a deleted node made step() raise."""
    for name in ("n0", "n1"):
        api.create("nodes", a_node(name))
    api.create("pods", a_pod("orphan", 1))
    cluster = replica(api, clusters, clock, "a")
    assert cluster.step().bound == [("team-a/orphan", "n0")]
    api.delete("nodes", "n0")
    wait_synced(cluster, api.rv)
    assert cluster.step().bound == []


def test_a_gang_short_of_pods_still_holds_what_its_bound_members_use(
    api: KubeApiDouble, clusters: list[KubeCluster], clock: Clock
) -> None:
    """Found by the chaos model: a gang that lost a member stopped counting its bound ones (9 GPUs on 8)."""
    api.create("nodes", a_node("n0"))
    gang(api, "g", 3, 2)
    cluster = replica(api, clusters, clock, "a", profile="binpack")
    assert len(cluster.step().bound) == 3
    api.delete("pods", "team-a/g-0", 0)  # the gang is now 2 of minMember 3
    api.create("pods", a_pod("big", 6))
    wait_synced(cluster, api.rv)
    report = cluster.step()
    assert report.bound == [] and gpus_in_use(api) == {"n0": 4}


@pytest.mark.parametrize("path", ["kube run", "dashboard"])
def test_a_watch_event_older_than_the_cache_is_ignored(api: KubeApiDouble, path: str) -> None:
    """A list made on becoming leader may be newer than events still in flight on the watch: a stale
    MODIFIED must not bring back an old pod, nor a stale DELETED remove a newer one, in ``kube run``'s
    cache and in the dashboard's (one shared drain)."""
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    reader: KubeCluster | ClusterWatch = (
        KubeCluster(client, Scheduler(load_profiles()["fifo"]), "a")
        if path == "kube run"
        else ClusterWatch(client)
    )
    new = {
        "metadata": {"name": "p", "namespace": "team-a", "resourceVersion": "10"},
        "spec": {"nodeName": "n0"},
    }
    old = {"metadata": {"name": "p", "namespace": "team-a", "resourceVersion": "9"}, "spec": {}}
    newer = {"metadata": {"name": "p", "namespace": "team-a", "resourceVersion": "11"}, "spec": {}}
    reader.changes.put(("pods", "RELIST", {"items": [new]}))
    reader.changes.put(("pods", "MODIFIED", old))
    reader.changes.put(("pods", "DELETED", old))
    reader.drain()
    assert reader.state.objects["pods"]["team-a/p"]["spec"] == {"nodeName": "n0"}
    reader.changes.put(("pods", "MODIFIED", newer))  # a newer event applies
    reader.drain()
    assert reader.state.objects["pods"]["team-a/p"]["spec"] == {}
    reader.changes.put(("pods", "DELETED", newer))
    reader.drain()
    assert "team-a/p" not in reader.state.objects["pods"]
    reader.stop()


def test_a_gang_that_lost_a_member_still_times_out(
    api: KubeApiDouble, clusters: list[KubeCluster], clock: Clock
) -> None:
    """Found by the chaos model: a gang short of pods was not offered to the scheduler, so its bound
    members were never released."""
    api.create("nodes", a_node("n0"))
    gang(api, "g", 3, 2, timeout_s=10)
    for name in ("g-0", "g-1"):
        api.bind("team-a", name, {"apiVersion": "v1", "kind": "Binding", "metadata": {"name": name},
                 "target": {"name": "n0"}})  # fmt: skip
    api.delete("pods", "team-a/g-2", 0)  # never recreated: the gang is 2 pods of minMember 3
    cluster = replica(api, clusters, clock, "a")
    assert cluster.step().rolled_back == []
    clock.now += 11
    wait_synced(cluster, api.rv)
    assert cluster.step().rolled_back == ["team-a/g"]
    assert all(p["metadata"].get("deletionTimestamp") for p in api.objects("pods"))
