"""Reclaim end to end with real parts: ``loadmaster kube run --reclaim serve.yaml`` (a subprocess) over
the Kubernetes API double, idleness read from a real Prometheus scraping ``loadmaster agent
--fake-gpus`` whose GPUs a fake kubelet pod-resources server maps to the scheduled pods. The idle pod
is told, then evicted after its grace; the busy pod and the pod in an exempt namespace are left alone;
the ledger in the state file says so, and ``serve --config`` over the same state file shows it in
Chromium: the operator's ledger table and the owner's notices. Wall-clock times (Prometheus keeps real
time): idle after 4 s, grace 4 s."""

from __future__ import annotations

import json
import os
import shutil
import sqlite3
import subprocess
import time
from pathlib import Path

import httpx
import pytest
import yaml
from live_stack import (
    CLI,
    free_port,
    prometheus_binary,
    start_agent,
    start_prometheus,
    start_serve,
    stop,
    wait_until,
)

from kube.helpers import a_node, a_pod, kubeconfig_for, wait_synced
from loadmaster.config import load_profiles
from loadmaster.kube.api import api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.kube.reclaim import NOTICE_ANNOTATION
from loadmaster.scheduling import Scheduler
from loadmaster.serve.identity import hash_token
from loadmaster.telemetry.podresources.fake import FakePodResources, gpu_pod
from loadmaster_testing.kube_api import KubeApiDouble

PODS = ("team-a/idle", "team-a/busy", "ops/notebook")
IDLE = ("team-a/idle", "ops/notebook")
TOKEN = "operator-token-0123456789abcdef"
OWNER_TOKEN = "team-a-token-0123456789abcdef"


def uuid(gpu: int) -> str:
    return f"GPU-00000002-0000-0000-0000-{gpu:012d}"  # FakeReader.busy(host_tag=2)


def schedule(api: KubeApiDouble) -> dict[str, int]:
    """Node n0 and three 1-GPU pods bound by kube run's loop; returns pod key -> its GPU index."""
    cluster = KubeCluster(api_client(host=api.url), Scheduler(load_profiles()["fifo"]), "binder")  # type: ignore[attr-defined]
    cluster.start()
    api.create("nodes", a_node("n0"))
    for key in PODS:
        namespace, name = key.split("/")
        api.create("pods", a_pod(name, 1, namespace=namespace))
    wait_synced(cluster, api.rv)
    cluster.step()
    cluster.stop()
    return {
        key: int((api.get("pods", key) or {})["metadata"]["annotations"]["loadmaster.io/gpus"])
        for key in PODS
    }


def the_dashboard(url: str) -> dict[str, list[tuple[str, str]]]:
    """(job, action) of the ledger rows Chromium shows the operator (Operator tab) and the owner (My jobs)."""
    chromium = shutil.which("chromium") or "/usr/bin/chromium"
    if not Path(chromium).exists():
        if os.environ.get("CI") == "true":
            pytest.fail("Chromium is missing; CI installs it (.ci/run)")
        pytest.skip("Chromium is not installed")
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - only this test drives a browser

    rows = "[data-testid=ledger-row]"
    shown: dict[str, list[tuple[str, str]]] = {}
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=chromium, args=["--no-sandbox"])
        for who, token, tab, box in (("operator", TOKEN, "operator", "#ledger"),
                                     ("owner", OWNER_TOKEN, "me", "#my-reclaim")):  # fmt: skip
            page = browser.new_page(viewport={"width": 1200, "height": 900})
            page.goto(f"{url}/#token={token}")
            page.wait_for_selector("body[data-ready=true]", timeout=30_000)
            page.click(f"#tabs button[data-view={tab}]")
            page.wait_for_selector(f"{box} {rows}", timeout=30_000)
            found = page.locator(f"{box} {rows}")
            shown[who] = [
                (str(found.nth(i).get_attribute("data-job")), str(found.nth(i).get_attribute("data-action")))
                for i in range(found.count())
            ]
            page.close()
        browser.close()
    return shown


def test_kube_run_evicts_the_idle_pod_after_its_grace_and_leaves_the_others(tmp_path: Path) -> None:
    binary = prometheus_binary()
    api = KubeApiDouble()
    api.url = api.serve()  # type: ignore[attr-defined]
    processes: list[subprocess.Popen[bytes]] = []
    held = schedule(api)
    kubelet = FakePodResources(
        str(tmp_path / "kubelet.sock"),
        [gpu_pod(key.split("/")[0], key.split("/")[1], [uuid(gpu)]) for key, gpu in held.items()],
    ).start()
    try:
        (tmp_path / "values.json").write_text(json.dumps({str(held[k]): {"GPU_UTIL": 0} for k in IDLE}))
        agent_port = free_port()
        processes.append(
            start_agent(agent_port, "n0", 8, 2, kubelet.socket_path, values=tmp_path / "values.json")
        )
        prometheus_process, prometheus = start_prometheus(binary, tmp_path, [f"127.0.0.1:{agent_port}"])
        processes.append(prometheus_process)

        def labelled() -> bool:
            query = {"query": 'count(DCGM_FI_DEV_GPU_UTIL{pod!=""})'}
            result = httpx.get(f"{prometheus}/api/v1/query", params=query).json()["data"]["result"]
            return bool(result) and float(result[0]["value"][1]) == len(PODS)

        wait_until(labelled, "Prometheus to hold the three GPUs labelled with their pods")
        kubeconfig = kubeconfig_for(api, tmp_path / "kubeconfig")
        (tmp_path / "tokens.yaml").write_text(yaml.safe_dump({"tokens": [
            {"name": "olga", "sha256": hash_token(TOKEN)},
            {"name": "team-a", "sha256": hash_token(OWNER_TOKEN)},
        ]}))  # fmt: skip
        (tmp_path / "serve.yaml").write_text(yaml.safe_dump({
            "auth": {"tokens_file": "tokens.yaml", "operators": {"users": ["olga"]}},
            "cluster": {"kubeconfig": "kubeconfig", "name": "double"},
            "state": {"path": "state.sqlite"},
            "prometheus": {"url": prometheus, "step_s": 1, "history_s": 300},
            "reclaim": {"interval_s": 1, "policies": [
                {"idle_after_s": 4, "grace_s": 4, "action": "evict", "dry_run": False,
                 "exempt_namespaces": ["ops"]},
            ]},
        }))  # fmt: skip
        with (tmp_path / "kube-run.log").open("wb") as log:
            processes.append(subprocess.Popen(
                [*CLI, "kube", "run", "--kubeconfig", str(kubeconfig), "--profile", "fifo",
                 "--interval", "0.5", "--reclaim", str(tmp_path / "serve.yaml"), "--queues", ""],
                stdout=log, stderr=subprocess.STDOUT,
            ))  # fmt: skip

        def annotated() -> bool:
            pod = api.get("pods", "team-a/idle")
            return pod is not None and NOTICE_ANNOTATION in (pod["metadata"].get("annotations") or {})

        def evicted() -> bool:
            pod = api.get("pods", "team-a/idle")
            return pod is None or bool(pod["metadata"].get("deletionTimestamp"))

        wait_until(annotated, "the idle pod's reclaim notice", timeout_s=60)
        noticed = time.monotonic()
        assert not evicted()  # told first
        wait_until(evicted, "the idle pod's eviction after its grace", timeout_s=60)
        waited = time.monotonic() - noticed
        assert waited >= 2.5, f"evicted {waited:.1f} s after the notice, before the 4 s grace"
        for key in ("team-a/busy", "ops/notebook"):
            pod = api.get("pods", key)
            assert pod is not None and not pod["metadata"].get("deletionTimestamp"), key
            assert NOTICE_ANNOTATION not in (pod["metadata"].get("annotations") or {}), key

        def ledger() -> list[tuple[str, str, str]]:
            with sqlite3.connect(tmp_path / "state.sqlite") as db:
                return db.execute("SELECT job, action, actor FROM ledger ORDER BY id").fetchall()

        # The scheduler enters the eviction once the API has answered for every pod (the entry
        # says how many were evicted), so the pod can be seen gone a moment before the entry is.
        wait_until(lambda: len(ledger()) >= 2, "the eviction in the ledger", timeout_s=10)
        assert ledger() == [("team-a/idle", "notify", "scheduler"), ("team-a/idle", "evict", "scheduler")]
        reasons = [e["reason"] for e in api.objects("events") if e["involvedObject"]["name"] == "idle"]
        assert reasons == ["IdleGPUs", "Reclaimed"]
        serve, url = start_serve(tmp_path)
        processes.append(serve)
        shown = the_dashboard(url)
        assert shown["operator"] == [("team-a/idle", "evict"), ("team-a/idle", "notify")]
        assert shown["owner"] == shown["operator"]  # team-a's own job: the owner sees both
    finally:
        stop(processes)
        kubelet.close()
        api.close()
        print((tmp_path / "kube-run.log").read_text() if (tmp_path / "kube-run.log").exists() else "")
