"""Two ``loadmaster agent --fake-gpus`` processes, their GPUs mapped to pods by fake kubelet
pod-resources servers on unix sockets, scraped by a real Prometheus and read back by PrometheusStore."""

from __future__ import annotations

import json
import os
import shutil
import socket
import subprocess
import sys
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import httpx
import pytest

from loadmaster.errors import TelemetryError
from loadmaster.telemetry import field
from loadmaster.telemetry.podresources.fake import FakePodResources, gpu_pod
from loadmaster.telemetry.prometheus import PrometheusStore


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


def prometheus_binary() -> str:
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the prometheus binary is missing; CI must install it (.ci/run)")
        pytest.skip("the prometheus binary is not installed")
    return binary


def uuid(host_tag: int, gpu: int) -> str:
    """The UUID ``FakeReader.busy`` gives GPU ``gpu`` of the fake node ``host_tag``."""
    return f"GPU-{host_tag:08d}-0000-0000-0000-{gpu:012d}"


def wait_until(check: Callable[[], bool], what: str, timeout_s: float = 60.0) -> None:
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            if check():
                return
        except (httpx.HTTPError, ValueError, KeyError):  # Prometheus answers 503 while it starts
            pass
        time.sleep(0.25)
    pytest.fail(f"timed out waiting for {what}")


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
        processes.append(
            subprocess.Popen(
                [
                    sys.executable,
                    "-c",
                    "from loadmaster.cli import main; main()",
                    "agent",
                    "--host",
                    "127.0.0.1",
                    "--port",
                    str(port),
                    "--interval",
                    "0.5",
                    "--hostname",
                    host,
                    "--fake-gpus",
                    "2",
                    "--fake-host-tag",
                    str(tag),
                    "--fake-values",
                    str(values),
                    "--pod-resources-socket",
                    kubelet.socket_path,
                ],
                stdout=subprocess.DEVNULL,
                stderr=subprocess.DEVNULL,
            )
        )
    config = folder / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: gpus\n"
        f"    static_configs: [{{targets: {json.dumps(targets)}}}]\n"
    )
    port = free_port()
    processes.append(
        subprocess.Popen(
            [
                binary,
                f"--config.file={config}",
                f"--storage.tsdb.path={folder / 'data'}",
                f"--web.listen-address=127.0.0.1:{port}",
            ],
            stdout=subprocess.DEVNULL,
            stderr=subprocess.DEVNULL,
        )
    )
    url = f"http://127.0.0.1:{port}"
    try:
        yield url, folder, kubelets
    finally:
        for process in processes:
            process.terminate()
        for process in processes:
            process.wait(timeout=20)
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
