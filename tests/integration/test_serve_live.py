"""End to end, live mode: ``loadmaster serve --config`` over the Kubernetes API double (scheduled by
kube run's own loop) and a real Prometheus scraping a ``loadmaster agent --fake-gpus`` whose GPUs a
fake kubelet pod-resources server maps to the scheduled pods; sign-in by a hashed token; a layout
saved before a restart of serve is there after it."""

from __future__ import annotations

import json
import os
import shutil
import subprocess
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml
from live_stack import (
    free_port,
    prometheus_binary,
    start_agent,
    start_prometheus,
    start_serve,
    stop,
    wait_for_labelled_gpus,
    wait_until,
    write_kubeconfig,
)

from kube.helpers import a_node, a_pod, a_pod_group, wait_synced
from loadmaster.config import load_profiles
from loadmaster.kube.api import api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.scheduling import Scheduler
from loadmaster.serve.identity import hash_token
from loadmaster.telemetry.podresources.fake import FakePodResources, gpu_pod
from loadmaster_testing.kube_api import KubeApiDouble

TOKEN = "operator-token-0123456789abcdef"
USER_TOKEN = "team-a-token-0123456789abcdef"


def uuid(gpu: int) -> str:
    return f"GPU-00000001-0000-0000-0000-{gpu:012d}"  # FakeReader.busy(host_tag=1)


def schedule(api: KubeApiDouble) -> dict[str, list[int]]:
    """A node n0, a gang team-a/g of two 2-GPU pods bound by kube run's loop; returns pod -> GPUs."""
    cluster = KubeCluster(api_client(host=api.url), Scheduler(load_profiles()["sds"]), "sched")  # type: ignore[attr-defined]
    cluster.start()
    api.create("nodes", a_node("n0"))
    api.create("podgroups", a_pod_group("g", 2))
    for i in range(2):
        api.create("pods", a_pod(f"g-{i}", 2, "g"))
    api.create("pods", a_pod("big", 16, namespace="team-b"))
    wait_synced(cluster, api.rv)
    cluster.step()
    cluster.stop()
    pods = {p["metadata"]["name"]: p for p in api.objects("pods")}
    return {name: [int(g) for g in pods[name]["metadata"]["annotations"]["loadmaster.io/gpus"].split(",")]
            for name in ("g-0", "g-1")}  # fmt: skip


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    binary = prometheus_binary()
    folder = tmp_path_factory.mktemp("live")
    api = KubeApiDouble(clock=lambda: 1_700_000_000.0)
    api.url = api.serve()  # type: ignore[attr-defined]
    held = schedule(api)
    kubelet = FakePodResources(
        str(folder / "kubelet.sock"),
        [gpu_pod("team-a", name, [uuid(g) for g in gpus]) for name, gpus in held.items()],
    ).start()
    processes: list[subprocess.Popen[bytes]] = []
    agent_port = free_port()
    processes.append(start_agent(agent_port, "n0", 8, 1, kubelet.socket_path))
    prometheus_process, prometheus = start_prometheus(binary, folder, [f"127.0.0.1:{agent_port}"])
    processes.append(prometheus_process)

    wait_for_labelled_gpus(prometheus, 4)
    write_kubeconfig(folder, api.url)  # type: ignore[attr-defined]
    (folder / "tokens.yaml").write_text(yaml.safe_dump({"tokens": [
        {"name": "olga", "sha256": hash_token(TOKEN)}, {"name": "team-a", "sha256": hash_token(USER_TOKEN)},
    ]}))  # fmt: skip
    (folder / "serve.yaml").write_text(yaml.safe_dump({
        "auth": {"tokens_file": "tokens.yaml", "operators": {"users": ["olga"]}},
        "state": {"path": "state.sqlite"},
        "cluster": {"kubeconfig": "kubeconfig", "name": "double"},
        "prometheus": {"url": prometheus, "step_s": 1},
    }))  # fmt: skip
    try:
        yield {"folder": folder, "held": held, "api": api}
    finally:
        stop(processes)
        kubelet.close()
        api.close()


def auth(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_live_tiles_show_the_pods_owners_with_prometheus_values(stack: dict[str, Any]) -> None:
    process, url = start_serve(stack["folder"])
    try:
        snap = wait_until(
            lambda: (
                (s := httpx.get(f"{url}/api/cluster", headers=auth(TOKEN)).json())
                and "team-a/g" in s["owners"]["job"]
                and s
            ),
            "the gang on the tiles",
        )
        slot = snap["owners"]["job"].index("team-a/g")
        assert snap["owners"]["user"][slot] == "team-a"
        owned = sorted(i for i, o in enumerate(snap["gpus"]["owner"]) if o == slot)
        assert owned == sorted(g for gpus in stack["held"].values() for g in gpus)
        assert all(
            snap["gpus"]["value"][i] == 97 for i in owned
        )  # the fake GPUs' utilisation, via Prometheus
        assert httpx.get(f"{url}/api/cluster").status_code == 401
        assert httpx.get(f"{url}/api/operator/summary", headers=auth(USER_TOKEN)).status_code == 403
        queue = httpx.get(f"{url}/api/queue", headers=auth(TOKEN)).json()["queues"]
        assert any(j["id"] == "team-b/big" and j["reason"] for q in queue for j in q["jobs"])
        layout = {"colour": "owner", "layout": "user", "collapsed": []}
        assert httpx.put(f"{url}/api/me/layout", json=layout, headers=auth(USER_TOKEN)).status_code == 200
    finally:
        process.terminate()
        process.wait(timeout=20)
    again, url = start_serve(stack["folder"])
    try:
        assert httpx.get(f"{url}/api/me/layout", headers=auth(USER_TOKEN)).json() == layout
    finally:
        again.terminate()
        again.wait(timeout=20)
    assert json.dumps(layout)


@pytest.mark.browser
def test_the_page_shows_the_live_cluster_with_its_pods_owners(stack: dict[str, Any]) -> None:
    """Chromium (Playwright) on the live dashboard: signed in by a token, the gang's tiles name its job."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        if os.environ.get("CI") == "true":
            pytest.fail("Chromium is missing; CI installs it (.ci/run)")
        pytest.skip("Chromium is not installed")
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only this test drives a browser

    process, url = start_serve(stack["folder"])
    try:
        with sync_playwright() as p:
            browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
            page = browser.new_page(viewport={"width": 1200, "height": 800})
            page.goto(f"{url}/#token={USER_TOKEN}")
            page.wait_for_selector("body[data-ready=true]", timeout=30_000)
            page.wait_for_function(
                "() => window.loadmaster.snapshot().owners.job.includes('team-a/g')", timeout=30_000
            )
            owners = page.evaluate("window.loadmaster.snapshot().owners")
            slot = owners["job"].index("team-a/g")
            assert owners["user"][slot] == "team-a" and owners["mine"][slot] is True
            assert page.evaluate("window.loadmaster.tileCount()") == 8
            assert page.locator("#tabs button[data-view=operator]").is_hidden()  # a user, not an operator
            browser.close()
    finally:
        process.terminate()
        process.wait(timeout=20)
