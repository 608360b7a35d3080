"""The Job controller and garbage collector of kube-controller-manager, for Indexed Jobs, on the API double.

What it reproduces (Kubernetes ``pkg/controller/job``, as KEP-2214 "Indexed
Job", KEP-4017 "pod index label", the Job API's ``completionMode``
description and the task "Indexed Job for Parallel Processing with Static Work
Assignment" document it, and "Garbage collection"):

* an Indexed Job with ``completions = parallelism = n`` gets one pod per index
  ``0..n-1``, named ``<job>-<index>-<5 random characters>``, with the
  annotation and label ``batch.kubernetes.io/job-completion-index``, the
  labels ``batch.kubernetes.io/job-name`` and ``batch.kubernetes.io/controller-uid``,
  the hostname ``<job>-<index>`` and an owner reference to the Job;
* every container gets ``JOB_COMPLETION_INDEX`` from that annotation
  (downward API), as the control plane sets it;
* a pod that disappears (deleted by a gang rollback, evicted) is recreated; a
  failed pod counts against ``backoffLimit`` and is replaced until the limit;
* pods whose owning Job is gone are deleted (background propagation).

Differences from the real controller: it runs when a test calls
:meth:`JobControllerDouble.reconcile` (no watch, no expectations cache), it
does not write Job ``status`` or conditions, and ``suspend``,
``podFailurePolicy``, ``successPolicy`` and ``backoffLimitPerIndex`` are not
implemented. The random suffix is a counter, for deterministic names.
"""

from __future__ import annotations

import copy
import itertools
from typing import Any

from loadmaster.kube.submit import INDEX_ANNOTATION
from loadmaster_testing.kube_api import KubeApiDouble

JOB_NAME_LABEL = "batch.kubernetes.io/job-name"
CONTROLLER_UID_LABEL = "batch.kubernetes.io/controller-uid"


class JobControllerDouble:
    """Creates and garbage-collects the pods of Indexed Jobs in a :class:`KubeApiDouble`."""

    def __init__(self, api: KubeApiDouble) -> None:
        self.api = api
        self._suffix = itertools.count()

    def reconcile(self) -> list[str]:
        """One pass: the keys of the pods it created (deleted orphans are not listed)."""
        jobs = {job["metadata"]["uid"]: job for job in self.api.objects("jobs")}
        pods = self.api.objects("pods")
        for pod in pods:
            owner = _owner_uid(pod)
            if owner is not None and owner not in jobs:
                with self.api.lock:  # the double's store methods expect its lock held, as its handler does
                    self.api.delete("pods", f"{pod['metadata']['namespace']}/{pod['metadata']['name']}")
        created: list[str] = []
        for uid, job in jobs.items():
            mine = [p for p in pods if _owner_uid(p) == uid]
            created.extend(self._reconcile_job(job, mine))
        return created

    def _reconcile_job(self, job: dict[str, Any], pods: list[dict[str, Any]]) -> list[str]:
        spec = job["spec"]
        if spec.get("completionMode") != "Indexed":
            return []
        failed = sum(1 for p in pods if p.get("status", {}).get("phase") == "Failed")
        if failed > int(spec.get("backoffLimit", 6)):
            return []
        live = {
            _index(p)
            for p in pods
            if p.get("status", {}).get("phase") in {"Pending", "Running", "Succeeded", None}
        }
        created = []
        for index in range(int(spec["completions"])):
            if index not in live:
                created.append(self._create_pod(job, index))
        return created

    def _create_pod(self, job: dict[str, Any], index: int) -> str:
        meta = job["metadata"]
        name, namespace, uid = meta["name"], meta["namespace"], meta["uid"]
        template = copy.deepcopy(job["spec"]["template"])
        pod_meta = template.get("metadata") or {}
        labels = {
            **(pod_meta.get("labels") or {}),
            JOB_NAME_LABEL: name,
            CONTROLLER_UID_LABEL: uid,
            INDEX_ANNOTATION: str(index),
        }
        annotations = {**(pod_meta.get("annotations") or {}), INDEX_ANNOTATION: str(index)}
        pod_name = f"{name}-{index}-{next(self._suffix):05d}"
        index_env = {
            "name": "JOB_COMPLETION_INDEX",
            "valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}},
        }
        spec = template["spec"]
        for container in spec["containers"]:
            container["env"] = [*(container.get("env") or []), index_env]
        pod: dict[str, Any] = {
            "apiVersion": "v1",
            "kind": "Pod",
            "metadata": {
                "name": pod_name,
                "namespace": namespace,
                "labels": labels,
                "annotations": annotations,
                "ownerReferences": [
                    {
                        "apiVersion": "batch/v1",
                        "kind": "Job",
                        "name": name,
                        "uid": uid,
                        "controller": True,
                        "blockOwnerDeletion": True,
                    }
                ],
            },
            "spec": {**spec, "hostname": f"{name}-{index}"},
        }
        self.api.create("pods", pod)
        return f"{namespace}/{pod_name}"


def _owner_uid(pod: dict[str, Any]) -> str | None:
    for ref in pod["metadata"].get("ownerReferences") or ():
        if ref.get("kind") == "Job" and ref.get("controller"):
            return str(ref["uid"])
    return None


def _index(pod: dict[str, Any]) -> int:
    return int((pod["metadata"].get("annotations") or {}).get(INDEX_ANNOTATION, -1))
