"""End to end as an operator works: real kubectl (v1.32) against the API double while the scheduler runs.

`kubectl apply -f deploy/examples/` creates the PodGroups, the gang's pods and the PyTorchJob (which
no training operator expands here); `kubectl get pods -w` shows the gang's pods bound by loadmaster.
kubectl needs the double's discovery (/api, /apis, /api/v1, /apis/<group>/<version>) and the OpenAPI
v3 index that tells it the server validates fields itself.
"""

from __future__ import annotations

import os
import queue
import shutil
import subprocess
import threading
import time
from collections.abc import Iterator
from pathlib import Path

import pytest

from kube.helpers import a_node, kubeconfig_for
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.kube.runner import run_loop
from loadmaster.scheduling import Scheduler
from loadmaster_testing.kube_api import KubeApiDouble

EXAMPLES = Path(__file__).resolve().parents[2] / "deploy" / "examples"
GANG = {f"gang-demo-{i}" for i in range(4)}


@pytest.fixture
def kubectl(api: KubeApiDouble, tmp_path: Path) -> Iterator[list[str]]:
    """The kubectl command line, with a kubeconfig for the double."""
    found = shutil.which("kubectl")
    if found is None:
        message = "kubectl is not installed (apt-get install kubernetes-client, or the v1.32 release binary)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    path = kubeconfig_for(api, tmp_path / "kubeconfig", user="operator")
    yield [found, "--kubeconfig", str(path), "--cache-dir", str(tmp_path / "cache")]


@pytest.fixture
def scheduler(api: KubeApiDouble) -> Iterator[None]:
    """loadmaster's loop on its own thread, as `kube run` runs it."""
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    lease = LeaderElector(client, "e2e", namespace="loadmaster")
    cluster = KubeCluster(client, Scheduler(load_profiles()["binpack"]), "e2e", lease=lease)
    stop = threading.Event()
    cluster.start()
    thread = threading.Thread(target=run_loop, args=(cluster,), kwargs={"interval_s": 0.1, "stop": stop})
    thread.start()
    yield
    stop.set()
    thread.join(timeout=10)
    cluster.stop()


def run(command: list[str], stdin: str | None = None) -> subprocess.CompletedProcess[str]:
    return subprocess.run(command, input=stdin, capture_output=True, text=True, timeout=60, check=False)


def wait_for_watch(api: KubeApiDouble) -> None:
    """Until kubectl's watch of the namespace's pods is open (so it sees the pods created, then bound)."""
    deadline = time.monotonic() + 30
    while not any(w.resource == "pods" and w.namespace == "default" for w in api.watchers):
        assert time.monotonic() < deadline, "kubectl get pods -w did not open a watch within 30 s"
        time.sleep(0.05)


def bound(seen: dict[str, str]) -> set[str]:
    """Gang pods the watch has shown on a node."""
    return {name for name, node in seen.items() if name in GANG and node != "<none>"}


def lines_of(process: subprocess.Popen[str]) -> queue.Queue[str]:
    out: queue.Queue[str] = queue.Queue()

    def pump() -> None:
        assert process.stdout is not None
        for line in process.stdout:
            out.put(line.rstrip("\n"))

    threading.Thread(target=pump, daemon=True).start()
    return out


def test_kubectl_apply_and_watch_while_loadmaster_binds(
    api: KubeApiDouble, kubectl: list[str], scheduler: None
) -> None:
    for i in range(2):
        api.create("nodes", a_node(f"gpu-{i}"))
    columns = "NAME:.metadata.name,NODE:.spec.nodeName"
    command = [*kubectl, "get", "pods", "-w", "-o", f"custom-columns={columns}", "--no-headers"]
    seen: dict[str, str] = {}
    printed: list[str] = []
    with subprocess.Popen(command, stdout=subprocess.PIPE, stderr=subprocess.STDOUT, text=True) as watch:
        try:
            wait_for_watch(api)
            applied = run([*kubectl, "apply", "-f", str(EXAMPLES)])
            assert applied.returncode == 0, applied.stderr
            assert "pod/gang-demo-0 created" in applied.stdout
            assert "pytorchjob.kubeflow.org/resnet-ddp created" in applied.stdout
            lines = lines_of(watch)
            deadline = time.monotonic() + 30
            while bound(seen) < GANG and time.monotonic() < deadline:
                try:
                    printed.append(lines.get(timeout=1))
                except queue.Empty:
                    continue
                if len(fields := printed[-1].split()) == 2:
                    seen[fields[0]] = fields[1]
        finally:
            watch.terminate()
    assert bound(seen) == GANG, printed
    first = [line.split()[1:] for line in printed if line.startswith("gang-demo-")][:1]
    assert first == [["<none>"]], printed  # the watch showed a pod created, then bound
    nodes = {node for name, node in seen.items() if name in GANG}
    assert nodes <= {"gpu-0", "gpu-1"}
    condition = "jsonpath={.status.conditions[0].type}={.status.conditions[0].status}"
    described = run([*kubectl, "get", "pod", "gang-demo-0", "-o", condition])
    assert described.stdout == "PodScheduled=True", described.stderr
    again = run([*kubectl, "apply", "-f", str(EXAMPLES / "gang.yaml")])
    assert again.returncode == 0 and "pod/gang-demo-0 unchanged" in again.stdout, again.stderr
    assert api.invalid == []


def test_kubectl_reads_the_doubles_discovery(api: KubeApiDouble, kubectl: list[str]) -> None:
    listed = run([*kubectl, "api-resources", "-o", "name"])
    assert listed.returncode == 0, listed.stderr
    names = set(listed.stdout.split())
    assert {"pods", "nodes", "podgroups.scheduling.x-k8s.io", "leases.coordination.k8s.io",
            "priorityclasses.scheduling.k8s.io"} <= names  # fmt: skip
    bad = run(
        [*kubectl, "create", "-f", "-"],
        "apiVersion: v1\nkind: Pod\nmetadata: {name: x}\nspec: {containerz: []}\n",
    )
    assert bad.returncode != 0 and "containerz" in bad.stderr  # validated by the server, strictly
