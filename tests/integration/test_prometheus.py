"""A real Prometheus scrapes loadmaster's exposition of synthetic telemetry; PrometheusStore reads it back."""

from __future__ import annotations

import os
import shutil
import socket
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest

from loadmaster.telemetry import field
from loadmaster.telemetry.exposition import MetricsServer, latest_values
from loadmaster.telemetry.memory import MemoryStore
from loadmaster.telemetry.prometheus import PrometheusStore
from loadmaster.telemetry.synthetic import GpuRef, JobSpec, NodeSpec, SyntheticTelemetry, TelemetryPlan

PROMETHEUS = "/usr/bin/prometheus"
FIELDS = ("GPU_UTIL", "POWER_USAGE", "FB_USED", "ECC_SBE_VOL_TOTAL", "NODE_IB_TX_BYTES")


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return int(s.getsockname()[1])


@pytest.fixture(scope="module")
def source() -> MemoryStore:
    plan = TelemetryPlan(
        nodes=(NodeSpec("node-a", 2), NodeSpec("node-b", 2)),
        jobs=(
            JobSpec(
                "train-1", "ann", tuple(GpuRef(h, g) for h in ("node-a", "node-b") for g in (0, 1)), 0, 600
            ),
        ),
        seed=5,
    )
    telemetry = SyntheticTelemetry(plan).generate(0.0, 120.0)
    store = MemoryStore()
    store.register(telemetry.series)
    store.append(telemetry.samples)
    return store


@pytest.fixture(scope="module")
def prometheus(source: MemoryStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    binary = shutil.which("prometheus") or (PROMETHEUS if Path(PROMETHEUS).exists() else None)
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the prometheus binary is missing; CI must install it (.ci/run)")
        pytest.skip("the prometheus binary is not installed")
    server = MetricsServer(lambda: latest_values(source), host="127.0.0.1", port=0).start()
    folder = tmp_path_factory.mktemp("prometheus")
    config = folder / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: loadmaster\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{server.port}']}}]\n"
    )
    port = free_port()
    process = subprocess.Popen(
        [
            binary,
            f"--config.file={config}",
            f"--storage.tsdb.path={folder / 'data'}",
            f"--web.listen-address=127.0.0.1:{port}",
        ],
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
    )
    url = f"http://127.0.0.1:{port}"
    try:
        wait_for_scrapes(url, process)
        yield url
    finally:
        process.terminate()
        process.wait(timeout=20)
        server.close()


def wait_for_scrapes(url: str, process: subprocess.Popen[bytes], scrapes: int = 3) -> None:
    """Until Prometheus holds ``scrapes`` samples of the GPU utilisation (at most 40 s)."""
    deadline = time.monotonic() + 40.0
    while time.monotonic() < deadline:
        if process.poll() is not None:
            pytest.fail(f"prometheus exited with code {process.returncode}")
        try:
            body = httpx.get(
                f"{url}/api/v1/query", params={"query": "count_over_time(DCGM_FI_DEV_GPU_UTIL[1m])"}
            )
            result = body.json()["data"]["result"]
            if result and min(float(r["value"][1]) for r in result) >= scrapes:
                return
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(0.5)
    pytest.fail("prometheus did not scrape the exposition within 40 s")


@pytest.fixture
def reader(prometheus: str) -> Iterator[PrometheusStore]:
    with PrometheusStore(prometheus) as store:
        yield store


def test_series_come_back_with_their_labels(reader: PrometheusStore, source: MemoryStore) -> None:
    got = {s.labels.get("UUID") or s.labels["Hostname"]: s for s in reader.series()}
    want = {s.labels.get("UUID") or s.labels["Hostname"]: s for s in source.series()}
    assert got.keys() == want.keys()
    for key, series in want.items():
        assert got[key].labels == series.labels
        assert got[key].scope == series.scope
    assert {s.labels["UUID"] for s in reader.series(job="train-1")} == {
        s.labels["UUID"] for s in source.series(job="train-1")
    }


@pytest.mark.parametrize("key", FIELDS)
def test_latest_and_range_match_the_exposed_values(
    reader: PrometheusStore, source: MemoryStore, key: str
) -> None:
    f = field(key)
    series = reader.series()
    by_key = {s.labels.get("UUID") or s.labels["Hostname"]: s.id for s in series}
    want = {
        s.labels.get("UUID") or s.labels["Hostname"]: v
        for s in source.series()
        for i, v in source.latest(f).items()
        if i == s.id
    }
    latest = reader.latest(f)
    assert {k: latest[by_key[k]] for k in want} == pytest.approx(want)
    now = time.time()
    ids = [by_key[k] for k in want]
    got = reader.range(f, ids, now - 4.0, now, 2.0)
    assert got.mean.shape == (len(ids), 2)
    expected = np.array([want[k] for k in want])[:, None]
    np.testing.assert_allclose(got.mean[:, -1:], expected)
    np.testing.assert_allclose(got.peak[:, -1:], expected)
