"""KubeState keeps what it translated while the informer keeps the same objects, and no longer."""

from __future__ import annotations

import copy
from typing import Any

import pytest

from kube.helpers import a_node, a_pod, a_pod_group
from loadmaster.kube import translate as tr
from loadmaster.kube.state import KubeState


def a_state(*pods: dict[str, Any]) -> KubeState:
    state = KubeState()
    state.replace("nodes", [a_node("n0"), a_node("n1")])
    state.replace("pods", list(pods))
    state.replace("podgroups", [a_pod_group("g", 2)])
    return state


def running(name: str, gpus: int = 1, group: str | None = None) -> dict[str, Any]:
    pod = a_pod(name, gpus, group)
    pod["spec"]["nodeName"] = "n0"
    pod["status"] = {"phase": "Running", "startTime": "2023-11-14T22:13:20Z"}
    pod["metadata"]["creationTimestamp"] = "2023-11-14T22:00:00Z"
    return pod


def jobs_of(state: KubeState) -> dict[str, Any]:
    view = state.view()
    assert view is not None
    return view.jobs


def test_unchanged_pods_give_the_same_job_objects_without_parsing_again(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = a_state(running("a", 2), a_pod("b", 1), a_pod("g-0", 1, "g"), a_pod("g-1", 1, "g"))
    first = jobs_of(state)
    parsed: list[str] = []
    original = tr.pod_request
    monkeypatch.setattr(tr, "pod_request", lambda pod: parsed.append(tr.key_of(pod)) or original(pod))
    second = jobs_of(state)
    assert second.keys() == first.keys()
    assert all(second[k] is first[k] for k in first)
    assert parsed == []


def test_a_changed_pod_group_or_priority_class_is_read_again() -> None:
    pod = a_pod("b", 1)
    state = a_state(pod, a_pod("g-0", 1, "g"), a_pod("g-1", 1, "g"))
    first = jobs_of(state)
    changed = copy.deepcopy(pod)  # an informer event: a new object (here a new request)
    changed["spec"]["containers"][0]["resources"]["requests"]["nvidia.com/gpu"] = "2"
    changed["spec"]["containers"][0]["resources"]["limits"]["nvidia.com/gpu"] = "2"
    state.apply("pods", "MODIFIED", changed)
    state.apply("podgroups", "MODIFIED", {**a_pod_group("g", 1)})
    second = jobs_of(state)
    assert second["team-a/b"] is not first["team-a/b"]
    assert second["team-a/b"].request.gpu_milli == 2000
    assert second["team-a/g"] is not first["team-a/g"] and second["team-a/g"].min_available == 1
    priority = {"apiVersion": "scheduling.k8s.io/v1", "kind": "PriorityClass"}
    priority |= {"metadata": {"name": "high"}, "value": 1000, "globalDefault": True}
    state.apply("priorityclasses", "ADDED", priority)
    third = jobs_of(state)
    assert third["team-a/b"] is not second["team-a/b"] and third["team-a/b"].priority_value == 1000


def test_what_is_kept_is_forgotten_with_the_pods() -> None:
    state = a_state(*(a_pod(f"p{i}") for i in range(50)), running("r", 1))
    jobs_of(state)
    assert len(state._requests) == 51 and len(state._jobs) == 51
    state.replace("pods", [a_pod("p0")])
    jobs_of(state)
    assert set(state._requests) == {"team-a/p0"} and set(state._jobs) == {"team-a/p0"}


def test_a_job_that_left_keeps_none_of_its_pods() -> None:
    """A kept Job holds its pods' objects: with gangs coming and going, only this view's jobs stay."""
    state = a_state()
    for wave in range(5):
        gangs = [f"w{wave}-{g}" for g in range(3)]
        state.replace("podgroups", [a_pod_group(name, 5) for name in gangs])
        state.replace("pods", [a_pod(f"{name}-{m}", 1, name) for name in gangs for m in range(5)])
        jobs_of(state)
        assert set(state._jobs) == {f"team-a/{name}" for name in gangs}
        kept = {id(pod) for pods, *_ in state._jobs.values() for pod in pods}
        assert kept <= {id(pod) for pod in state.objects["pods"].values()}


def test_unchanged_nodes_are_not_translated_again_and_a_changed_one_is(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    state = a_state(running("a", 2))
    first = state.view()
    read: list[str] = []
    original = tr.node_from
    monkeypatch.setattr(tr, "node_from", lambda node: read.append(node["metadata"]["name"]) or original(node))
    second = state.view()
    assert read == []
    assert first is not None and second is not None
    assert second.snapshot.nodes is first.snapshot.nodes  # the same table, as before the memo
    relabelled = copy.deepcopy(state.objects["nodes"]["n1"])  # an informer event: a new object
    relabelled["metadata"].setdefault("labels", {})[tr.POOL_LABEL] = "other"
    state.apply("nodes", "MODIFIED", relabelled)
    third = state.view()
    assert read == ["n0", "n1"]  # every node read again once one changed (the table's key compares all)
    assert third is not None and third.snapshot.nodes.nodes[1].pool == "other"
    state.apply("nodes", "DELETED", relabelled)
    fourth = state.view()
    assert fourth is not None and fourth.node_names == ("n0",)
