"""The agent knows pods: the kubelet's pod-resources API over a fake gRPC server on a unix socket,
dcgm-exporter's device-id matching, MIG instances, and a sampler that a hung GPU cannot block."""

from __future__ import annotations

import filecmp
import shutil
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadmaster.errors import TelemetryError
from loadmaster.telemetry import field
from loadmaster.telemetry.agent import Agent, Device, FakeReader, MigDevice
from loadmaster.telemetry.exposition import MetricsServer, render
from loadmaster.telemetry.podresources.fake import (
    FakeContainer,
    FakePod,
    FakePodResources,
    gpu_pod,
    pods_from_json,
)
from loadmaster.telemetry.pods import Allocation, PodRef, PodResourcesClient, device_key, owners

SRC = Path(__file__).resolve().parents[2] / "src"
STUBS = SRC / "loadmaster" / "telemetry" / "podresources" / "v1"


def test_shipped_stubs_are_what_the_pinned_grpcio_tools_generates(tmp_path: Path) -> None:
    tree = tmp_path / "loadmaster" / "telemetry" / "podresources" / "v1"
    tree.mkdir(parents=True)
    shutil.copy(STUBS / "api.proto", tree / "api.proto")
    subprocess.run(
        [sys.executable, "-m", "grpc_tools.protoc", "-I.", "--python_out=.", "--pyi_out=.",
         "--grpc_python_out=.", "loadmaster/telemetry/podresources/v1/api.proto"],
        cwd=tmp_path, check=True,
    )  # fmt: skip
    for name in ("api_pb2.py", "api_pb2.pyi", "api_pb2_grpc.py"):
        assert filecmp.cmp(tree / name, STUBS / name, shallow=False), name


@pytest.mark.parametrize(
    ("device_id", "key"),
    [
        ("GPU-8f2c0e6a-1111-2222-3333-444455556666", "GPU-8f2c0e6a-1111-2222-3333-444455556666"),
        ("GPU-8f2c::3", "GPU-8f2c"),  # time-slicing replica
        ("MIG-2ce7a541-c516-5dbc-a76e-26cc100d9b55::7", "MIG-2ce7a541-c516-5dbc-a76e-26cc100d9b55"),  # EKS
        ("nvidia0/gi3", "0-3"),  # GKE MIG
        ("nvidia1/gi2/vgpu0", "1-2"),  # GKE MIG shared
        ("nvidia0/vgpu4", "nvidia0"),  # GKE time-sharing
        ("nvidia2", "nvidia2"),  # device-name ids
    ],
)
def test_device_ids_are_matched_as_dcgm_exporter_matches_them(device_id: str, key: str) -> None:
    assert device_key(device_id) == key


def test_a_shared_device_goes_to_the_first_container_in_order() -> None:
    a, b = PodRef("team-b", "p", "c"), PodRef("team-a", "q", "c")
    found = owners([Allocation("nvidia.com/gpu", "GPU-x::0", a), Allocation("nvidia.com/gpu", "GPU-x::1", b)])
    assert found == {"GPU-x": b}


@pytest.fixture
def kubelet(tmp_path: Path) -> Iterator[FakePodResources]:
    server = FakePodResources(str(tmp_path / "kubelet.sock")).start()
    yield server
    server.close()


def test_the_client_lists_only_nvidia_devices_per_container(kubelet: FakePodResources) -> None:
    kubelet.set_pods(
        [
            FakePod(
                "team-a",
                "train-0",
                (
                    FakeContainer(
                        "main", {"nvidia.com/gpu": ("GPU-1", "GPU-2"), "example.com/fpga": ("f0",)}
                    ),
                    FakeContainer("sidecar"),
                ),
            ),
            gpu_pod("team-b", "nb", ["MIG-abc"], resource="nvidia.com/mig-1g.10gb"),
            gpu_pod("kube-system", "nic", ["mlx5_0"], resource="rdma/hca"),
        ]
    )
    client = PodResourcesClient(kubelet.socket_path, timeout_s=5.0)
    try:
        raw = client.list_pods()
        found = client.allocations()
    finally:
        client.close()
    assert [p.name for p in raw.pod_resources] == ["train-0", "nb", "nic"]
    assert [c.name for c in raw.pod_resources[0].containers] == ["main", "sidecar"]
    assert [(a.resource, a.device_id, a.owner.pod) for a in found] == [
        ("nvidia.com/gpu", "GPU-1", "train-0"),
        ("nvidia.com/gpu", "GPU-2", "train-0"),
        ("nvidia.com/mig-1g.10gb", "MIG-abc", "nb"),
    ]


def test_a_missing_kubelet_is_a_clear_error(tmp_path: Path) -> None:
    client = PodResourcesClient(str(tmp_path / "absent.sock"), timeout_s=0.5)
    with pytest.raises(TelemetryError, match=r"absent\.sock"):
        client.allocations()
    client.close()


def mig_node() -> FakeReader:
    devices = [Device(i, f"GPU-{i}", "NVIDIA A100-SXM4-80GB") for i in range(3)]
    mig = [
        MigDevice(2, 1, "3g.40gb", "MIG-aaa"),
        MigDevice(2, 5, "1g.10gb", "MIG-bbb"),
    ]
    reader = FakeReader(devices, {i: {"GPU_UTIL": 50.0 + i} for i in range(3)}, mig=mig)
    reader.mig_values["MIG-aaa"] = {"FB_USED": 30000.0, "FB_FREE": 10000.0}
    reader.mig_values["MIG-bbb"] = {"FB_USED": 100.0, "FB_FREE": 9900.0}
    return reader


def labels_by_series(agent: Agent) -> dict[int, dict[str, str]]:
    return {s.id: dict(s.labels) for s in agent.latest().series}


def test_every_gpu_and_mig_instance_carries_its_pod(kubelet: FakePodResources) -> None:
    kubelet.set_pods(
        [
            gpu_pod("team-a", "train-0", ["GPU-0"]),
            gpu_pod("team-b", "nb-1", ["MIG-aaa"], resource="nvidia.com/mig-3g.40gb"),
        ]
    )
    agent = Agent(mig_node(), hostname="n1", pods=PodResourcesClient(kubelet.socket_path))
    agent.sample()
    labels = labels_by_series(agent)
    assert labels[0] | {} == {"gpu": "0", "UUID": "GPU-0", "device": "nvidia0",
                              "modelName": "NVIDIA A100-SXM4-80GB", "Hostname": "n1",
                              "pod": "train-0", "namespace": "team-a", "container": "main"}  # fmt: skip
    assert "pod" not in labels[1]  # free
    assert labels[3]["GPU_I_PROFILE"] == "3g.40gb" and labels[3]["GPU_I_ID"] == "1"
    assert labels[3]["gpu"] == "2" and labels[3]["UUID"] == "GPU-2" and labels[3]["pod"] == "nb-1"
    assert labels[4]["GPU_I_ID"] == "5" and "pod" not in labels[4]
    assert labels[2]["pod"] == "nb-1"  # the GPU in MIG mode: its only pod
    families = {
        f.name: {(s.labels.get("gpu"), s.labels.get("GPU_I_ID")): s.value for s in f.samples}
        for f in text_string_to_metric_families(render(agent.latest()).decode())
    }
    assert families["DCGM_FI_DEV_FB_USED"] == {("2", "1"): 30000.0, ("2", "5"): 100.0}
    assert families["DCGM_FI_DEV_GPU_UTIL"][("0", None)] == 50.0


def test_mig_instances_by_gpu_instance_key_and_two_pods_on_one_gpu(kubelet: FakePodResources) -> None:
    kubelet.set_pods(
        [
            gpu_pod("team-a", "a", ["nvidia2/gi1"], resource="nvidia.com/mig-3g.40gb"),  # GKE names
            gpu_pod("team-b", "b", ["nvidia2/gi5"], resource="nvidia.com/mig-1g.10gb"),
        ]
    )
    agent = Agent(mig_node(), hostname="n1", pods=PodResourcesClient(kubelet.socket_path))
    agent.sample()
    labels = labels_by_series(agent)
    assert (labels[3]["pod"], labels[4]["pod"]) == ("a", "b")
    assert "pod" not in labels[2]  # two pods share the GPU: neither is the GPU's


def test_pods_follow_the_kubelet_and_a_failing_kubelet_drops_the_labels(kubelet: FakePodResources) -> None:
    kubelet.set_pods([gpu_pod("team-a", "old", ["GPU-1"])])
    agent = Agent(mig_node(), hostname="n1", pods=PodResourcesClient(kubelet.socket_path, timeout_s=0.5))
    agent.sample()
    assert labels_by_series(agent)[1]["pod"] == "old"
    kubelet.set_pods([gpu_pod("team-a", "new", ["nvidia1"])])  # device-name ids
    agent.sample()
    assert labels_by_series(agent)[1]["pod"] == "new"
    kubelet.close()
    agent.sample()
    assert "pod" not in labels_by_series(agent)[1]
    assert agent.pod_errors == 1
    assert agent.latest().values[field("GPU_UTIL")][1] == 51.0  # the GPUs are still read


def test_a_hung_gpu_never_blocks_a_scrape() -> None:
    reader = mig_node()
    agent = Agent(reader, hostname="n1", interval_s=0.05, stale_after_s=0.5).start()
    server = MetricsServer(agent.latest, host="127.0.0.1", port=0, health=agent.health).start()
    url = f"http://127.0.0.1:{server.port}"
    try:
        deadline = time.monotonic() + 5.0
        while agent.samples < 2 and time.monotonic() < deadline:
            time.sleep(0.01)
        assert httpx.get(f"{url}/healthz").status_code == 200
        reader.hang.set()  # NVML stops answering
        time.sleep(0.7)
        began = time.monotonic()
        body = httpx.get(f"{url}/metrics", timeout=2.0).text
        took = time.monotonic() - began
        health = httpx.get(f"{url}/healthz")
    finally:
        reader.released.set()
        agent.stop()
        server.close()
    assert took < 1.0
    age = next(
        s.value
        for f in text_string_to_metric_families(body)
        for s in f.samples
        if s.name == "loadmaster_agent_sample_age_seconds"
    )
    assert age >= 0.6
    assert "DCGM_FI_DEV_GPU_UTIL{" in body  # the last sample is still served
    assert health.status_code == 503 and "old" in health.text


def test_pods_file_errors_name_the_entry_and_field() -> None:
    assert pods_from_json('[{"namespace": "a", "pod": "p", "devices": ["GPU-1"]}]', "f")[0].name == "p"
    with pytest.raises(TelemetryError, match=r"f\[0\]: missing 'devices'"):
        pods_from_json('[{"namespace": "a", "pod": "p"}]', "f")
    with pytest.raises(TelemetryError, match=r"f\[0\]\.devices"):
        pods_from_json('[{"namespace": "a", "pod": "p", "devices": "GPU-1"}]', "f")
