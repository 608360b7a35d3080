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
node ``spec.taints``, ``unschedulable``    ``Node.taints``, ``Node.unschedulable``
allocatable ``pods``                       ``Node.max_pods``
pod ``spec.tolerations``                   ``Job.tolerations``
pod ``spec.affinity.nodeAffinity``         ``Job.affinity``
``spec.priority``, PriorityClass           ``Job.priority_value``, ``Job.may_preempt``
``spec.schedulerName``                     ``Job.scheduler_name``
========================================  =============================================
"""

from __future__ import annotations

import re
import time
from collections.abc import Callable, Collection, Iterable, Mapping, Sequence
from dataclasses import dataclass
from datetime import datetime
from decimal import ROUND_CEILING, ROUND_FLOOR, ROUND_UP, Decimal, localcontext
from typing import Any

from loadmaster.errors import LoadmasterError
from loadmaster.model import (
    MILLI_PER_GPU,
    Job,
    Node,
    NodeAffinity,
    PreferredTerm,
    Requirement,
    ResourceType,
    SelectorTerm,
    Taint,
    TaskRequest,
    Toleration,
)
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
RECLAIM_ANNOTATION = "loadmaster.io/reclaim"
"""``first`` on interactive sessions: the idle-reclaim policy takes them before training jobs."""
RECLAIM_NOTICE_ANNOTATION = "loadmaster.io/reclaim-notice"
"""Written by the scheduler on each pod of a job found idle: why, and what happens when (removed when the
job works again); ``loadmaster status`` and ``jobs`` show it to the owner."""
RECLAIM_MARK_ANNOTATION = "loadmaster.io/reclaim-marked"
"""Written by the scheduler on each pod of a job a ``mark`` reclaim policy acted on: why."""
POD_GROUP_LABELS = ("scheduling.x-k8s.io/pod-group", "pod-group.scheduling.sigs.k8s.io")
DEFAULT_TIME_LIMIT_S = 86_400.0
"""Run time assumed for a pod without ``activeDeadlineSeconds``: one day, a common lab limit."""

_DECIMAL_SI = {"n": -9, "u": -6, "m": -3, "": 0, "k": 3, "M": 6, "G": 9, "T": 12, "P": 15, "E": 18}
_BINARY_SI = {"Ki": 10, "Mi": 20, "Gi": 30, "Ti": 40, "Pi": 50, "Ei": 60}
_QUANTITY = re.compile(r"^([+-]?)([0-9]*)(?:\.([0-9]*))?([eEinumkKMGTP]*[+-]?[0-9]*)$")
_BINARY_CAP = Decimal(2**63 - 1)
_NANO = Decimal("1e-9")
_EXPONENT_BOUND = 100
_PRECISION = 2 * _EXPONENT_BOUND + 40
_MIG_PROFILE = re.compile(r"^[1-7]g\.[0-9]+gb(\+me)?$")
MAX_NODE_GPUS = 256
"""GPUs a node is taken to have at most: the per-GPU arrays are nodes x the largest node's GPUs, and
any quantity is a valid count (time-slicing advertises a few replicas per GPU, 8 x 10 = 80, say)."""
AMOUNT_CAP = 2**50
"""Largest amount (milli-cores, MiB, devices) a translated quantity keeps: a valid quantity is not
bounded (``1E`` CPUs is one), but the per-node arrays are int64 and sum many pods' amounts."""


class KubeError(LoadmasterError):
    """A Kubernetes object loadmaster cannot translate, or an API failure it cannot recover from."""


def parse_quantity(value: str | int | float, field: str) -> Decimal:
    """A Kubernetes quantity as an exact decimal, parsed as apimachinery's ``resource.ParseQuantity``.

    Every form the API server accepts: a signed decimal number (``1``, ``1.5``,
    ``.5``, ``5.``), then a binary suffix (``Ki`` to ``Ei``), a decimal one
    (``n u m k M G T P E``) or an exponent (``e9``, ``E-3``). As upstream, a
    non-zero value finer than a nano is rounded away from zero to one nano,
    and a binary-suffixed value is capped at 2^63-1. Upstream source:
    k8s.io/apimachinery pkg/api/resource/quantity.go (``parseQuantityString``,
    ``ParseQuantity``) and suffix.go.
    """
    text = str(value)
    match = _QUANTITY.match(text)
    if not text or match is None:
        raise KubeError(f"{field}: {value!r} is not a Kubernetes quantity (like 500m, 1.5Gi, 1e9 or 4)")
    sign, whole, fraction, suffix = match.groups()
    with localcontext(prec=_PRECISION):
        number = _scaled(Decimal(f"{whole or '0'}.{fraction or '0'}"), suffix)
        if number is None:
            raise KubeError(
                f"{field}: {value!r} has an unknown suffix {suffix!r}; allowed: "
                f"{', '.join(_BINARY_SI)}, {', '.join(s for s in _DECIMAL_SI if s)}, or an exponent like e9"
            )
        if number:
            number = number.quantize(_NANO, rounding=ROUND_UP)
    return -number if sign == "-" else number


def _scaled(number: Decimal, suffix: str) -> Decimal | None:
    """``number`` times what ``suffix`` means (apimachinery's suffix.go ``interpret``); None if nothing."""
    if suffix in _DECIMAL_SI:
        return number.scaleb(_DECIMAL_SI[suffix])
    if suffix in _BINARY_SI:
        scaled: Decimal = number * 2 ** _BINARY_SI[suffix]
        return min(scaled, _BINARY_CAP)
    if len(suffix) > 1 and suffix[0] in "eE" and re.fullmatch(r"[+-]?[0-9]+", suffix[1:]):
        # Beyond 10^±_EXPONENT_BOUND nothing changes for us (capped, or one nano): keep Decimal in range.
        return number.scaleb(max(min(int(suffix[1:]), _EXPONENT_BOUND), -_EXPONENT_BOUND))
    return None


def _amount(number: Decimal, rounding: str) -> int:
    """``number`` as an int, rounded as told, clamped to [0, AMOUNT_CAP] (requests are never negative)."""
    return min(max(int(number.to_integral_value(rounding=rounding)), 0), AMOUNT_CAP)


def quantity(value: str | int | float, field: str) -> float:
    """A Kubernetes quantity (``500m``, ``16Gi``, ``1e9``, ``4``) as a plain number of base units."""
    return float(parse_quantity(value, field))


def count(value: str | int | float, field: str, *, up: bool = True) -> int:
    """A quantity of whole things (GPUs, MIG devices, pods): rounded up for a request, down for a node."""
    return _amount(parse_quantity(value, field), ROUND_CEILING if up else ROUND_FLOOR)


def cpu_milli(value: str | int | float, field: str, *, up: bool = True) -> int:
    """CPU quantity in milli-cores: rounded up (as ``Quantity.MilliValue``) for a request, down for a node."""
    return _amount(parse_quantity(value, field) * 1000, ROUND_CEILING if up else ROUND_FLOOR)


def memory_mib(value: str | int | float, field: str, *, up: bool = False) -> int:
    """Memory quantity in MiB: down for a node's allocatable, up for a request (never under-counted)."""
    return _amount(parse_quantity(value, field) / 2**20, ROUND_CEILING if up else ROUND_FLOOR)


def utc_stamp(epoch_s: float) -> str:
    """A time as the API writes it (RFC 3339, UTC, whole seconds)."""
    return time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(epoch_s))


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
    """A node as the model sees it, whether it takes new pods, and its MIG devices per profile.

    ``schedulable`` is False for a node that is not Ready; a cordon is in ``node.unschedulable``, for
    the ``node-unschedulable`` plugin to judge (a job may tolerate it).
    """

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
        gpus=min(
            count(allocatable.get(GPU_RESOURCE, 0), f"node {name} {GPU_RESOURCE}", up=False), MAX_NODE_GPUS
        ),
        cpu_milli=cpu_milli(allocatable.get("cpu", 0), f"node {name} cpu", up=False),
        memory_mib=memory_mib(allocatable.get("memory", 0), f"node {name} memory"),
        labels=labels,
        taints=tuple(
            Taint(str(t.get("key", "")), str(t.get("value") or ""), str(t.get("effect", "")))
            for t in obj.get("spec", {}).get("taints") or ()
        ),
        unschedulable=bool(obj.get("spec", {}).get("unschedulable", False)),
        max_pods=count(allocatable["pods"], f"node {name} pods", up=False) if "pods" in allocatable else None,
    )
    mig = {
        key.removeprefix(MIG_PREFIX): count(v, f"node {name} {key}", up=False)
        for key, v in allocatable.items()
        if key.startswith(MIG_PREFIX)
    }
    ready = any(
        c.get("type") == "Ready" and c.get("status") == "True" for c in status.get("conditions") or ()
    )
    # A cordon is the node-unschedulable plugin's to judge (a job may tolerate it); not Ready is not.
    return NodeInfo(node, ready, mig)


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
    """What one pod asks for, as kube-scheduler counts it (k8s.io/component-helpers resource ``PodRequests``).

    The sum of its containers' requests (limits for extended resources, which
    have no separate request) and sidecars' (init containers that restart
    ``Always``), or the largest init container's with the sidecars started
    before it, where that is more (init containers run one at a time, before
    the others), plus ``spec.overhead``. A MIG device is one of its profile; a pod asking
    for whole GPUs too is counted by its GPUs (a task holds one or the other).
    A resource name that is not a MIG profile is left out, like any extended
    resource loadmaster does not model.
    """
    name = key_of(pod)
    spec = pod.get("spec", {})
    total, sidecars, init = [0, 0, 0], [0, 0, 0], [0, 0, 0]
    mig: str | None = None
    for container in spec.get("containers") or ():
        amounts, wanted_mig = _container_request(container, name)
        total, mig = _add(total, amounts), wanted_mig or mig
    for container in spec.get("initContainers") or ():
        amounts, wanted_mig = _container_request(container, name)
        mig = mig or wanted_mig
        if container.get("restartPolicy") == "Always":  # a sidecar: runs on beside what follows
            total, sidecars = _add(total, amounts), _add(sidecars, amounts)
            amounts = sidecars
        else:
            amounts = _add(amounts, sidecars)
        init = [max(a, b) for a, b in zip(init, amounts, strict=True)]
    total = [max(a, b) for a, b in zip(total, init, strict=True)]
    overhead = spec.get("overhead") or {}
    gpus, cpu, memory = (min(amount, AMOUNT_CAP) for amount in total)
    cpu += cpu_milli(overhead["cpu"], f"pod {name} overhead cpu") if "cpu" in overhead else 0
    memory += (
        memory_mib(overhead["memory"], f"pod {name} overhead memory", up=True) if "memory" in overhead else 0
    )
    return TaskRequest(
        gpu_milli=gpus * MILLI_PER_GPU, cpu_milli=cpu, memory_mib=memory, mig_profile=None if gpus else mig
    )


def _add(one: list[int], other: list[int]) -> list[int]:
    return [a + b for a, b in zip(one, other, strict=True)]


def _container_request(container: Obj, pod: str) -> tuple[list[int], str | None]:
    """[GPUs, milli-CPU, MiB] one container asks for, and the MIG profile it asks for (if any)."""
    resources = container.get("resources") or {}
    wanted = {**(resources.get("limits") or {}), **(resources.get("requests") or {})}
    amounts = [0, 0, 0]
    mig: str | None = None
    for key, value in wanted.items():
        field = f"pod {pod} {key}"
        if key == GPU_RESOURCE:
            amounts[0] += count(value, field)
        elif key.startswith(MIG_PREFIX) and _MIG_PROFILE.match(key.removeprefix(MIG_PREFIX)):
            mig = key.removeprefix(MIG_PREFIX) if count(value, field) > 0 else mig
        elif key == "cpu":
            amounts[1] += cpu_milli(value, field)
        elif key == "memory":
            amounts[2] += memory_mib(value, field, up=True)
    return amounts, mig


def tolerations_of(pod: Obj) -> tuple[Toleration, ...]:
    """The pod's ``spec.tolerations``."""
    return tuple(
        Toleration(
            key=str(t.get("key") or ""),
            operator=str(t.get("operator") or "Equal"),
            value=str(t.get("value") or ""),
            effect=str(t.get("effect") or ""),
        )
        for t in pod.get("spec", {}).get("tolerations") or ()
    )


def _requirements(items: Sequence[Obj] | None) -> tuple[Requirement, ...]:
    return tuple(
        Requirement(
            str(r.get("key", "")), str(r.get("operator", "")), tuple(str(v) for v in r.get("values") or ())
        )
        for r in items or ()
    )


def _term(term: Obj | None) -> SelectorTerm:
    term = term or {}
    return SelectorTerm(_requirements(term.get("matchExpressions")), _requirements(term.get("matchFields")))


def affinity_of(pod: Obj) -> NodeAffinity | None:
    """The pod's ``spec.affinity.nodeAffinity`` (None when it has none)."""
    node_affinity = ((pod.get("spec", {}).get("affinity") or {}).get("nodeAffinity")) or {}
    required = node_affinity.get("requiredDuringSchedulingIgnoredDuringExecution")
    preferred = node_affinity.get("preferredDuringSchedulingIgnoredDuringExecution") or ()
    if required is None and not preferred:
        return None
    return NodeAffinity(
        required=None
        if required is None
        else tuple(_term(t) for t in required.get("nodeSelectorTerms") or ()),
        preferred=tuple(
            PreferredTerm(int(p.get("weight", 0)), _term(p.get("preference"))) for p in preferred
        ),
    )


@dataclass(frozen=True, slots=True)
class PriorityInfo:
    """A PriorityClass (``scheduling.k8s.io/v1``): its value, whether it is the default, its policy."""

    value: int
    global_default: bool = False
    preemption_policy: str = "PreemptLowerPriority"


def priority_classes(objects: Iterable[Obj]) -> dict[str, PriorityInfo]:
    """PriorityClass name -> what it says; the key ``""`` holds the ``globalDefault`` class, if any."""
    found: dict[str, PriorityInfo] = {}
    for obj in objects:
        info = PriorityInfo(
            value=int(obj.get("value", 0)),
            global_default=bool(obj.get("globalDefault", False)),
            preemption_policy=str(obj.get("preemptionPolicy") or "PreemptLowerPriority"),
        )
        found[str(obj["metadata"]["name"])] = info
        if info.global_default:
            found[""] = info
    return found


def priority_of(pod: Obj, classes: Mapping[str, PriorityInfo]) -> tuple[int | None, bool]:
    """The pod's priority and whether it may preempt, as the API server's Priority admission resolves them.

    ``spec.priority`` and ``spec.preemptionPolicy`` when set (admission writes
    them on a real cluster); else the PriorityClass named by
    ``priorityClassName`` (none named: the ``globalDefault`` class). None when
    neither says: the priority plugins' class table decides.
    """
    spec = pod.get("spec", {})
    known = classes.get(str(spec.get("priorityClassName") or ""))
    value = spec.get("priority")
    resolved = int(value) if value is not None else (known.value if known is not None else None)
    policy = spec.get("preemptionPolicy") or (known.preemption_policy if known is not None else "")
    return resolved, policy != "Never"


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


def is_ours(pod: Obj, names: Collection[str] = (SCHEDULER_NAME,)) -> bool:
    """True for a pod whose ``spec.schedulerName`` is one of ``names`` (loadmaster's profiles)."""
    return pod.get("spec", {}).get("schedulerName") in names


TERMINAL_PHASES = frozenset({"Succeeded", "Failed"})
"""The kubelet's phases of a pod whose containers have all ended (they hold nothing any more)."""


def phase_of(pod: Obj) -> str:
    """The pod's ``status.phase`` (``Pending`` until the API server or kubelet writes one)."""
    return str(pod.get("status", {}).get("phase", "Pending"))


def owners_of(pod: Obj) -> tuple[str, str]:
    """The user and the group a pod's job belongs to: its labels, else its namespace."""
    labels: Mapping[str, str] = pod["metadata"].get("labels") or {}
    namespace = str(pod["metadata"].get("namespace", "default"))
    return labels.get(USER_LABEL, namespace), labels.get(GROUP_LABEL, namespace)


def is_active(pod: Obj) -> bool:
    """True for a pod that holds or wants resources: not finished and not being deleted."""
    return phase_of(pod) not in TERMINAL_PHASES and not pod["metadata"].get("deletionTimestamp")


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


def job_from(
    job_id: str,
    pods: Sequence[Obj],
    pod_group: Obj | None,
    default_time_limit_s: float,
    classes: Mapping[str, PriorityInfo] | None = None,
    *,
    requests: Callable[[Obj], TaskRequest] | None = None,
) -> Job:
    """A job from its pods (all of them, bound or not) and its PodGroup (None: a single pod).

    ``classes`` are the cluster's PriorityClasses (:func:`priority_classes`); ``requests`` reads a
    pod's request (default :func:`pod_request`; the driver's keeps what it parsed).
    The request is the first pod's (by name): members of a gang are identical.
    The job's submit time is the PodGroup's creation time, else its first pod's.
    """
    first = min(pods, key=lambda p: str(p["metadata"]["name"]))
    meta, spec = first["metadata"], first.get("spec", {})
    labels: Mapping[str, str] = meta.get("labels") or {}
    user, group = owners_of(first)
    tasks = len(pods)
    min_member = tasks
    created = min(timestamp_s(p["metadata"].get("creationTimestamp")) for p in pods)
    if pod_group is not None:
        min_member = int(pod_group.get("spec", {}).get("minMember", tasks))
        created = timestamp_s(pod_group["metadata"].get("creationTimestamp")) or created
    selector: dict[str, str] = dict(spec.get("nodeSelector") or {})
    value, may_preempt = priority_of(first, classes or {})
    return Job(
        id=job_id,
        user=user,
        group=group,
        submit_s=created,
        tasks=tasks,
        min_available=min(max(min_member, 1), tasks),
        request=(requests or pod_request)(first),
        time_limit_s=float(spec.get("activeDeadlineSeconds") or default_time_limit_s),
        queue=labels.get(QUEUE_LABEL, "default"),
        priority_class=str(spec.get("priorityClassName") or "normal"),
        priority=int(spec.get("priority") or 0),
        pool=selector.pop(POOL_LABEL, None),
        resource_type=selector.pop(TYPE_LABEL, None),
        node_selector=selector,
        cuda=cuda_of(first),
        cuda_compat=(meta.get("annotations") or {}).get(CUDA_COMPAT_ANNOTATION) == "true",
        reclaim_first=(meta.get("annotations") or {}).get(RECLAIM_ANNOTATION) == "first",
        tolerations=tolerations_of(first),
        affinity=affinity_of(first),
        priority_value=value,
        may_preempt=may_preempt,
        scheduler_name=str(spec.get("schedulerName") or SCHEDULER_NAME),
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
