"""Kubernetes objects (plain JSON dicts, as the API returns them) to model objects.

Pure functions, no client and no I/O: the tests feed them literal dicts.

Conventions (documented in docs/kubernetes.md):

========================================  =============================================
Kubernetes                                 model
========================================  =============================================
node label ``loadmaster.io/pool``          ``Node.pool`` (default ``default``)
``topology.kubernetes.io/zone``            ``Node.zone`` (default ``default``)
``loadmaster.io/rack``                     ``Node.rack`` (default: the zone)
``loadmaster.io/resource-type``            ``Node.resource_type`` (default: the label
                                           ``nvidia.com/gpu.product``, else ``gpu``)
allocatable ``nvidia.com/gpu``             ``Node.gpus``
allocatable ``nvidia.com/mig-<profile>``   carried in ``NodeInfo.mig`` (count per profile)
pod requests ``nvidia.com/gpu: n``         ``TaskRequest.gpu_milli = 1000 n``
pod requests ``nvidia.com/mig-<p>: 1``     ``TaskRequest.mig_profile = p``
pod label ``scheduling.x-k8s.io/pod-group``  the gang (PodGroup ``spec.minMember``)
pod label ``loadmaster.io/queue``          ``Job.queue`` (default ``default``)
pod label ``loadmaster.io/group``          ``Job.group`` (default: the namespace)
pod label ``loadmaster.io/user``           ``Job.user`` (default: the namespace)
``spec.activeDeadlineSeconds``             ``Job.time_limit_s`` (default 24 h)
annotation ``loadmaster.io/gpus``          the GPU indices a bound pod holds
annotation ``loadmaster.io/cuda``          ``Job.cuda`` (else the container env ``CUDA_VERSION``)
annotation ``loadmaster.io/cuda-compat``   ``Job.cuda_compat`` (``"true"``: image has cuda-compat)
========================================  =============================================
"""

from __future__ import annotations

import re
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from typing import Any

from loadmaster.errors import LoadmasterError
from loadmaster.model import MILLI_PER_GPU, Job, Node, ResourceType, TaskRequest
from loadmaster.model.cuda import CudaVersion

Obj = Mapping[str, Any]
"""A Kubernetes object as decoded JSON."""

SCHEDULER_NAME = "loadmaster"
GPU_RESOURCE = "nvidia.com/gpu"
MIG_PREFIX = "nvidia.com/mig-"
POOL_LABEL = "loadmaster.io/pool"
ZONE_LABEL = "topology.kubernetes.io/zone"
RACK_LABEL = "loadmaster.io/rack"
TYPE_LABEL = "loadmaster.io/resource-type"
PRODUCT_LABEL = "nvidia.com/gpu.product"
QUEUE_LABEL = "loadmaster.io/queue"
GROUP_LABEL = "loadmaster.io/group"
USER_LABEL = "loadmaster.io/user"
GPUS_ANNOTATION = "loadmaster.io/gpus"
CUDA_ANNOTATION = "loadmaster.io/cuda"
CUDA_COMPAT_ANNOTATION = "loadmaster.io/cuda-compat"
POD_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
DEFAULT_TIME_LIMIT_S = 86_400.0
"""Run time assumed for a pod without ``activeDeadlineSeconds``: one day, a common lab limit."""

_SUFFIX = {
    "Ki": 2**10,
    "Mi": 2**20,
    "Gi": 2**30,
    "Ti": 2**40,
    "Pi": 2**50,
    "k": 10**3,
    "M": 10**6,
    "G": 10**9,
    "T": 10**12,
    "P": 10**15,
}
_QUANTITY = re.compile(r"^([0-9.]+)(m|Ki|Mi|Gi|Ti|Pi|k|M|G|T|P)?$")


class KubeError(LoadmasterError):
    """A Kubernetes object loadmaster cannot translate, or an API failure it cannot recover from."""


def quantity(value: str | int | float, field: str) -> float:
    """A Kubernetes quantity (``500m``, ``16Gi``, ``4``) as a plain number of base units."""
    match = _QUANTITY.match(str(value))
    if match is None:
        raise KubeError(f"{field}: {value!r} is not a Kubernetes quantity (like 500m, 16Gi or 4)")
    number, suffix = float(match.group(1)), match.group(2)
    if suffix == "m":
        return number / 1000
    return number * _SUFFIX[suffix] if suffix else number


def cpu_milli(value: str | int | float, field: str) -> int:
    """CPU quantity in milli-cores."""
    return round(quantity(value, field) * 1000)


def memory_mib(value: str | int | float, field: str) -> int:
    """Memory quantity in MiB (rounded down)."""
    return int(quantity(value, field) // 2**20)


def timestamp_s(value: str | None) -> float:
    """An RFC 3339 timestamp as seconds since the epoch (0 when absent)."""
    if not value:
        return 0.0
    return datetime.fromisoformat(value.replace("Z", "+00:00")).timestamp()


def key_of(obj: Obj) -> str:
    """``namespace/name`` (just ``name`` for a cluster-scoped object)."""
    meta = obj["metadata"]
    namespace = meta.get("namespace")
    return f"{namespace}/{meta['name']}" if namespace else str(meta["name"])


@dataclass(frozen=True, slots=True)
class NodeInfo:
    """A node as the model sees it, whether it takes new pods, and its MIG devices per profile."""

    node: Node
    schedulable: bool
    mig: Mapping[str, int]


def node_from(obj: Obj) -> NodeInfo:
    """Translate a Node."""
    meta, status = obj["metadata"], obj.get("status", {})
    labels: dict[str, str] = dict(meta.get("labels") or {})
    name = str(meta["name"])
    allocatable = status.get("allocatable") or status.get("capacity") or {}
    zone = labels.get(ZONE_LABEL, "default")
    node = Node(
        name=name,
        pool=labels.get(POOL_LABEL, "default"),
        zone=zone,
        rack=labels.get(RACK_LABEL, zone),
        resource_type=labels.get(TYPE_LABEL) or labels.get(PRODUCT_LABEL) or "gpu",
        gpus=int(quantity(allocatable.get(GPU_RESOURCE, 0), f"node {name} {GPU_RESOURCE}")),
        cpu_milli=cpu_milli(allocatable.get("cpu", 0), f"node {name} cpu"),
        memory_mib=memory_mib(allocatable.get("memory", 0), f"node {name} memory"),
        labels=labels,
    )
    mig = {
        key.removeprefix(MIG_PREFIX): int(quantity(v, f"node {name} {key}"))
        for key, v in allocatable.items()
        if key.startswith(MIG_PREFIX)
    }
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()
    )
    schedulable = ready and not obj.get("spec", {}).get("unschedulable", False)
    return NodeInfo(node, schedulable, mig)


def resource_types(nodes: Sequence[Node]) -> dict[str, ResourceType]:
    """A resource type per distinct ``Node.resource_type``, with the per-GPU bundle of its first node."""
    types: dict[str, ResourceType] = {}
    for node in nodes:
        if node.resource_type not in types:
            per = max(node.gpus, 1)
            types[node.resource_type] = ResourceType(
                name=node.resource_type,
                gpu_model=node.labels.get(PRODUCT_LABEL, node.resource_type),
                gpu_memory_mib=int(node.labels.get("nvidia.com/gpu.memory", "0") or 0),
                cpu_milli_per_gpu=node.cpu_milli // per,
                memory_mib_per_gpu=node.memory_mib // per,
            )
    return types


def pod_request(pod: Obj) -> TaskRequest:
    """What one pod asks for: the sum of its containers' requests (limits for extended resources)."""
    name = key_of(pod)
    gpus = cpu = memory = 0
    mig: str | None = None
    for container in pod.get("spec", {}).get("containers") or ():
        resources = container.get("resources") or {}
        wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
        for key, value in wanted.items():
            field = f"pod {name} {key}"
            if key == GPU_RESOURCE:
                gpus += int(quantity(value, field))
            elif key.startswith(MIG_PREFIX):
                mig = key.removeprefix(MIG_PREFIX)
            elif key == "cpu":
                cpu += cpu_milli(value, field)
            elif key == "memory":
                memory += memory_mib(value, field)
    return TaskRequest(gpu_milli=gpus * MILLI_PER_GPU, cpu_milli=cpu, memory_mib=memory, mig_profile=mig)


def pod_group_of(pod: Obj) -> str | None:
    """The PodGroup name a pod belongs to, if any."""
    labels = pod["metadata"].get("labels") or {}
    for label in POD_GROUP_LABELS:
        if label in labels:
            return str(labels[label])
    return None


def job_id_of(pod: Obj) -> str:
    """``namespace/podgroup`` for a gang member, else ``namespace/pod``."""
    group = pod_group_of(pod)
    namespace = pod["metadata"].get("namespace", "default")
    return f"{namespace}/{group}" if group else key_of(pod)


def is_ours(pod: Obj) -> bool:
    """True for a pod that names loadmaster as its scheduler."""
    return bool(pod.get("spec", {}).get("schedulerName") == SCHEDULER_NAME)


def is_active(pod: Obj) -> bool:
    """True for a pod that holds or wants resources: not finished and not being deleted."""
    phase = pod.get("status", {}).get("phase", "Pending")
    return phase not in {"Succeeded", "Failed"} and not pod["metadata"].get("deletionTimestamp")


def node_name_of(pod: Obj) -> str | None:
    """The node a pod is bound to, or None."""
    node = pod.get("spec", {}).get("nodeName")
    return str(node) if node else None


def gpu_indices_of(pod: Obj) -> tuple[int, ...] | None:
    """The GPU indices loadmaster recorded at bind time, or None when absent."""
    text = (pod["metadata"].get("annotations") or {}).get(GPUS_ANNOTATION)
    if text is None:
        return None
    return tuple(int(part) for part in str(text).split(",") if part)


def job_from(job_id: str, pods: Sequence[Obj], pod_group: Obj | None, default_time_limit_s: float) -> Job:
    """A job from its pods (all of them, bound or not) and its PodGroup (None: a single pod).

    The request is the first pod's (by name): members of a gang are identical.
    The job's submit time is the PodGroup's creation time, else its first pod's.
    """
    first = min(pods, key=lambda p: str(p["metadata"]["name"]))
    meta, spec = first["metadata"], first.get("spec", {})
    labels: Mapping[str, str] = meta.get("labels") or {}
    namespace = str(meta.get("namespace", "default"))
    tasks = len(pods)
    min_member = tasks
    created = min(timestamp_s(p["metadata"].get("creationTimestamp")) for p in pods)
    if pod_group is not None:
        min_member = int(pod_group.get("spec", {}).get("minMember", tasks))
        created = timestamp_s(pod_group["metadata"].get("creationTimestamp")) or created
    selector: dict[str, str] = dict(spec.get("nodeSelector") or {})
    return Job(
        id=job_id,
        user=labels.get(USER_LABEL, namespace),
        group=labels.get(GROUP_LABEL, namespace),
        submit_s=created,
        tasks=tasks,
        min_available=min(max(min_member, 1), tasks),
        request=pod_request(first),
        time_limit_s=float(spec.get("activeDeadlineSeconds") or default_time_limit_s),
        queue=labels.get(QUEUE_LABEL, "default"),
        priority_class=str(spec.get("priorityClassName") or "normal"),
        priority=int(spec.get("priority") or 0),
        pool=selector.pop(POOL_LABEL, None),
        resource_type=selector.pop(TYPE_LABEL, None),
        node_selector=selector,
        cuda=cuda_of(first),
        cuda_compat=(meta.get("annotations") or {}).get(CUDA_COMPAT_ANNOTATION) == "true",
    )


def cuda_of(pod: Obj) -> CudaVersion | None:
    """The CUDA release a pod declares: annotation ``loadmaster.io/cuda``, else the env ``CUDA_VERSION``."""
    text = (pod["metadata"].get("annotations") or {}).get(CUDA_ANNOTATION)
    if text is None:
        for container in pod.get("spec", {}).get("containers") or ():
            for env in container.get("env") or ():
                if env.get("name") == "CUDA_VERSION" and env.get("value"):
                    text = env["value"]
    if text is None:
        return None
    try:
        return CudaVersion.parse(str(text))
    except LoadmasterError as exc:
        raise KubeError(f"pod {key_of(pod)}: {CUDA_ANNOTATION}: {exc}") from None
