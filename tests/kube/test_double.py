"""KubeApiDouble behaves as kube-apiserver does where the scheduler's safety depends on it.

Each case cites the upstream code it was checked against (kubernetes/kubernetes):
pod/storage/storage.go (BindingREST), pod/storage/eviction.go (EvictionREST),
pod/strategy.go (CheckGracefulDelete).
"""

from __future__ import annotations

import threading
import time
from typing import Any

import pytest
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from kube.helpers import Clock, a_node, a_pod
from loadmaster.kube.api import api_client
from loadmaster_testing.kube_api import KubeApiDouble


@pytest.fixture
def double(clock: Clock) -> Any:
    api = KubeApiDouble(clock=clock)
    url = api.serve()
    yield api, client.CoreV1Api(api_client(host=url))
    api.close()


def bind(core: client.CoreV1Api, name: str, node: str) -> None:
    body = client.V1Binding(
        api_version="v1",
        kind="Binding",
        metadata=client.V1ObjectMeta(name=name, namespace="team-a"),
        target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
    )
    core.create_namespaced_pod_binding(name, "team-a", body, _preload_content=False)


def evict(core: client.CoreV1Api, name: str) -> None:
    body = client.V1Eviction(
        api_version="policy/v1", kind="Eviction", metadata=client.V1ObjectMeta(name=name, namespace="team-a")
    )
    core.create_namespaced_pod_eviction(name, "team-a", body, _preload_content=False)


def test_a_binding_onto_an_unknown_node_is_accepted(double: Any) -> None:
    api, core = double
    api.create("pods", a_pod("p"))
    bind(core, "p", "no-such-node")  # BindingREST never looks the node up
    assert api.get("pods", "team-a/p")["spec"]["nodeName"] == "no-such-node"


def test_eviction_leaves_the_pod_terminating_for_its_grace_period(double: Any, clock: Clock) -> None:
    api, core = double
    api.create("nodes", a_node("n0"))
    pod = a_pod("victim")
    pod["spec"]["terminationGracePeriodSeconds"] = 20
    api.create("pods", pod)
    bind(core, "victim", "n0")
    evict(core, "victim")
    left = api.get("pods", "team-a/victim")
    assert left is not None and left["metadata"]["deletionGracePeriodSeconds"] == 20
    assert left["metadata"]["deletionTimestamp"] == "2023-11-14T22:13:40Z"  # clock + 20 s
    with pytest.raises(ApiException) as gone:
        bind(core, "victim", "n0")
    assert gone.value.status == 409  # a Terminating pod cannot be bound
    clock.now += 19
    assert api.reap() == [] and api.get("pods", "team-a/victim") is not None
    clock.now += 1
    assert api.reap() == ["team-a/victim"] and api.get("pods", "team-a/victim") is None


def test_an_unbound_pod_and_grace_zero_go_at_once(double: Any) -> None:
    api, core = double
    api.create("nodes", a_node("n0"))
    api.create("pods", a_pod("pending"))
    api.create("pods", a_pod("bound"))
    bind(core, "bound", "n0")
    evict(core, "pending")  # not scheduled: CheckGracefulDelete sets the grace to 0
    core.delete_namespaced_pod("bound", "team-a", grace_period_seconds=0)
    assert api.objects("pods") == []


def test_a_disruption_budget_answers_429_when_it_allows_none(double: Any) -> None:
    api, core = double
    api.create("nodes", a_node("n0"))
    pod = a_pod("guarded")
    pod["metadata"]["labels"]["app"] = "db"
    api.create("pods", pod)
    bind(core, "guarded", "n0")
    budget = {
        "apiVersion": "policy/v1",
        "kind": "PodDisruptionBudget",
        "metadata": {"name": "db", "namespace": "team-a"},
        "spec": {"selector": {"matchLabels": {"app": "db"}}, "minAvailable": 1},
        "status": {
            "disruptionsAllowed": 0,
            "currentHealthy": 1,
            "desiredHealthy": 1,
            "expectedPods": 1,
            "observedGeneration": 1,
        },
    }
    api.create("poddisruptionbudgets", budget)
    with pytest.raises(ApiException) as refused:
        evict(core, "guarded")
    assert refused.value.status == 429
    assert "deletionTimestamp" not in api.get("pods", "team-a/guarded")["metadata"]


def test_injected_latency_and_failures(clock: Clock) -> None:
    api = KubeApiDouble(clock=clock, latency_s=0.05)
    core = client.CoreV1Api(api_client(host=api.serve()))
    try:
        started = time.perf_counter()
        core.list_node(_preload_content=False)
        assert time.perf_counter() - started >= 0.05
        api.fail_next(1)
        with pytest.raises(ApiException) as failed:
            core.list_node(_preload_content=False)
        assert failed.value.status == 500
        core.list_node(_preload_content=False)
    finally:
        api.close()


def test_delete_holds_the_lock(clock: Clock) -> None:
    api = KubeApiDouble(clock=clock)
    api.create("nodes", a_node("n0"))
    released = threading.Event()

    def delete() -> None:
        api.delete("nodes", "n0")
        released.set()

    with api.lock:
        worker = threading.Thread(target=delete)
        worker.start()
        assert not released.wait(0.1)  # blocked until the holder lets go
        assert api.get("nodes", "n0") is not None
    worker.join(2)
    assert released.is_set() and api.get("nodes", "n0") is None


@pytest.mark.parametrize(
    ("field", "value", "wanted"),
    [("bogus", 1, "bogus"), ("containers", [{"name": "c", "resources": {"requests": {"cpu": {}}}}], "cpu")],
)
def test_bodies_are_checked_against_the_schema(double: Any, field: str, value: object, wanted: str) -> None:
    api, _ = double
    pod = a_pod("bad")
    pod["spec"][field] = value
    with pytest.raises(Exception, match=wanted):
        api.create("pods", pod)
    assert len(api.invalid) == 1 and wanted in api.invalid[0]
