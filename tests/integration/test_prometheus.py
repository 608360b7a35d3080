"""A real Prometheus scrapes loadmaster's exposition of synthetic telemetry; PrometheusStore reads it back.

Two targets: a bare :class:`MetricsServer` over a hand-made plan, and the
live demo's own ``/metrics`` (``loadmaster serve --demo``, scraped with the
operator's bearer token as a production Prometheus would).
"""

from __future__ import annotations

import subprocess
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

import httpx
import numpy as np
import pytest

from app_server import free_port, serving
from conftest import system_tool
from loadmaster.serve import DemoOptions, build_demo, create_app
from loadmaster.serve.demo import Demo
from loadmaster.telemetry import field
from loadmaster.telemetry.exposition import MetricsServer, latest_values
from loadmaster.telemetry.memory import MemoryStore
from loadmaster.telemetry.prometheus import PrometheusStore
from loadmaster.telemetry.store import Series
from loadmaster.telemetry.synthetic import GpuRef, NodeSpec, PlannedJob, SyntheticTelemetry, TelemetryPlan

PROMETHEUS = "/usr/bin/prometheus"
FIELDS = ("GPU_UTIL", "POWER_USAGE", "FB_USED", "ECC_SBE_VOL_TOTAL", "NODE_IB_TX_BYTES")


@pytest.fixture(scope="module")
def source() -> MemoryStore:
    plan = TelemetryPlan(
        nodes=(NodeSpec("node-a", 2), NodeSpec("node-b", 2)),
        jobs=(
            PlannedJob(
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


def _prometheus_binary() -> str:
    return system_tool("prometheus", PROMETHEUS)


def run_prometheus(folder: Path, target: str, extra: str = "") -> tuple[str, subprocess.Popen[bytes]]:
    """Start Prometheus scraping ``target`` (host:port) every second; return its URL and process."""
    binary = _prometheus_binary()
    config = folder / "prometheus.yml"
    config.write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n"
        "  - job_name: loadmaster\n"
        f"    static_configs: [{{targets: ['{target}']}}]\n{extra}"
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
    return f"http://127.0.0.1:{port}", process


@pytest.fixture(scope="module")
def prometheus(source: MemoryStore, tmp_path_factory: pytest.TempPathFactory) -> Iterator[str]:
    _prometheus_binary()
    server = MetricsServer(lambda: latest_values(source), host="127.0.0.1", port=0).start()
    url, process = run_prometheus(tmp_path_factory.mktemp("prometheus"), f"127.0.0.1:{server.port}")
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


# ---------------------------------------------------------------------------- the demo's own /metrics


@dataclass(frozen=True)
class DemoTarget:
    """The served demo and the Prometheus scraping it."""

    prometheus: str
    base: str
    demo: Demo


@pytest.fixture(scope="module")
def demo_target(tmp_path_factory: pytest.TempPathFactory) -> Iterator[DemoTarget]:
    """The demo served by uvicorn (stepper off, so values hold still) and a Prometheus scraping it."""
    _prometheus_binary()
    demo = build_demo(DemoOptions(history_s=1800.0))
    with serving(create_app(demo, run_stepper=False)) as base:
        token = demo.tokens.token_of("operator")
        auth = f"    authorization: {{credentials: '{token}'}}\n"
        target = base.removeprefix("http://")
        url, process = run_prometheus(tmp_path_factory.mktemp("prometheus-demo"), target, auth)
        try:
            wait_for_scrapes(url, process)
            yield DemoTarget(url, base, demo)
        finally:
            process.terminate()
            process.wait(timeout=20)


def test_demo_metrics_need_the_operator_token(demo_target: DemoTarget) -> None:
    demo = demo_target.demo
    user = next(p.name for _, p in demo.tokens.principals() if not p.is_operator)
    assert httpx.get(f"{demo_target.base}/metrics").status_code == 401
    headers = {"Authorization": f"Bearer {demo.tokens.token_of(user)}"}
    assert httpx.get(f"{demo_target.base}/metrics", headers=headers).status_code == 403


@pytest.mark.parametrize("key", ["GPU_UTIL", "FB_USED", "GPU_TEMP", "ECC_DBE_VOL_TOTAL", "NODE_IB_TX_BYTES"])
def test_prometheus_reads_back_the_demo(demo_target: DemoTarget, key: str) -> None:
    """Every series of the demo comes back with its labels (job and user included), and its values."""
    f = field(key)
    store = demo_target.demo.store
    want_series = {_identity(s): s for s in store.series()}
    by_id = {s.id: _identity(s) for s in want_series.values()}
    want = {by_id[i]: v for i, v in store.latest(f).items()}
    assert want, f"the demo stores no {key}"
    with PrometheusStore(demo_target.prometheus) as reader:
        series = {_identity(s): s for s in reader.series()}
        latest = reader.latest(f)
    assert series.keys() == want_series.keys()
    assert {k: dict(s.labels) for k, s in series.items()} == {
        k: dict(s.labels) for k, s in want_series.items()
    }
    got_by_id = {s.id: k for k, s in series.items()}
    assert {got_by_id[i]: v for i, v in latest.items()} == pytest.approx(want)


def _identity(series: Series) -> str:
    return series.labels.get("UUID") or series.labels["Hostname"]
