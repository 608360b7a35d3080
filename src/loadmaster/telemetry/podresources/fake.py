"""A fake kubelet pod-resources server on a unix socket, for tests and the end-to-end run.

It answers ``List`` as the kubelet's v1 server does
(kubernetes pkg/kubelet/apis/podresources/server_v1.go): every pod of the
node, every container of each pod (containers without devices have an empty
device list), and per container the device ids allocated under each resource
name. Differences from the kubelet: no CPU, memory or dynamic (DRA)
resources; ``Get`` and ``GetAllocatableResources`` are not served
(UNIMPLEMENTED); the pods are whatever :meth:`FakePodResources.set_pods` last
set, with no pod lifecycle behind them.

Run one by hand: ``python -m loadmaster.telemetry.podresources.fake --socket
/tmp/kubelet.sock --pods pods.json`` where ``pods.json`` is ``[{"namespace":
"team-a", "pod": "train-0", "container": "main", "resource": "nvidia.com/gpu",
"devices": ["GPU-..."]}]``; the file is read again whenever it changes.
"""

from __future__ import annotations

import argparse
import json
import os
import threading
import time
from collections.abc import Sequence
from concurrent import futures
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import grpc

from loadmaster.errors import TelemetryError
from loadmaster.telemetry.podresources.v1 import api_pb2
from loadmaster.telemetry.pods import GPU_RESOURCE


@dataclass(frozen=True)
class FakeContainer:
    """A container and the device ids allocated to it, by resource name."""

    name: str
    devices: dict[str, tuple[str, ...]] = field(default_factory=dict)


@dataclass(frozen=True)
class FakePod:
    """A pod of the fake node."""

    namespace: str
    name: str
    containers: tuple[FakeContainer, ...]


def gpu_pod(namespace: str, name: str, devices: Sequence[str], resource: str = GPU_RESOURCE) -> FakePod:
    """A one-container (``main``) pod holding ``devices`` of ``resource``."""
    return FakePod(namespace, name, (FakeContainer("main", {resource: tuple(devices)}),))


class FakePodResources:
    """``PodResourcesLister.List`` on ``unix://socket_path``; ``close`` stops it and removes the socket."""

    def __init__(self, socket_path: str, pods: Sequence[FakePod] = ()) -> None:
        self.socket_path = socket_path
        self._pods: tuple[FakePod, ...] = tuple(pods)
        self._lock = threading.Lock()
        self.calls = 0
        self._server = grpc.server(futures.ThreadPoolExecutor(max_workers=2))
        handler = grpc.unary_unary_rpc_method_handler(
            self._list,
            request_deserializer=api_pb2.ListPodResourcesRequest.FromString,
            response_serializer=api_pb2.ListPodResourcesResponse.SerializeToString,
        )
        self._server.add_generic_rpc_handlers(
            (grpc.method_handlers_generic_handler("v1.PodResourcesLister", {"List": handler}),)
        )
        if self._server.add_insecure_port(f"unix://{socket_path}") == 0:
            raise TelemetryError(f"cannot listen on unix socket {socket_path}")

    def start(self) -> FakePodResources:
        """Start serving in the background; returns itself."""
        self._server.start()
        return self

    def set_pods(self, pods: Sequence[FakePod]) -> None:
        """Replace the node's pods (takes effect on the next ``List``)."""
        with self._lock:
            self._pods = tuple(pods)

    def close(self) -> None:
        """Stop serving and remove the socket file."""
        self._server.stop(grace=None).wait()
        if os.path.exists(self.socket_path):
            os.unlink(self.socket_path)

    def _list(
        self, request: api_pb2.ListPodResourcesRequest, context: Any
    ) -> api_pb2.ListPodResourcesResponse:
        with self._lock:
            pods = self._pods
            self.calls += 1
        return api_pb2.ListPodResourcesResponse(pod_resources=[_pod_message(p) for p in pods])


def _pod_message(pod: FakePod) -> api_pb2.PodResources:
    return api_pb2.PodResources(
        name=pod.name,
        namespace=pod.namespace,
        containers=[
            api_pb2.ContainerResources(
                name=c.name,
                devices=[
                    api_pb2.ContainerDevices(resource_name=r, device_ids=list(ids))
                    for r, ids in c.devices.items()
                ],
            )
            for c in pod.containers
        ],
    )


def pods_from_json(text: str, where: str) -> list[FakePod]:
    """Pods from the JSON list described in the module docstring; errors name the entry and field."""
    try:
        rows = json.loads(text)
    except json.JSONDecodeError as exc:
        raise TelemetryError(f"{where}: not JSON ({exc})") from exc
    if not isinstance(rows, list):
        raise TelemetryError(f"{where}: expected a list of pods, got {type(rows).__name__}")
    pods = []
    for i, row in enumerate(rows):
        for key in ("namespace", "pod", "devices"):
            if not isinstance(row, dict) or key not in row:
                raise TelemetryError(
                    f"{where}[{i}]: missing {key!r} (namespace, pod, devices[, container, resource])"
                )
        devices = row["devices"]
        if not isinstance(devices, list) or not all(isinstance(d, str) for d in devices):
            raise TelemetryError(f"{where}[{i}].devices: expected a list of device ids, got {devices!r}")
        container = FakeContainer(
            str(row.get("container", "main")), {str(row.get("resource", GPU_RESOURCE)): tuple(devices)}
        )
        pods.append(FakePod(str(row["namespace"]), str(row["pod"]), (container,)))
    return pods


def main(argv: Sequence[str] | None = None) -> None:
    """Serve the pods of a JSON file on a unix socket until interrupted, re-reading the file on change."""
    parser = argparse.ArgumentParser(description="A fake kubelet pod-resources server (tests, end to end)")
    parser.add_argument("--socket", required=True, help="unix socket path to serve on")
    parser.add_argument(
        "--pods", required=True, type=Path, help="JSON list of pods (see the module docstring)"
    )
    args = parser.parse_args(argv)
    path: Path = args.pods
    server = FakePodResources(args.socket, pods_from_json(path.read_text(), str(path))).start()
    seen = path.stat().st_mtime_ns
    try:
        while True:
            time.sleep(0.2)
            mtime = path.stat().st_mtime_ns
            if mtime != seen:
                seen = mtime
                server.set_pods(pods_from_json(path.read_text(), str(path)))
    except KeyboardInterrupt:
        pass
    finally:
        server.close()


if __name__ == "__main__":
    main()
