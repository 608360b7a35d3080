"""Builders of Kubernetes objects for the kube tests and the benchmark."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Any

import yaml

from loadmaster.kube.cluster import KubeCluster
from loadmaster.kube.translate import utc_stamp
from loadmaster_testing.kube_api import KubeApiDouble


def a_node(name: str, gpus: int = 8, pool: str = "default", zone: str = "z1", **extra: int) -> dict[str, Any]:
    allocatable = {"cpu": "96", "memory": "960Gi", "nvidia.com/gpu": str(gpus), "pods": "110"}
    allocatable.update(
        {k.replace("_", "-").replace("mig-", "nvidia.com/mig-"): str(v) for k, v in extra.items()}
    )
    return {
        "apiVersion": "v1",
        "kind": "Node",
        "metadata": {
            "name": name,
            "labels": {"loadmaster.io/pool": pool, "topology.kubernetes.io/zone": zone},
        },
        "status": {
            "allocatable": allocatable,
            "capacity": allocatable,
            "conditions": [{"type": "Ready", "status": "True"}],
        },
    }


def a_pod(name: str, gpus: int = 1, group: str | None = None, namespace: str = "team-a") -> dict[str, Any]:
    labels = {"scheduling.x-k8s.io/pod-group": group} if group else {}
    return {
        "apiVersion": "v1",
        "kind": "Pod",
        "metadata": {"name": name, "namespace": namespace, "labels": labels},
        "spec": {
            "schedulerName": "loadmaster",
            "containers": [
                {
                    "name": "main",
                    "image": "busybox",
                    "resources": {
                        "requests": {"cpu": "1", "memory": "1Gi", "nvidia.com/gpu": str(gpus)},
                        "limits": {"nvidia.com/gpu": str(gpus)},
                    },
                }
            ],
        },
    }


def a_finished_status(end_s: float, start_s: float | None = None) -> dict[str, Any]:
    """A pod's status as the kubelet writes it once its one container exited 0 (core/v1 PodStatus,
    ContainerStateTerminated): phase Succeeded, the container's finishedAt and, with ``start_s``,
    the pod's startTime."""
    terminated = {"exitCode": 0, "reason": "Completed", "finishedAt": utc_stamp(end_s)}
    container = {
        "name": "main",
        "image": "busybox",
        "imageID": "docker.io/library/busybox@sha256:0",
        "ready": False,
        "restartCount": 0,
        "state": {"terminated": terminated},
    }
    status: dict[str, Any] = {"phase": "Succeeded", "containerStatuses": [container]}
    if start_s is not None:
        status["startTime"] = utc_stamp(start_s)
        terminated["startedAt"] = utc_stamp(start_s)
    return status


def a_pod_group(name: str, min_member: int, namespace: str = "team-a") -> dict[str, Any]:
    return {
        "apiVersion": "scheduling.x-k8s.io/v1alpha1",
        "kind": "PodGroup",
        "metadata": {"name": name, "namespace": namespace},
        "spec": {"minMember": min_member},
    }


def wait_synced(cluster: KubeCluster, version: int, timeout_s: float = 10.0) -> None:
    """Wait until ``cluster``'s informers have seen the API up to ``version``."""
    deadline = time.monotonic() + timeout_s
    while not cluster.synced_to(version):
        if time.monotonic() > deadline:
            raise TimeoutError(
                f"informers stuck at {[i.version for i in cluster.informers.values()]} < {version}"
            )
        time.sleep(0.01)


def kubeconfig_for(api: KubeApiDouble, path: Path, user: str = "me") -> Path:
    """Write a kubeconfig that points the official client (or kubectl) at the double; return its path."""
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "clusters": [{"name": "double", "cluster": {"server": api.url}}],  # type: ignore[attr-defined]
        "users": [{"name": user, "user": {}}],
        "contexts": [{"name": "double", "context": {"cluster": "double", "user": user}}],
        "current-context": "double",
    }
    path.write_text(yaml.safe_dump(config))
    return path


class Clock:
    """One fake clock for the double, the replicas' wall clock and their monotonic clock."""

    def __init__(self) -> None:
        self.now = 1_700_000_000.0

    def __call__(self) -> float:
        return self.now
