"""Exposition in dcgm-exporter's shape, parsed back by prometheus-client; the NVML agent with a fake."""

from __future__ import annotations

import httpx
import pytest
from prometheus_client.parser import text_string_to_metric_families

from loadmaster.errors import TelemetryError
from loadmaster.telemetry import FIELDS, Series, field
from loadmaster.telemetry.agent import NVML_FIELDS, Agent, Device, FakeReader, NvmlReader
from loadmaster.telemetry.exposition import CONTENT_TYPE, LatestValues, MetricsServer, latest_values, render
from loadmaster.telemetry.memory import MemoryStore
from loadmaster.telemetry.synthetic import GpuRef, NodeSpec, PlannedJob, SyntheticTelemetry, TelemetryPlan


def parse(text: bytes) -> dict[str, list[tuple[dict[str, str], float]]]:
    return {
        fam.name: [(s.labels, s.value) for s in fam.samples]
        for fam in text_string_to_metric_families(text.decode())
    }


@pytest.fixture
def store() -> MemoryStore:
    plan = TelemetryPlan((NodeSpec("n0", 2),), (PlannedJob("j1", "ann", (GpuRef("n0", 0),), 0.0, 100.0),))
    telemetry = SyntheticTelemetry(plan).generate(0.0, 30.0)
    made = MemoryStore()
    made.register(telemetry.series)
    made.append(telemetry.samples)
    return made


def test_every_field_parses_back_with_its_labels_and_value(store: MemoryStore) -> None:
    text = render(latest_values(store))
    families = parse(text)
    assert set(families) == {f.name for f in FIELDS}
    util = field("GPU_UTIL")
    want = store.latest(util)
    samples = families[util.name]
    assert [labels["gpu"] for labels, _ in samples] == ["0", "1"]
    assert samples[0][0]["job"] == "j1" and samples[0][0]["UUID"].startswith("GPU-")
    assert samples[0][0]["modelName"] == "NVIDIA H100 80GB HBM3" and samples[0][0]["Hostname"] == "n0"
    assert [v for _, v in samples] == [want[0], want[1]]
    assert families["LOADMASTER_NODE_IB_TX_BYTES"][0][0] == {"Hostname": "n0"}


def test_dcgm_names_help_and_type_lines(store: MemoryStore) -> None:
    lines = render(latest_values(store)).decode().splitlines()
    assert "# TYPE DCGM_FI_DEV_GPU_UTIL gauge" in lines
    assert "# TYPE DCGM_FI_DEV_ECC_SBE_VOL_TOTAL counter" in lines
    assert any(line.startswith("# HELP DCGM_FI_DEV_GPU_UTIL ") for line in lines)
    assert any(line.startswith('DCGM_FI_DEV_ECC_SBE_VOL_TOTAL{gpu="0",') for line in lines)


def test_label_values_are_escaped() -> None:
    odd = Series(0, "gpu", {"gpu": "0", "Hostname": 'a"b\\c\nd'})
    text = render(LatestValues([odd], {field("GPU_UTIL"): {0: 5.0}}))
    assert parse(text)["DCGM_FI_DEV_GPU_UTIL"] == [({"gpu": "0", "Hostname": 'a"b\\c\nd'}, 5.0)]


def test_nothing_to_show_renders_empty() -> None:
    assert render(LatestValues([], {})) == b""


def fake_agent(clock: list[float]) -> tuple[Agent, FakeReader]:
    reader = FakeReader(
        [Device(0, "GPU-aaa", "NVIDIA A100-SXM4-80GB"), Device(1, "GPU-bbb", "NVIDIA A100-SXM4-80GB")],
        {0: {"GPU_UTIL": 90.0, "POWER_USAGE": 300.5, "ECC_SBE_VOL_TOTAL": 2.0}, 1: {"GPU_UTIL": 0.0}},
    )
    return Agent(reader, hostname="gpu-node-1", interval_s=1.0, clock=lambda: clock[0]), reader


def test_agent_labels_its_gpus_as_dcgm_exporter_does() -> None:
    agent, _ = fake_agent([0.0])
    agent.sample()
    families = parse(render(agent.latest()))
    common = {"modelName": "NVIDIA A100-SXM4-80GB", "Hostname": "gpu-node-1"}
    assert families["DCGM_FI_DEV_GPU_UTIL"] == [
        ({"gpu": "0", "UUID": "GPU-aaa", "device": "nvidia0", **common}, 90.0),
        ({"gpu": "1", "UUID": "GPU-bbb", "device": "nvidia1", **common}, 0.0),
    ]
    assert "DCGM_FI_DEV_POWER_USAGE" in families and "DCGM_FI_PROF_SM_ACTIVE" not in families


def test_a_scrape_never_reads_the_gpus_and_says_how_old_its_sample_is() -> None:
    clock = [0.0]
    agent, reader = fake_agent(clock)
    assert agent.latest().values == {}  # nothing read yet: no GPU values, not a read in the scrape
    assert reader.reads == 0
    agent.sample()
    assert reader.reads == 2  # one read per GPU
    reader.values[0]["GPU_UTIL"] = 10.0
    clock[0] = 7.5
    latest = agent.latest()
    assert latest.values[field("GPU_UTIL")][0] == 90.0 and reader.reads == 2
    families = parse(render(latest))
    assert families["loadmaster_agent_sample_age_seconds"] == [({}, 7.5)]
    assert families["loadmaster_agent_samples"] == [({}, 1.0)]  # the parser drops a counter's _total
    agent.sample()
    assert agent.latest().values[field("GPU_UTIL")][0] == 10.0


def test_nvml_fields_are_in_the_schema() -> None:
    assert all(field(key).key == key for key in NVML_FIELDS)
    assert not any(key.startswith(("SM_ACTIVE", "PIPE_", "DRAM_", "GR_", "NVLINK")) for key in NVML_FIELDS)


def test_nvml_reader_without_gpu_says_so() -> None:
    try:
        reader = NvmlReader()
    except TelemetryError as exc:
        assert "no NVIDIA driver or GPU" in str(exc)
    else:  # a GPU host: the reader works, so read it
        assert all(isinstance(v, float) for d in reader.devices() for v in reader.read(d.index).values())
        reader.close()


def test_metrics_server_serves_the_exposition() -> None:
    agent, _ = fake_agent([0.0])
    agent.sample()
    server = MetricsServer(agent.latest, host="127.0.0.1", port=0, health=agent.health).start()
    try:
        with httpx.Client() as client:
            ok = client.get(f"http://127.0.0.1:{server.port}/metrics")
            health = client.get(f"http://127.0.0.1:{server.port}/healthz")
            missing = client.get(f"http://127.0.0.1:{server.port}/other")
    finally:
        server.close()
    assert ok.status_code == 200 and ok.headers["content-type"] == CONTENT_TYPE
    assert ok.content == render(agent.latest())
    assert health.status_code == 200 and "last sample 0.0 s old" in health.text
    assert missing.status_code == 404
