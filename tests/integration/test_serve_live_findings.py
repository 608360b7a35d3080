"""A fault injected through a fake GPU reaches a job's page in Chromium, end to end in live mode.

Real parts: two ``loadmaster agent --fake-gpus`` processes (nodes n0 and n1), each mapping its GPUs to
the gang's pods through its own fake kubelet pod-resources server; a real Prometheus scraping both every
second; ``loadmaster serve --config`` over the Kubernetes API double (the gang bound by kube run's own
loop) and that Prometheus; Debian's Chromium through Playwright. The fault is XID 79 (GPU fallen off
the bus) written to one agent's ``--fake-values`` file, which the agent lays over every read: the job's
page shows no XID finding before it and an XID finding on that GPU after it. Slow: the diagnostics
give a verdict only on 120 s of telemetry, and serve's window begins when serve starts.
"""

from __future__ import annotations

import json
import subprocess
from collections.abc import Iterator
from typing import Any

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

from dashboard_browser import chromium, open_page
from kube.helpers import a_node, a_pod, a_pod_group, wait_synced
from loadmaster.config import load_profiles
from loadmaster.kube.api import api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.scheduling import Scheduler
from loadmaster.serve.identity import hash_token
from loadmaster.telemetry.podresources.fake import FakePodResources, gpu_pod
from loadmaster_testing.kube_api import KubeApiDouble

pytestmark = [pytest.mark.browser, pytest.mark.slow]

USER_TOKEN = "team-a-token-0123456789abcdef"
NODES = ("n0", "n1")
FAULTY_GPU = 3
"""The GPU of the second pod's node that reports the XID."""


def uuid(host_tag: int, gpu: int) -> str:
    """The UUID ``FakeReader.busy`` gives GPU ``gpu`` of the fake node ``host_tag``."""
    return f"GPU-{host_tag:08d}-0000-0000-0000-{gpu:012d}"


def schedule(api: KubeApiDouble) -> dict[str, tuple[str, list[int]]]:
    """Nodes n0 and n1 (8 GPUs each) and a gang team-a/g of two 8-GPU pods, bound by kube run's loop
    (one pod per node); returns pod -> (node, GPUs)."""
    cluster = KubeCluster(api_client(host=api.url), Scheduler(load_profiles()["sds"]), "sched")  # type: ignore[attr-defined]
    cluster.start()
    for node in NODES:
        api.create("nodes", a_node(node))
    api.create("podgroups", a_pod_group("g", 2))
    for i in range(2):
        api.create("pods", a_pod(f"g-{i}", 8, "g"))
    wait_synced(cluster, api.rv)
    cluster.step()
    cluster.stop()
    pods = {p["metadata"]["name"]: p for p in api.objects("pods")}
    return {
        name: (
            pods[name]["spec"]["nodeName"],
            [int(g) for g in pods[name]["metadata"]["annotations"]["loadmaster.io/gpus"].split(",")],
        )
        for name in ("g-0", "g-1")
    }


@pytest.fixture(scope="module")
def stack(tmp_path_factory: pytest.TempPathFactory) -> Iterator[dict[str, Any]]:
    binary = prometheus_binary()
    folder = tmp_path_factory.mktemp("live-findings")
    api = KubeApiDouble(clock=lambda: 1_700_000_000.0)
    api.url = api.serve()  # type: ignore[attr-defined]
    held = schedule(api)
    assert sorted(node for node, _ in held.values()) == list(NODES), held
    kubelets: list[FakePodResources] = []
    processes: list[subprocess.Popen[bytes]] = []
    targets = []
    try:
        for tag, node in enumerate(NODES, start=1):
            pods = [gpu_pod("team-a", pod, [uuid(tag, g) for g in gpus])
                    for pod, (on, gpus) in held.items() if on == node]  # fmt: skip
            kubelet = FakePodResources(str(folder / f"kubelet-{node}.sock"), pods).start()
            kubelets.append(kubelet)
            (folder / f"values-{node}.json").write_text("{}")
            port = free_port()
            targets.append(f"127.0.0.1:{port}")
            processes.append(
                start_agent(port, node, 8, tag, kubelet.socket_path, values=folder / f"values-{node}.json")
            )
        prometheus_process, prometheus = start_prometheus(binary, folder, targets)
        processes.append(prometheus_process)

        wait_for_labelled_gpus(prometheus, 16)
        write_kubeconfig(folder, api.url)  # type: ignore[attr-defined]
        (folder / "tokens.yaml").write_text(
            yaml.safe_dump({"tokens": [{"name": "team-a", "sha256": hash_token(USER_TOKEN)}]})
        )
        (folder / "serve.yaml").write_text(yaml.safe_dump({
            "auth": {"tokens_file": "tokens.yaml", "operators": {"users": ["olga"]}},
            "cluster": {"kubeconfig": "kubeconfig", "name": "double"},
            "prometheus": {"url": prometheus, "step_s": 1},
        }))  # fmt: skip
        serve_process, url = start_serve(folder)
        processes.append(serve_process)
        yield {"folder": folder, "held": held, "url": url}
    finally:
        stop(processes)
        for kubelet in kubelets:
            kubelet.close()
        api.close()


def findings(page: Any) -> tuple[str, list[dict[str, str]]]:
    """Open the gang's job page afresh and return its findings panel's text and XID rows (targets,
    text), once the panel has its answer (it says "diagnosing…" until then)."""
    page.evaluate("window.loadmaster.openJob('team-a/g')")
    page.wait_for_function(
        "() => { const el = document.getElementById('job-findings');"
        " return el && el.textContent && !el.textContent.includes('diagnosing'); }",
        timeout=30_000,
    )
    heading = page.locator("#job-findings").inner_text()
    rows = page.locator("#job-findings tr[data-testid=finding][data-kind=xid]")
    xids = [
        {"targets": rows.nth(i).locator("td").nth(1).inner_text(), "text": rows.nth(i).inner_text()}
        for i in range(rows.count())
    ]
    return heading, xids


def test_an_injected_xid_appears_as_a_finding_on_the_jobs_page(stack: dict[str, Any]) -> None:
    node, gpus = stack["held"]["g-1"]
    assert FAULTY_GPU in gpus
    with chromium() as browser:
        page = open_page(browser, stack["url"], USER_TOKEN)
        page.wait_for_function(
            "() => window.loadmaster.snapshot().owners.job.includes('team-a/g')", timeout=30_000
        )

        def diagnosed_healthy() -> bool:
            """A verdict (the diagnostics want 120 s of telemetry since serve began) and no XID."""
            panel, xids = findings(page)
            return panel.startswith("Findings (") and "too little telemetry" not in panel and not xids

        wait_until(diagnosed_healthy, "the job's page to diagnose its healthy GPUs", timeout_s=300.0)
        values = stack["folder"] / f"values-{node}.json"
        values.write_text(json.dumps({str(FAULTY_GPU): {"XID_ERRORS": 79}}))
        xids = wait_until(lambda: findings(page)[1], "an XID finding on the job's page", timeout_s=90.0)
        (finding,) = xids
        assert "XID 79" in finding["text"]
        assert node in finding["targets"] and str(FAULTY_GPU) in finding["targets"]
