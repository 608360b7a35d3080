"""Which pod holds each GPU of a node: the kubelet's pod-resources API, read as dcgm-exporter reads it.

The kubelet serves ``PodResourcesLister`` (gRPC, API v1) on a unix socket,
``/var/lib/kubelet/pod-resources/kubelet.sock``: ``List`` returns every pod
of the node with, per container, the device ids the device plugin allocated
by resource name (kubernetes pkg/kubelet/apis/podresources/server_v1.go).
The stubs in :mod:`loadmaster.telemetry.podresources.v1` are generated from
the upstream ``api.proto`` (kubernetes/kubelet pkg/apis/podresources/v1) by
grpcio-tools (``tests/unit/test_pod_resources.py`` regenerates and compares).

Device ids are matched as dcgm-exporter does
(internal/pkg/transformation/kubernetes.go, ``toDeviceToPod``): only the
resource ``nvidia.com/gpu`` and resources named ``nvidia.com/mig-*`` count;
a whole GPU is named by its UUID (``GPU-...``, the NVIDIA device plugin's
default) or device name (``nvidia0``); a MIG instance by its MIG UUID
(``MIG-...``), or GKE's ``nvidia0/gi3``; a ``::N`` suffix (time-slicing
replicas) and GKE's ``/vgpuN`` suffix are dropped. :func:`owners` turns a
``List`` answer into device id -> :class:`PodRef`.
"""

from __future__ import annotations

import logging
import re
from collections.abc import Iterable, Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Protocol

from loadmaster.errors import TelemetryError

if TYPE_CHECKING:
    from loadmaster.telemetry.podresources.v1.api_pb2 import ListPodResourcesResponse

LOG = logging.getLogger("loadmaster.agent")

POD_RESOURCES_SOCKET = "/var/lib/kubelet/pod-resources/kubelet.sock"
"""Where the kubelet serves the pod-resources API (dcgm-exporter's default too)."""
GPU_RESOURCE = "nvidia.com/gpu"
"""The NVIDIA device plugin's resource name for whole GPUs."""
MIG_RESOURCE_PREFIX = "nvidia.com/mig-"
"""MIG resource names under the device plugin's ``mixed`` strategy (``nvidia.com/mig-1g.10gb``)."""
LIST_METHOD = "/v1.PodResourcesLister/List"
"""The gRPC method path (package ``v1``, service ``PodResourcesLister``)."""
LIST_TIMEOUT_S = 10.0
"""dcgm-exporter's connection timeout for the same call."""
_GKE_MIG = re.compile(r"^nvidia([0-9]+)/gi([0-9]+)(/vgpu[0-9]+)?$")


@dataclass(frozen=True, order=True)
class PodRef:
    """The container a device is allocated to, with dcgm-exporter's label names."""

    namespace: str
    pod: str
    container: str

    def labels(self) -> dict[str, str]:
        """``pod``, ``namespace`` and ``container`` labels."""
        return {"pod": self.pod, "namespace": self.namespace, "container": self.container}


@dataclass(frozen=True)
class Allocation:
    """One device id allocated to a container, under one resource name."""

    resource: str
    device_id: str
    owner: PodRef


class PodSource(Protocol):
    """What the agent needs from the kubelet: the GPU allocations of this node now."""

    def allocations(self) -> list[Allocation]:
        """Every NVIDIA device allocated to a container; a TelemetryError when the kubelet cannot say."""
        ...


def is_gpu_resource(name: str) -> bool:
    """Whether a resource name is an NVIDIA GPU or MIG resource (dcgm-exporter's filter)."""
    return name == GPU_RESOURCE or name.startswith(MIG_RESOURCE_PREFIX)


def allocations_of(response: ListPodResourcesResponse) -> list[Allocation]:
    """The NVIDIA device allocations in a ``List`` answer, in its order."""
    out = []
    for pod in response.pod_resources:
        for container in pod.containers:
            owner = PodRef(pod.namespace, pod.name, container.name)
            for devices in container.devices:
                if not is_gpu_resource(devices.resource_name):
                    continue
                out += [Allocation(devices.resource_name, d, owner) for d in devices.device_ids]
    return out


def device_key(device_id: str) -> str:
    """A device id with sharing suffixes dropped: ``GPU-x::3`` -> ``GPU-x``, ``nvidia0/vgpu2`` -> ``nvidia0``,
    and GKE's ``nvidia0/gi3`` -> ``0-3`` (dcgm-exporter's GPU-instance key: GPU index, GPU instance id)."""
    gke = _GKE_MIG.match(device_id)
    if gke is not None:
        return f"{gke.group(1)}-{gke.group(2)}"
    base = device_id.split("::", 1)[0]
    return base.split("/vgpu", 1)[0]


def owners(allocations: Iterable[Allocation]) -> dict[str, PodRef]:
    """Device key (:func:`device_key`) -> owner. A device shared by several containers (time-slicing)
    goes to the first in (namespace, pod, container) order, so the choice is stable."""
    out: dict[str, PodRef] = {}
    for a in allocations:
        key = device_key(a.device_id)
        if key not in out or a.owner < out[key]:
            out[key] = a.owner
    return out


class PodResourcesClient:
    """:class:`PodSource` over the kubelet's socket (gRPC ``List`` with a deadline).

    Needs the ``agent`` extra (grpcio, protobuf). The channel is opened once
    and reconnects by itself; every failed call raises a TelemetryError
    naming the socket.
    """

    def __init__(self, socket_path: str = POD_RESOURCES_SOCKET, timeout_s: float = LIST_TIMEOUT_S) -> None:
        try:
            import grpc  # noqa: PLC0415 - only the agent on a Kubernetes node needs gRPC

            from loadmaster.telemetry.podresources.v1 import api_pb2  # noqa: PLC0415 - needs protobuf
        except ImportError as exc:
            raise TelemetryError(
                f"reading pods needs grpcio and protobuf ({exc}); install loadmaster[agent]"
            ) from exc
        self.socket_path = socket_path
        self.timeout_s = timeout_s
        self._grpc = grpc
        self._channel = grpc.insecure_channel(f"unix://{socket_path}")
        self._list = self._channel.unary_unary(
            LIST_METHOD,
            request_serializer=api_pb2.ListPodResourcesRequest.SerializeToString,
            response_deserializer=api_pb2.ListPodResourcesResponse.FromString,
        )
        self._request = api_pb2.ListPodResourcesRequest()

    def list_pods(self) -> ListPodResourcesResponse:
        """The raw ``List`` answer."""
        try:
            response: ListPodResourcesResponse = self._list(self._request, timeout=self.timeout_s)
        except self._grpc.RpcError as exc:
            code = exc.code() if isinstance(exc, self._grpc.Call) else None
            detail = exc.details() if isinstance(exc, self._grpc.Call) else str(exc)
            raise TelemetryError(
                f"pod-resources List on {self.socket_path} failed ({code}): {detail}"
            ) from exc
        return response

    def allocations(self) -> list[Allocation]:
        """The NVIDIA device allocations of this node."""
        return allocations_of(self.list_pods())

    def close(self) -> None:
        """Close the channel."""
        self._channel.close()


def labels_for(keys: Iterable[str], found: Mapping[str, PodRef]) -> dict[str, str]:
    """The pod labels of the first of a device's keys that has an owner (none when free)."""
    for key in keys:
        owner = found.get(key)
        if owner is not None:
            return owner.labels()
    return {}
