"""What ``loadmaster submit`` creates, and how ``cancel`` removes it.

A job ``NAME`` in the submitter's namespace is three objects, all labelled
``loadmaster.io/job: NAME`` with its user, group and queue:

1. a **PodGroup** ``NAME`` (``scheduling.x-k8s.io/v1alpha1``, as the
   scheduler reads it) with ``minMember`` = tasks: loadmaster binds all
   tasks in one cycle or none;
2. a **headless Service** ``NAME`` (``clusterIP: None``,
   ``publishNotReadyAddresses``) so that every task has the DNS name
   ``NAME-<index>.NAME`` from its first second, for rendezvous;
3. an **Indexed batch Job** ``NAME`` (``completionMode: Indexed``,
   ``completions = parallelism = tasks``): the Job controller names each pod
   ``NAME-<index>-<random>``, sets its hostname ``NAME-<index>`` and
   annotation ``batch.kubernetes.io/job-completion-index``, and recreates a
   pod that is lost (a gang rolled back, a node gone).

Every pod gets the environment launchers read: ``MASTER_ADDR`` (task 0's
DNS name), ``MASTER_PORT``, ``WORLD_SIZE`` and ``NNODES`` (tasks),
``RANK`` and ``NODE_RANK`` (the completion index, through the downward
API), ``NPROC_PER_NODE`` (GPUs per task), and the same as ``PET_*``
variables, which ``torchrun`` reads as its arguments: a bare
``torchrun train.py`` joins the job.
"""

from __future__ import annotations

import copy
import json
import logging
import secrets
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field, replace
from functools import partial
from typing import Any

import kubernetes_validate
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from loadmaster.config.jobspec import Identity, JobSpec
from loadmaster.kube import translate as tr
from loadmaster.kube.api import PODGROUP_API, REQUEST_TIMEOUT_S, ApiFailure

log = logging.getLogger(__name__)

JOB_LABEL = "loadmaster.io/job"
INTERACTIVE_LABEL = "loadmaster.io/interactive"
RECLAIM_ANNOTATION = tr.RECLAIM_ANNOTATION
INDEX_ANNOTATION = "batch.kubernetes.io/job-completion-index"
SCHEMA_VERSION = "1.33"
"""Kubernetes version whose OpenAPI schemas ``--dry-run`` validates against (kubernetes-validate)."""
INTERACTIVE_POOL = "interactive"
INTERACTIVE_TIME = "4:00:00"
NOTEBOOK_IMAGE = "quay.io/jupyter/minimal-notebook:latest"
NOTEBOOK_PORT = 8888


class SubmitError(tr.KubeError):
    """A submission the cluster cannot take, or an action the caller may not do."""


@dataclass(frozen=True)
class Submission:
    """The objects of one job, in creation order (PodGroup first: pods wait for it)."""

    name: str
    namespace: str
    pod_group: dict[str, Any]
    service: dict[str, Any]
    job: dict[str, Any]
    notes: list[str] = field(default_factory=list)
    """What submit decided for the caller (a MIG slice chosen, the CUDA release read from the tag)."""

    @property
    def manifests(self) -> list[dict[str, Any]]:
        return [self.pod_group, self.service, self.job]


def job_name(spec: JobSpec, who: Identity, token: str | None = None) -> str:
    """The spec's name, else ``<user>-<first word of the command>-<4 random hex>``, DNS-safe."""
    if spec.name:
        return spec.name
    word = (spec.command[0].rsplit("/", 1)[-1] if spec.command else "job").lower()
    word = "".join(c if c.isalnum() else "-" for c in word).strip("-") or "job"
    stem = (
        f"{who.user}-{word}" if who.user[0].isalpha() else f"j-{who.user}-{word}"
    )  # Services start with a letter
    return stem[:30].rstrip("-") + f"-{token or secrets.token_hex(2)}"


def labels_of(name: str, spec: JobSpec, who: Identity) -> dict[str, str]:
    labels = {
        JOB_LABEL: name,
        tr.USER_LABEL: who.user,
        tr.GROUP_LABEL: who.group,
        tr.QUEUE_LABEL: spec.queue,
    }
    if spec.interactive:
        labels[INTERACTIVE_LABEL] = "true"
    return labels


def build(spec: JobSpec, who: Identity, name: str, notes: Sequence[str] = ()) -> Submission:
    """The PodGroup, Service and Job of ``spec`` (pure: nothing is sent)."""
    namespace = who.home
    labels = labels_of(name, spec, who)
    meta = {"name": name, "namespace": namespace, "labels": labels}
    pod_group = {
        "apiVersion": "/".join(PODGROUP_API[:2]),
        "kind": "PodGroup",
        "metadata": copy.deepcopy(meta),
        "spec": {"minMember": spec.tasks},
    }
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": copy.deepcopy(meta),
        "spec": {
            "clusterIP": "None",
            "publishNotReadyAddresses": True,
            "selector": {JOB_LABEL: name},
            "ports": [{"name": "rendezvous", "port": spec.port, "targetPort": spec.port}],
        },
    }
    job = {
        "apiVersion": "batch/v1",
        "kind": "Job",
        "metadata": copy.deepcopy(meta),
        "spec": {
            "completionMode": "Indexed",
            "completions": spec.tasks,
            "parallelism": spec.tasks,
            "backoffLimit": 0 if spec.interactive else 3 * spec.tasks,
            "activeDeadlineSeconds": spec.time_limit_s,
            "template": _template(spec, name, labels),
        },
    }
    return Submission(name, namespace, pod_group, service, job, list(notes))


def _template(spec: JobSpec, name: str, labels: Mapping[str, str]) -> dict[str, Any]:
    annotations: dict[str, str] = {}
    if spec.cuda is not None:
        annotations[tr.CUDA_ANNOTATION] = str(spec.cuda_version)
        if spec.cuda_compat:
            annotations[tr.CUDA_COMPAT_ANNOTATION] = "true"
    if spec.interactive:
        annotations[RECLAIM_ANNOTATION] = "first"
    pod_labels = {**labels, tr.POD_GROUP_LABELS[0]: name}
    selector: dict[str, str] = {}
    if spec.pool is not None:
        selector[tr.POOL_LABEL] = spec.pool
    if spec.resource_type is not None:
        selector[tr.TYPE_LABEL] = spec.resource_type
    container: dict[str, Any] = {
        "name": "task",
        "image": spec.image,
        "env": _env(spec, name),
        "resources": _resources(spec),
        "ports": [{"name": "rendezvous", "containerPort": spec.port}],
    }
    if spec.command:
        container["command"] = list(spec.command)
    pod_spec: dict[str, Any] = {
        "schedulerName": tr.SCHEDULER_NAME,
        "subdomain": name,
        "restartPolicy": "Never",
        "activeDeadlineSeconds": spec.time_limit_s,
        "containers": [container],
    }
    if spec.priority is not None:
        pod_spec["priorityClassName"] = spec.priority
    if selector:
        pod_spec["nodeSelector"] = selector
    metadata: dict[str, Any] = {"labels": pod_labels}
    if annotations:
        metadata["annotations"] = annotations
    return {"metadata": metadata, "spec": pod_spec}


def _resources(spec: JobSpec) -> dict[str, dict[str, str]]:
    requests: dict[str, str] = {}
    limits: dict[str, str] = {}
    if spec.mig is not None:
        limits[f"{tr.MIG_PREFIX}{spec.mig}"] = requests[f"{tr.MIG_PREFIX}{spec.mig}"] = "1"
    elif spec.gpus_per_task:
        limits[tr.GPU_RESOURCE] = requests[tr.GPU_RESOURCE] = str(spec.gpus_per_task)
    if spec.cpu_per_task is not None:
        requests["cpu"] = spec.cpu_per_task
    if spec.memory_per_task is not None:
        requests["memory"] = limits["memory"] = spec.memory_per_task
    return {"requests": requests, "limits": limits}


def _env(spec: JobSpec, name: str) -> list[dict[str, Any]]:
    def index() -> dict[str, Any]:  # a fresh dict each time: a shared one would print as a YAML anchor
        return {"valueFrom": {"fieldRef": {"fieldPath": f"metadata.annotations['{INDEX_ANNOTATION}']"}}}

    plain = {
        "MASTER_ADDR": f"{name}-0.{name}",
        "MASTER_PORT": str(spec.port),
        "WORLD_SIZE": str(spec.tasks),
        "NNODES": str(spec.tasks),
        "NPROC_PER_NODE": str(max(spec.gpus_per_task, 1)),
        "LOADMASTER_JOB": name,
    }
    env: list[dict[str, Any]] = [{"name": k, "value": v} for k, v in plain.items()]
    env += [{"name": k, **index()} for k in ("RANK", "NODE_RANK")]
    torchrun = ("MASTER_ADDR", "MASTER_PORT", "NNODES", "NPROC_PER_NODE")  # read as PET_<ARGUMENT>
    env += [{"name": f"PET_{k}", "value": plain[k]} for k in torchrun]
    env += [{"name": "PET_NODE_RANK", **index()}]
    env += [{"name": k, "value": v} for k, v in spec.env.items()]
    return env


def schema_problems(submission: Submission) -> list[str]:
    """Why a manifest breaks its kind's Kubernetes OpenAPI schema (strict); the PodGroup CRD is checked
    for its one field the scheduler reads, as kubernetes-validate has no schema for it."""
    problems: list[str] = []
    for manifest in (submission.service, submission.job):
        try:
            kubernetes_validate.validate(manifest, SCHEMA_VERSION, strict=True)
        except kubernetes_validate.ValidationError as exc:
            where = ".".join(str(p) for p in exc.path) or "<root>"
            problems.append(f"{manifest['kind']} {submission.name}: {where}: {exc.message}")
    min_member = submission.pod_group["spec"].get("minMember")
    if not isinstance(min_member, int) or min_member < 1:
        problems.append(f"PodGroup {submission.name}: spec.minMember must be a positive integer")
    return problems


def create(api: client.ApiClient, submission: Submission) -> None:
    """Create the PodGroup, the Service and the Job; on a failure, delete what was created."""
    core, batch, custom = _clients(api)
    ns, timeout = submission.namespace, {"_request_timeout": REQUEST_TIMEOUT_S}
    group, version, plural = PODGROUP_API
    steps: list[tuple[str, Callable[[], object]]] = [
        (
            "PodGroup",
            partial(
                custom.create_namespaced_custom_object,
                group,
                version,
                ns,
                plural,
                submission.pod_group,
                **timeout,
            ),
        ),
        ("Service", partial(core.create_namespaced_service, ns, submission.service, **timeout)),
        ("Job", partial(batch.create_namespaced_job, ns, submission.job, **timeout)),
    ]
    deletes = {
        "PodGroup": partial(
            custom.delete_namespaced_custom_object, group, version, ns, plural, submission.name
        ),
        "Service": partial(core.delete_namespaced_service, submission.name, ns),
    }
    created: list[str] = []
    for kind, step in steps:
        try:
            step()
        except ApiFailure as exc:
            for done in reversed(
                created
            ):  # only what this call made: a name clash must not delete the other job
                _delete_quietly(deletes[done], f"{done} {ns}/{submission.name}")
            taken = " (a job of that name exists: choose another --name)" if _status(exc) == 409 else ""
            raise SubmitError(
                f"could not create {kind} {ns}/{submission.name}: {_api_text(exc)}{taken}"
            ) from None
        created.append(kind)


def _status(exc: BaseException) -> int | None:
    status = getattr(exc, "status", None)
    return status if isinstance(status, int) else None


def _delete_quietly(call: Callable[..., object], what: str) -> None:
    """Undo a creation; a failure is logged, as the submission's own error is the one to report."""
    try:
        call(_request_timeout=REQUEST_TIMEOUT_S)
    except ApiFailure as exc:
        log.warning("could not delete %s while undoing a failed submission: %s", what, _api_text(exc))


def delete_all(api: client.ApiClient, namespace: str, name: str) -> list[str]:
    """Delete the Job (its pods with it), the pods themselves, the Service and the PodGroup; what was deleted.

    The pods are deleted explicitly as well as through the Job's
    ``propagationPolicy: Background``, so that nothing of the job keeps
    GPUs even where the garbage collector is slow. Absent objects are fine.
    """
    core, batch, custom = _clients(api)
    timeout = {"_request_timeout": REQUEST_TIMEOUT_S}
    group, version, plural = PODGROUP_API
    job = partial(batch.delete_namespaced_job, name, namespace, propagation_policy="Background", **timeout)
    pod_group = partial(
        custom.delete_namespaced_custom_object, group, version, namespace, plural, name, **timeout
    )
    calls: list[tuple[str, Callable[[], object]]] = [
        (f"Job {name}", job),
        (f"Service {name}", partial(core.delete_namespaced_service, name, namespace, **timeout)),
        (f"PodGroup {name}", pod_group),
    ]
    try:
        pods = core.list_namespaced_pod(namespace, label_selector=f"{JOB_LABEL}={name}", **timeout)
    except ApiFailure as exc:
        raise SubmitError(f"cannot list the pods of {namespace}/{name}: {_api_text(exc)}") from None
    for pod in pods.items:
        pod_name = str(pod.metadata.name)
        delete = partial(core.delete_namespaced_pod, pod_name, namespace, grace_period_seconds=30, **timeout)
        calls.append((f"Pod {pod_name}", delete))
    deleted: list[str] = []
    for what, call in calls:
        try:
            call()
        except ApiException as exc:
            if exc.status != 404:
                raise SubmitError(f"could not delete {what} in {namespace}: {_api_text(exc)}") from None
            continue
        deleted.append(what)
    return deleted


def _clients(api: client.ApiClient) -> tuple[Any, Any, Any]:
    """The core, batch and custom-object APIs, untyped: manifests are sent as plain dicts."""
    return client.CoreV1Api(api), client.BatchV1Api(api), client.CustomObjectsApi(api)


def _api_text(exc: BaseException) -> str:
    if isinstance(exc, ApiException):
        return f"{exc.status} {exc.reason}"
    return str(exc)


def _mig_size(profile: str) -> tuple[int, float]:
    """``1g.10gb`` -> (1, 10.0): compute slices first, then memory, for choosing the smallest."""
    compute, _, memory = profile.partition(".")
    try:
        return int(compute.rstrip("g")), float(memory.rstrip("gb") or 0)
    except ValueError:
        return (1_000, 0.0)


def smallest_mig(api: client.ApiClient, pool: str) -> str | None:
    """The smallest MIG profile the pool's nodes advertise (``1g.10gb``), or None when it has no MIG
    (or the caller may not list nodes: then the session asks for a whole GPU)."""
    core, _, _ = _clients(api)
    try:
        nodes = core.list_node(
            label_selector=f"{tr.POOL_LABEL}={pool}", **{"_request_timeout": REQUEST_TIMEOUT_S}
        )
    except ApiFailure:
        return None
    profiles = {
        key.removeprefix(tr.MIG_PREFIX)
        for node in nodes.items
        for key, value in ((node.status.allocatable if node.status else None) or {}).items()
        if key.startswith(tr.MIG_PREFIX) and tr.quantity(value, key) > 0
    }
    return min(profiles, key=_mig_size) if profiles else None


def never_fits(api: client.ApiClient, submission: Submission) -> str:
    """Why the job can never run on the cluster's nodes as they are (empty: it can, or nodes are hidden).

    Runs the scheduler's own feasibility check (resource fit, pool and type,
    and the cuda-compat filter) on the job as the scheduler will translate it.
    """
    from loadmaster.model import NodeTable  # noqa: PLC0415 - only this check needs the core
    from loadmaster.scheduling import PluginSpec, Scheduler, build_profile  # noqa: PLC0415

    core, _, _ = _clients(api)
    try:
        listed = core.list_node(_preload_content=False, _request_timeout=REQUEST_TIMEOUT_S)
    except ApiFailure as exc:
        submission.notes.append(f"not checked against the nodes ({_api_text(exc)})")
        return ""
    infos = [tr.node_from(obj) for obj in json.loads(listed.data)["items"]]
    if not infos:
        return "the cluster has no nodes"
    nodes = [i.node for i in infos]
    table = NodeTable.build(nodes, tr.resource_types(nodes))
    template = submission.job["spec"]["template"]
    pod = {
        **template,
        "metadata": {
            **template["metadata"],
            "name": f"{submission.name}-0",
            "namespace": submission.namespace,
        },
    }
    job = tr.job_from(
        f"{submission.namespace}/{submission.name}", [pod], submission.pod_group, tr.DEFAULT_TIME_LIMIT_S
    )
    job = replace(job, tasks=int(submission.pod_group["spec"]["minMember"]), min_available=0)
    plugins = [PluginSpec(name, {}) for name in ("fifo", "gang", "first-fit", "cuda-compat")]
    verdict = Scheduler(build_profile("submit-check", ["allocate"], plugins)).feasible(job, table)
    return "" if verdict.ok else verdict.reason
