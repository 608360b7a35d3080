"""A real Prometheus scrapes `kube run`'s /metrics while the scheduler binds against the API double.

What an operator's Prometheus sees: the target up, kube-scheduler's series with their labels, the
counts matching what the double recorded, and histograms PromQL can take quantiles of.
"""

from __future__ import annotations

import threading
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import pytest
from live_stack import prometheus_binary, run_prometheus

from kube.helpers import a_node, a_pod, a_pod_group
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.kube.metrics import SchedulerMetrics
from loadmaster.kube.runner import run_loop
from loadmaster.kube.serving import Health, HealthServer
from loadmaster.scheduling import Scheduler
from loadmaster_testing.kube_api import KubeApiDouble


@pytest.fixture
def scheduler_metrics() -> Iterator[tuple[KubeApiDouble, int]]:
    """The double with work on it, and the port of a running scheduler's /metrics."""
    api = KubeApiDouble()
    url = api.serve()
    for i in range(2):
        api.create("nodes", a_node(f"n{i}"))
    api.create("podgroups", a_pod_group("g", 2))
    for i in range(2):
        api.create("pods", a_pod(f"g-{i}", 4, "g"))
    api.create("pods", a_pod("big", 16))  # never fits: gated
    client = api_client(host=url)
    cluster = KubeCluster(
        client, Scheduler(load_profiles()["binpack"]), "a", lease=LeaderElector(client, "a")
    )
    metrics = SchedulerMetrics("binpack")
    server = HealthServer(metrics=metrics, health=Health(), host="127.0.0.1", port=0)
    stop = threading.Event()
    cluster.start()
    server.start()
    loop = threading.Thread(
        target=run_loop, args=(cluster,), kwargs={"interval_s": 0.2, "metrics": metrics, "stop": stop}
    )
    loop.start()
    try:
        yield api, server.port
    finally:
        stop.set()
        loop.join(timeout=10)
        cluster.stop()
        server.stop()
        api.close()


def query(url: str, promql: str) -> list[dict[str, object]]:
    body = httpx.get(f"{url}/api/v1/query", params={"query": promql}, timeout=5).json()
    result: list[dict[str, object]] = body["data"]["result"]
    return result


def test_prometheus_scrapes_the_scheduler(
    scheduler_metrics: tuple[KubeApiDouble, int], tmp_path: Path
) -> None:
    api, port = scheduler_metrics
    (tmp_path / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s, evaluation_interval: 1s}\n"
        "scrape_configs:\n  - job_name: loadmaster\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{port}']}}]\n"
    )
    process, url = run_prometheus(prometheus_binary(), tmp_path)
    try:
        deadline = time.monotonic() + 40
        scheduled: list[dict[str, object]] = []
        while time.monotonic() < deadline and process.poll() is None:
            try:
                scheduled = query(url, 'scheduler_schedule_attempts_total{result="scheduled"}')
            except (httpx.HTTPError, KeyError, ValueError):
                scheduled = []
            if scheduled:
                break
            time.sleep(0.5)
        assert scheduled, "prometheus did not scrape the scheduler within 40 s"
        assert scheduled[0]["metric"]["profile"] == "binpack"  # type: ignore[index]
        assert float(scheduled[0]["value"][1]) == len(api.bindings) == 2  # type: ignore[index]
        assert [r["value"][1] for r in query(url, 'up{job="loadmaster"}')] == ["1"]  # type: ignore[index]
        assert [r["value"][1] for r in query(url, "leader_election_master_status")] == ["1"]  # type: ignore[index]
        gated = query(url, 'scheduler_pending_pods{queue="gated"}')
        assert [r["value"][1] for r in gated] == ["1"]  # type: ignore[index]
        p99 = query(
            url,
            "histogram_quantile(0.99, sum by (le) "
            '(scheduler_framework_extension_point_duration_seconds_bucket{extension_point="Bind"}))',
        )
        assert 0 < float(p99[0]["value"][1]) < 1  # type: ignore[index]
    finally:
        process.terminate()
        process.wait(timeout=20)
