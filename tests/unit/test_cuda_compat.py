"""NVIDIA's CUDA/driver rules as loadmaster keeps them, the cuda-compat filter, driver versions in specs."""

from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest

from builders import a_job, a_snapshot, bind_of, cycle, nodes_of, profile
from loadmaster.config.cluster import cluster_from_document
from loadmaster.config.yamlfile import parse_yaml
from loadmaster.errors import ConfigError, ModelError
from loadmaster.model import Node, NodeTable, ResourceType
from loadmaster.model.cuda import (
    TOOLKIT_DRIVER,
    CudaVersion,
    DriverVersion,
    How,
    check,
    cuda_from_image,
    driver_labels,
    driver_of,
    is_data_center,
    minimum_driver,
)
from loadmaster.scheduling import PluginSpec, Scheduler, build_profile

V = CudaVersion.parse
D = DriverVersion.parse

CASES = {
    # (cuda, driver, data_center, compat) -> how
    "own driver": ("12.4", "550.54.14", True, False, How.NATIVE),
    "newer driver, older toolkit": ("11.8", "560.28.03", False, False, How.NATIVE),
    "12.x minimum": ("12.6", "525.60.13", False, False, How.MINOR),
    "just below the 12.x minimum": ("12.0", "525.60.12", True, False, How.NO),
    "11.x on an R470 driver": ("11.8", "470.82.01", False, False, How.MINOR),
    "12.x on R470 without compat": ("12.4", "470.82.01", True, False, How.NO),
    "12.x on R470 with compat, data center": ("12.4", "470.82.01", True, True, How.FORWARD),
    "12.x on R470 with compat, consumer": ("12.4", "470.82.01", False, True, How.NO),
    "13.0 on R535 with compat": ("13.0", "535.104.05", True, True, How.FORWARD),
    "13.0 on R545 (new-feature branch) with compat": ("13.0", "545.23.06", True, True, How.NO),
    "10.2 has no minor-version compatibility": ("10.2", "440.32", True, False, How.NO),
    "an unlisted newer 12.x takes its newest known": ("12.7", "560.28.03", False, False, How.NATIVE),
}


@pytest.mark.parametrize("case", CASES.values(), ids=CASES.keys())
def test_nvidia_rules(case: tuple[str, str, bool, bool, How]) -> None:
    cuda, driver, data_center, compat, how = case
    verdict = check(V(cuda), D(driver), data_center=data_center, compat_package=compat)
    assert verdict.how is how, verdict.reason
    assert verdict.ok is (how is not How.NO)


def test_a_refusal_says_what_is_needed() -> None:
    verdict = check(V("12.4"), D("470.82.01"), data_center=False, compat_package=True)
    assert "CUDA 12.4 needs driver >= 525.60.13" in verdict.reason
    assert "only on data-center GPUs" in verdict.reason


def test_the_table_is_ordered_like_the_releases() -> None:
    drivers = list(TOOLKIT_DRIVER.values())
    assert list(TOOLKIT_DRIVER) == sorted(TOOLKIT_DRIVER)
    assert drivers == sorted(drivers), "a newer toolkit never ships with an older driver"
    assert minimum_driver(V("12.8")) == D("525.60.13") and minimum_driver(V("10.1")) == D("418.39")


def test_versions_parse_and_refuse_nonsense() -> None:
    assert D("535.104.05") == DriverVersion(535, 104, 5) and str(D("535.104.05")) == "535.104.05"
    assert V("12.4.1") == CudaVersion(12, 4)
    with pytest.raises(ModelError, match="not a CUDA version"):
        V("twelve")
    with pytest.raises(ModelError, match="not an NVIDIA driver version"):
        D("535")
    with pytest.raises(ModelError, match="not in loadmaster's table"):
        check(V("9.0"), D("500.1"), data_center=True, compat_package=False)


def test_labels_round_trip_and_gpu_class() -> None:
    labels = driver_labels(D("535.104.05"))
    assert labels == {
        "nvidia.com/cuda.driver.major": "535",
        "nvidia.com/cuda.driver.minor": "104",
        "nvidia.com/cuda.driver.rev": "05",
    }
    assert driver_of(labels) == D("535.104.05") and driver_of({}) is None
    assert is_data_center({"nvidia.com/gpu.product": "NVIDIA-A100-SXM4-80GB"})
    assert not is_data_center({"nvidia.com/gpu.product": "NVIDIA-GeForce-RTX-4090"})
    assert is_data_center({"loadmaster.io/gpu-class": "data-center"}, "NVIDIA-RTX-A6000")
    assert cuda_from_image("nvidia/cuda:12.4.1-cudnn-runtime-ubuntu22.04") == V("12.4")
    assert cuda_from_image("pytorch/pytorch:2.3.0") is None


def drivers_cluster() -> NodeTable:
    rtype = ResourceType("gpu", "NVIDIA-A100", 80_000, 0, 0)
    nodes = [
        Node("old", "default", "z", "r", "gpu", 8, 0, 0, driver_labels(D("470.82.01"))),
        Node("new", "default", "z", "r", "gpu", 8, 0, 0, driver_labels(D("550.54.15"))),
        Node("bare", "default", "z", "r", "gpu", 8, 0, 0, {}),
    ]
    return NodeTable.build(nodes, {"gpu": rtype})


def test_the_filter_keeps_a_job_on_drivers_that_run_it() -> None:
    cluster = drivers_cluster()
    job = replace(a_job("j").tasks(3).gpus(8).build(), cuda=V("12.4"))
    result = cycle(
        profile("fifo", "gang", "cuda-compat", "first-fit"), a_snapshot(cluster).pending(job).build()
    )
    status = result.status_of("j", "")
    assert bind_of(result, "j") is None and status is not None
    assert "counting only nodes with driver >= 525.60.13 for CUDA 12.4" in status.reason
    two = replace(job, tasks=2, min_available=2)
    bind = bind_of(
        cycle(profile("fifo", "gang", "cuda-compat", "first-fit"), a_snapshot(cluster).pending(two).build()),
        "j",
    )
    assert bind is not None and sorted(nodes_of(cluster, bind)) == ["bare", "new"]


def test_every_cycle_of_one_scheduler_names_the_drivers_it_counted() -> None:
    """The filter's note for the cycle's shortfalls is left in every cycle, not only the first: a
    scheduler that kept the allowed nodes from cycle to cycle would skip the filter and lose it."""
    cluster = drivers_cluster()
    job = replace(a_job("j").tasks(3).gpus(8).build(), cuda=V("12.4"))
    scheduler = Scheduler(profile("fifo", "gang", "cuda-compat", "first-fit"))
    for now, old_used in ((0.0, 0), (60.0, 8)):  # other free GPUs: the second cycle repeats nothing
        snapshot = a_snapshot(cluster).used("new", 8).used("old", old_used).pending(job).build()
        status = scheduler.cycle(snapshot, now, np.random.default_rng(0)).status_of("j", "")
        assert status is not None
        assert "counting only nodes with driver >= 525.60.13 for CUDA 12.4" in status.reason, now


def test_unknown_drivers_can_be_refused_and_bad_args_are_named() -> None:
    cluster = drivers_cluster()
    strict = build_profile(
        "p",
        ["allocate"],
        [
            PluginSpec("fifo", {}),
            PluginSpec("cuda-compat", {"unknown_driver": "reject"}),
            PluginSpec("first-fit", {}),
        ],
    )
    job = replace(a_job("j").tasks(1).gpus(8).build(), cuda=V("12.4"))
    bind = bind_of(cycle(strict, a_snapshot(cluster).used("new", 8).pending(job).build()), "j")
    assert bind is None
    with pytest.raises(ConfigError, match="unknown_driver"):
        build_profile("p", ["allocate"], [PluginSpec("cuda-compat", {"unknown_driver": "maybe"})])


def test_a_job_without_cuda_runs_anywhere() -> None:
    cluster = drivers_cluster()
    result = cycle(
        profile("fifo", "gang", "cuda-compat", "first-fit"),
        a_snapshot(cluster).pending(a_job("j").tasks(3).gpus(8)).build(),
    )
    assert bind_of(result, "j") is not None


SPEC = """name: t
resource_types:
  a: {gpu_model: A100, gpu_memory_mib: 1, cpu_milli_per_gpu: 1, memory_mib_per_gpu: 1}
pools:
  p:
    node_groups:
      - {name: g, count: 1, resource_type: a, gpus: 8, driver_version: DRIVER}
"""


def test_cluster_spec_driver_version_becomes_gfd_labels() -> None:
    cluster = cluster_from_document(parse_yaml(SPEC.replace("DRIVER", "535.104.05"), "t.yaml"))
    assert driver_of(cluster.nodes.nodes[0].labels) == D("535.104.05")
    with pytest.raises(ConfigError, match=r"t.yaml:7: pools.p.node_groups\[0\].driver_version"):
        cluster_from_document(parse_yaml(SPEC.replace("DRIVER", "latest"), "t.yaml"))
