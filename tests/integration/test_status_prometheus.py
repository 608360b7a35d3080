"""`loadmaster status` reads a running job's GPU use from a real Prometheus (dcgm-exporter-style metrics).

The job runs on the API double (submitted with the CLI, its pods created by
the Job controller double and bound by ``KubeCluster``); its GPUs' series
carry the ``namespace`` and ``pod`` labels dcgm-exporter's Kubernetes
mapping writes, one GPU of the four idle.
"""

from __future__ import annotations

import sys
from collections.abc import Iterator
from dataclasses import replace
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

sys.path.insert(0, str(Path(__file__).parents[1]))

from integration.test_prometheus import run_prometheus, wait_for_scrapes
from kube.helpers import a_node
from loadmaster.cli import app
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.scheduling import PluginSpec, Scheduler, build_profile
from loadmaster.telemetry.exposition import MetricsServer, latest_values
from loadmaster.telemetry.memory import MemoryStore
from loadmaster.telemetry.synthetic import (
    Fault,
    FaultKind,
    GpuRef,
    NodeSpec,
    PlannedJob,
    SyntheticTelemetry,
    TelemetryPlan,
)
from loadmaster_testing.kube_api import KubeApiDouble
from loadmaster_testing.kube_jobs import JobControllerDouble

runner = CliRunner()


@pytest.fixture
def api() -> Iterator[KubeApiDouble]:
    double = KubeApiDouble()  # wall clock: Prometheus holds samples of now
    double.url = double.serve()  # type: ignore[attr-defined]
    yield double
    double.close()


def test_status_shows_gpu_use_and_the_idle_gpu(
    api: KubeApiDouble, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    server_url = api.url  # type: ignore[attr-defined]
    config = {
        "apiVersion": "v1",
        "kind": "Config",
        "current-context": "d",
        "clusters": [{"name": "d", "cluster": {"server": server_url}}],
        "users": [{"name": "me", "user": {}}],
        "contexts": [{"name": "d", "context": {"cluster": "d", "user": "me"}}],
    }
    kubeconfig.write_text(yaml.safe_dump(config))
    identity = tmp_path / "me.yaml"
    identity.write_text(f"user: alice\ngroup: team-a\nkubeconfig: {kubeconfig}\nimage_lookup: false\n")
    monkeypatch.setenv("LOADMASTER_CONFIG", str(identity))
    for name in ("node-a", "node-b"):
        api.create("nodes", a_node(name, gpus=2))
    submitted = runner.invoke(
        app, ["submit", "--name", "train", "-n", "2", "--gpus-per-task", "2", "--image", "x", "--", "a"]
    )
    assert submitted.exit_code == 0, submitted.output
    JobControllerDouble(api).reconcile()
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    profile = build_profile("t", ["allocate"], [PluginSpec(p, {}) for p in ("fifo", "gang", "first-fit")])
    cluster = KubeCluster(client, Scheduler(profile), "s", lease=LeaderElector(client, "s"))
    cluster.list_now()
    pod_of = {node: key.split("/")[1] for key, node in cluster.step().bound}
    assert set(pod_of) == {"node-a", "node-b"}

    gpus = tuple(GpuRef(h, g) for h in ("node-a", "node-b") for g in (0, 1))
    plan = TelemetryPlan(
        nodes=(NodeSpec("node-a", 2), NodeSpec("node-b", 2)),
        jobs=(PlannedJob("team-a/train", "alice", gpus, 0, 600),),
        faults=(Fault(FaultKind.IDLE, 0, 600, gpus=(GpuRef("node-b", 1),)),),
        seed=3,
    )
    telemetry = SyntheticTelemetry(plan).generate(0.0, 120.0)
    source = MemoryStore()
    labelled = [
        replace(s, labels={**s.labels, "namespace": "team-a", "pod": pod_of[s.labels["Hostname"]]})
        if s.scope == "gpu"
        else s
        for s in telemetry.series
    ]
    source.register(labelled)
    source.append(telemetry.samples)
    server = MetricsServer(lambda: latest_values(source), host="127.0.0.1", port=0).start()
    (tmp_path / "prom").mkdir()
    url, process = run_prometheus(tmp_path / "prom", f"127.0.0.1:{server.port}")
    try:
        wait_for_scrapes(url, process)
        out = runner.invoke(app, ["status", "train", "--prometheus", url], terminal_width=200)
        assert out.exit_code == 0, out.output + repr(out.exception)
        assert "GPU utilisation:" in out.output and "on 4 GPU(s)" in out.output
        assert "idle GPUs: node-b/1" in out.output
        assert "finding:" in out.output or "diagnostics:" in out.output
    finally:
        process.terminate()
        process.wait(timeout=20)
        server.close()
    unreachable = runner.invoke(app, ["status", "train", "--prometheus", url])
    assert "GPU use: unavailable" in unreachable.output
