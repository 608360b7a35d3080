"""Kubernetes objects to model objects: quantities as apimachinery parses them, taints, affinity, limits.

Quantity cases are apimachinery's (pkg/api/resource/quantity_test.go ``TestQuantityParse``).
"""

from __future__ import annotations

from decimal import Decimal

import pytest

from loadmaster.kube import translate as tr
from loadmaster.model import NodeAffinity, PreferredTerm, Requirement, SelectorTerm, Taint, Toleration


@pytest.mark.parametrize(
    ("text", "value"),
    [
        ("0", "0"),
        ("4", "4"),
        ("500m", "0.5"),
        ("1.5Gi", str(3 * 2**29)),
        ("1Ei", str(2**60)),
        ("8Ei", str(2**63 - 1)),  # binary values are capped at 2^63-1, silently
        ("1e9", "1000000000"),
        ("1E3", "1000"),
        ("1e+3", "1000"),
        ("1e-3", "0.001"),
        ("1E", "1000000000000000000"),  # E alone is exa
        (".5", "0.5"),
        ("5.", "5"),
        ("1.G", "1000000000"),  # upstream's TODO: still accepted
        ("+1k", "1000"),
        ("-1", "-1"),
        ("1n", "0.000000001"),
        ("0.1n", "0.000000001"),  # finer than a nano rounds away from zero
        ("100u", "0.0001"),
        (7, "7"),
        ("Gi", "0"),  # no digits: upstream's scanner reads the number as 0
    ],
)
def test_every_quantity_form_parses_as_the_api_server_does(text: str | int, value: str) -> None:
    assert tr.parse_quantity(text, "f") == Decimal(value)


@pytest.mark.parametrize("text", ["", "1e", "1ki", "1K", "1Mi3", "1 Gi", "abc", "1..5"])
def test_a_bad_quantity_names_the_field_and_the_forms(text: str) -> None:
    with pytest.raises(tr.KubeError, match=r"^pod p memory: "):
        tr.parse_quantity(text, "pod p memory")


@pytest.mark.parametrize(
    ("text", "request_mib", "node_mib"),
    [("1e9", 954, 953), ("1Gi", 1024, 1024), ("1Ei", 2**40, 2**40), ("1E", 953_674_316_407, 953_674_316_406)],
)
def test_memory_rounds_up_for_a_request_and_down_for_a_node(
    text: str, request_mib: int, node_mib: int
) -> None:
    assert tr.memory_mib(text, "f", up=True) == request_mib
    assert tr.memory_mib(text, "f") == node_mib


def test_huge_and_negative_amounts_stay_in_int64_range() -> None:
    assert tr.cpu_milli("1e30", "f") == tr.AMOUNT_CAP
    assert tr.cpu_milli("-2", "f") == 0
    assert tr.cpu_milli("0.0001", "f") == 1  # MilliValue rounds up
    assert tr.cpu_milli("0.0001", "f", up=False) == 0


def _pod(**spec: object) -> dict[str, object]:
    return {"metadata": {"name": "p", "namespace": "ns"}, "spec": {"containers": [], **spec}}


def test_a_pod_with_every_quantity_form_translates() -> None:
    pod = _pod(
        containers=[
            {"resources": {"requests": {"cpu": "1.5", "memory": "1e9", "nvidia.com/gpu": "2"}}},
            {"resources": {"requests": {"cpu": "500m", "memory": "1Ei"}}},
        ]
    )
    request = tr.pod_request(pod)
    assert (request.cpu_milli, request.memory_mib, request.gpu_milli) == (2000, 954 + 2**40, 2000)


def test_tolerations_and_node_affinity_come_from_the_pod_spec() -> None:
    pod = _pod(
        tolerations=[
            {"key": "gpu", "operator": "Exists", "effect": "NoSchedule"},
            {"key": "a", "value": "b"},
        ],
        affinity={
            "nodeAffinity": {
                "requiredDuringSchedulingIgnoredDuringExecution": {
                    "nodeSelectorTerms": [
                        {"matchExpressions": [{"key": "zone", "operator": "In", "values": ["a", "b"]}]},
                        {"matchFields": [{"key": "metadata.name", "operator": "In", "values": ["n1"]}]},
                    ]
                },
                "preferredDuringSchedulingIgnoredDuringExecution": [
                    {"weight": 5, "preference": {"matchExpressions": [{"key": "ssd", "operator": "Exists"}]}}
                ],
            }
        },
    )
    assert tr.tolerations_of(pod) == (
        Toleration("gpu", "Exists", "", "NoSchedule"),
        Toleration("a", "Equal", "b"),
    )
    assert tr.affinity_of(pod) == NodeAffinity(
        required=(
            SelectorTerm((Requirement("zone", "In", ("a", "b")),)),
            SelectorTerm(fields=(Requirement("metadata.name", "In", ("n1",)),)),
        ),
        preferred=(PreferredTerm(5, SelectorTerm((Requirement("ssd", "Exists"),))),),
    )
    assert tr.affinity_of(_pod()) is None


def test_a_node_brings_its_taints_cordon_and_pod_limit() -> None:
    node = {
        "metadata": {"name": "n0", "labels": {}},
        "spec": {"unschedulable": True, "taints": [{"key": "gpu", "value": "x", "effect": "NoExecute"}]},
        "status": {
            "allocatable": {"cpu": "64", "memory": "1e12", "pods": "110", "nvidia.com/gpu": "8"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    info = tr.node_from(node)
    assert info.node.taints == (Taint("gpu", "x", "NoExecute"),)
    assert info.node.unschedulable and info.schedulable  # a cordon is the plugin's to judge
    assert (info.node.max_pods, info.node.memory_mib) == (110, 953_674)


CLASSES = tr.priority_classes(
    [
        {"metadata": {"name": "urgent"}, "value": 1000},
        {"metadata": {"name": "polite"}, "value": 1000, "preemptionPolicy": "Never"},
        {"metadata": {"name": "batch"}, "value": 10, "globalDefault": True},
    ]
)


@pytest.mark.parametrize(
    ("spec", "value", "may_preempt"),
    [
        ({"priorityClassName": "urgent"}, 1000, True),
        ({"priorityClassName": "polite"}, 1000, False),
        ({}, 10, True),  # no class named: the globalDefault class
        (
            {"priorityClassName": "urgent", "priority": 7, "preemptionPolicy": "Never"},
            7,
            False,
        ),  # admission's
        ({"priorityClassName": "unknown"}, None, True),  # the plugins' table decides
    ],
)
def test_a_pod_priority_resolves_as_priority_admission_does(
    spec: dict[str, object], value: int | None, may_preempt: bool
) -> None:
    assert tr.priority_of(_pod(**spec), CLASSES) == (value, may_preempt)
    assert tr.priority_of(_pod(**spec), {}) == (spec.get("priority"), spec.get("preemptionPolicy") != "Never")


def _container(**requests: str) -> dict[str, object]:
    return {"name": "c", "resources": {"requests": requests}}


@pytest.mark.parametrize(
    ("spec", "expected"),
    [
        # init containers run first, one at a time: the largest counts where it is more than the sum
        (
            {
                "containers": [_container(cpu="1")],
                "initContainers": [_container(cpu="4"), _container(cpu="2")],
            },
            (0, 4000, 0, None),
        ),
        # a sidecar (restartPolicy Always) runs beside the containers: summed
        (
            {
                "containers": [_container(cpu="1")],
                "initContainers": [{**_container(cpu="2"), "restartPolicy": "Always"}],
            },
            (0, 3000, 0, None),
        ),
        (
            {"containers": [_container(cpu="1")], "overhead": {"cpu": "250m", "memory": "64Mi"}},
            (0, 1250, 64, None),
        ),
        ({"containers": [_container(**{"nvidia.com/mig-1g.10gb": "1"})]}, (0, 0, 0, "1g.10gb")),
        (
            {"containers": [_container(**{"nvidia.com/mig-1g.10gb": "1", "nvidia.com/gpu": "1"})]},
            (1000, 0, 0, None),
        ),
        (
            {"containers": [_container(**{"nvidia.com/mig-strategy-x": "1"})]},
            (0, 0, 0, None),
        ),  # not a profile
        (
            {"containers": [_container(**{"nvidia.com/gpu": "1E"}), _container(**{"nvidia.com/gpu": "1E"})]},
            (tr.AMOUNT_CAP * 1000, 0, 0, None),
        ),
    ],
)
def test_a_pod_requests_what_kube_scheduler_counts(
    spec: dict[str, object], expected: tuple[object, ...]
) -> None:
    request = tr.pod_request({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})
    assert (request.gpu_milli, request.cpu_milli, request.memory_mib, request.mig_profile) == expected


def test_an_init_container_runs_beside_the_sidecars_started_before_it() -> None:
    spec = {
        "containers": [_container(cpu="1")],
        "initContainers": [{**_container(cpu="2"), "restartPolicy": "Always"}, _container(cpu="5")],
    }
    request = tr.pod_request({"metadata": {"name": "p", "namespace": "ns"}, "spec": spec})
    assert request.cpu_milli == 7000  # max(1 + 2, 2 + 5)


def test_a_node_advertising_a_huge_gpu_count_is_capped() -> None:
    node = {
        "metadata": {"name": "n0"},
        "status": {
            "allocatable": {"nvidia.com/gpu": "1e6"},
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }
    assert tr.node_from(node).node.gpus == tr.MAX_NODE_GPUS
