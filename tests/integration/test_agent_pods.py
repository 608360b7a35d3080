"""Two ``loadmaster agent --fake-gpus`` processes, their GPUs mapped to pods by fake kubelet
pod-resources servers on unix sockets, scraped by a real Prometheus and read back by PrometheusStore."""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from live_stack import free_port, prometheus_binary, start_agent, start_prometheus, stop, wait_until

from loadmaster.errors import TelemetryError
from loadmaster.telemetry import field
from loadmaster.telemetry.podresources.fake import FakePodResources, gpu_pod
from loadmaster.telemetry.prometheus import PrometheusStore


def uuid(host_tag: int, gpu: int) -> str:
    """The UUID ``FakeReader.busy`` gives GPU ``gpu`` of the fake node ``host_tag``."""
    return f"GPU-{host_tag:08d}-0000-0000-0000-{gpu:012d}"


@pytest.fixture(scope="module")
def cluster(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, Path, list[FakePodResources]]]:
    binary = prometheus_binary()
    folder = tmp_path_factory.mktemp("agents")
    kubelets = [
        FakePodResources(
            str(folder / "kubelet-a.sock"), [gpu_pod("team-a", "train-0", [uuid(1, 0), uuid(1, 1)])]
        ),
        FakePodResources(str(folder / "kubelet-b.sock"), [gpu_pod("team-b", "notebook", ["nvidia1"])]),
    ]
    for kubelet in kubelets:
        kubelet.start()
    processes: list[subprocess.Popen[bytes]] = []
    targets = []
    for tag, (host, kubelet) in enumerate(zip(("gpu-a", "gpu-b"), kubelets, strict=True), start=1):
        port = free_port()
        targets.append(f"127.0.0.1:{port}")
        values = folder / f"values-{host}.json"
        values.write_text("{}")
        processes.append(start_agent(port, host, 2, tag, kubelet.socket_path, values=values))
    prometheus, url = start_prometheus(binary, folder, targets)
    processes.append(prometheus)
    try:
        yield url, folder, kubelets
    finally:
        stop(processes)
        for kubelet in kubelets:
            kubelet.close()


def pods_seen(url: str) -> dict[tuple[str, str], str]:
    try:
        with PrometheusStore(url, lookback_s=60) as store:
            found = store.series()
    except (httpx.HTTPError, TelemetryError):  # Prometheus still starting: not ready yet
        return {}
    return {
        (s.labels["Hostname"], s.labels["gpu"]): s.labels.get("pod", "") for s in found if s.scope == "gpu"
    }


def test_prometheus_sees_each_gpu_with_its_pod(cluster: tuple[str, Path, list[FakePodResources]]) -> None:
    url, _, _ = cluster
    want = {
        ("gpu-a", "0"): "train-0",
        ("gpu-a", "1"): "train-0",
        ("gpu-b", "0"): "",
        ("gpu-b", "1"): "notebook",
    }
    wait_until(lambda: all(pods_seen(url).get(k) == v for k, v in want.items()), "four labelled GPU series")
    with PrometheusStore(url, lookback_s=60) as store:
        train = store.series(pod="train-0", namespace="team-a", container="main")
        assert sorted(s.labels["UUID"] for s in train) == [uuid(1, 0), uuid(1, 1)]
        util = store.latest(field("GPU_UTIL"))
        assert all(util[s.id] == 97.0 for s in train)


def test_a_fault_injected_through_a_fake_gpu_reaches_prometheus(
    cluster: tuple[str, Path, list[FakePodResources]],
) -> None:
    url, folder, _ = cluster
    (folder / "values-gpu-b.json").write_text(json.dumps({"1": {"XID_ERRORS": 79}}))

    def xid_seen() -> bool:
        body = httpx.get(f"{url}/api/v1/query", params={"query": 'DCGM_FI_DEV_XID_ERRORS{pod="notebook"}'})
        result = body.json()["data"]["result"]
        return bool(result) and float(result[0]["value"][1]) == 79.0

    wait_until(xid_seen, "XID 79 on the notebook's GPU")
