"""Fair share on Kubernetes: the jobs that ended weigh on their users' next ones, as in the simulator.

The official client, :class:`KubeCluster` and the API double. ``slurm`` ranks by Slurm's
multifactor priority, whose largest term is the fair-share factor ``2^(-usage / share)``: a user
who has just used the whole node for nine hours goes behind one who has used nothing, though
that user's job was submitted first. The finished pod carries what the kubelet writes when a pod
ends (``status.phase`` Succeeded, ``containerStatuses[].state.terminated.finishedAt``;
core/v1 ``ContainerStateTerminated``).
"""

from __future__ import annotations

from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube.helpers import Clock, a_finished_status, a_node, a_pod, wait_synced
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.kube.metrics import SchedulerMetrics
from loadmaster.kube.translate import utc_stamp
from loadmaster.scheduling import Scheduler
from loadmaster_testing.kube_api import KubeApiDouble


def finished_pod(name: str, namespace: str, start_s: float, end_s: float) -> dict[str, Any]:
    pod = a_pod(name, 8, namespace=namespace)
    pod["metadata"]["creationTimestamp"] = utc_stamp(start_s - 30)
    pod["spec"]["nodeName"] = "n0"
    pod["status"] = a_finished_status(end_s, start_s)
    return pod


def waiting_pod(name: str, namespace: str, created_s: float) -> dict[str, Any]:
    pod = a_pod(name, 8, namespace=namespace)
    pod["metadata"]["creationTimestamp"] = utc_stamp(created_s)
    return pod


@pytest.mark.parametrize("history", [True, False], ids=["team-a ran before", "nobody ran before"])
def test_the_user_who_used_the_node_waits_behind_one_who_did_not(
    api: KubeApiDouble, clock: Clock, history: bool
) -> None:
    api.create("nodes", a_node("n0", gpus=8))
    now = clock.now
    if history:
        api.create("pods", finished_pod("earlier", "team-a", now - 10 * 3600, now - 3600))
    api.create("pods", waiting_pod("a2", "team-a", now - 120))  # submitted first
    api.create("pods", waiting_pod("b1", "team-b", now - 60))
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    lease = LeaderElector(client, "a", clock=clock, monotonic=clock)
    cluster = KubeCluster(client, Scheduler(load_profiles()["slurm"]), "a", lease=lease, clock=clock)
    cluster.start()
    try:
        wait_synced(cluster, api.rv)
        report = cluster.step()
    finally:
        cluster.stop()
    assert [key for key, _ in api.bindings] == (["team-b/b1"] if history else ["team-a/a2"])
    assert report.view is not None
    usage = report.view.snapshot.usage_gpu_s
    metrics = SchedulerMetrics("slurm")
    metrics.observe_cycle(report, {})
    exposed = {
        (s.labels["level"], s.labels["owner"]): s.value
        for family in text_string_to_metric_families(metrics.exposition().decode())
        for s in family.samples
        if s.name == "loadmaster_fairshare_usage_gpu_seconds"
    }
    if history:
        charged = 8 * 9 * 3600 * 0.5 ** (3600 / (7 * 86_400))
        assert usage["user/team-a"] == pytest.approx(charged)
        assert report.view.snapshot.recent_runtimes_s == {"team-a": (9 * 3600.0,)}
        assert cluster.stats.counts["usage_charged"] == 1
        assert exposed == {
            ("user", "team-a"): pytest.approx(charged),
            ("group", "team-a"): pytest.approx(charged),
        }
    else:
        assert dict(usage) == {} and exposed == {}
