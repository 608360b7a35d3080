"""The real parts the live integration tests start: ``loadmaster agent --fake-gpus``, a real Prometheus
scraping agents, and ``loadmaster serve --config``; with a patient wait for each.

Imported as ``from live_stack import ...`` by the tests beside it (pytest puts this folder on the path).
"""

from __future__ import annotations

import json
import os
import shutil
import subprocess
import sys
import time
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import Any

import httpx
import pytest
import yaml

from app_server import free_port

CLI = [sys.executable, "-c", "from loadmaster.cli import main; main()"]


def prometheus_binary() -> str:
    """The prometheus program; missing, the test skips, and fails under CI (which must install it)."""
    binary = shutil.which("prometheus")
    if binary is None:
        if os.environ.get("CI") == "true":
            pytest.fail("the prometheus binary is missing; CI must install it (.ci/run)")
        pytest.skip("the prometheus binary is not installed")
    return binary


def wait_until(check: Callable[[], Any], what: str, timeout_s: float = 60.0) -> Any:
    """Poll ``check`` until it returns something true (and return that) or fail the test after the timeout.

    A check that raises an HTTP, key or value error (a server still starting: Prometheus answers 503,
    serve is not listening yet) counts as not yet.
    """
    deadline = time.monotonic() + timeout_s
    while time.monotonic() < deadline:
        try:
            found = check()
        except (httpx.HTTPError, KeyError, ValueError):
            found = None
        if found:
            return found
        time.sleep(0.3)
    pytest.fail(f"timed out waiting for {what}")


def start_agent(
    port: int,
    hostname: str,
    gpus: int,
    host_tag: int,
    pod_resources_socket: str,
    values: Path | None = None,
) -> subprocess.Popen[bytes]:
    """``loadmaster agent --fake-gpus`` on 127.0.0.1:port, sampling every 0.5 s, its GPUs mapped to pods
    by the kubelet pod-resources server on ``pod_resources_socket``."""
    command = [*CLI, "agent", "--host", "127.0.0.1", "--port", str(port), "--interval", "0.5",
               "--hostname", hostname, "--fake-gpus", str(gpus),
               "--fake-host-tag", str(host_tag)]  # fmt: skip
    if values is not None:
        command += ["--fake-values", str(values)]
    command += ["--pod-resources-socket", pod_resources_socket]
    return subprocess.Popen(command, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL)


def run_prometheus(binary: str, folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """A real Prometheus on a free port with ``folder/prometheus.yml``, its data in ``folder/data``;
    returns the process and its URL (not waited for: it answers 503 while it starts)."""
    port = free_port()
    process = subprocess.Popen(
        [binary, f"--config.file={folder / 'prometheus.yml'}", f"--storage.tsdb.path={folder / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip
    return process, f"http://127.0.0.1:{port}"


def start_prometheus(
    binary: str, folder: Path, targets: Sequence[str]
) -> tuple[subprocess.Popen[bytes], str]:
    """:func:`run_prometheus` scraping ``targets`` (host:port) every second."""
    (folder / "prometheus.yml").write_text(
        "global: {scrape_interval: 1s}\nscrape_configs:\n  - job_name: gpus\n"
        f"    static_configs: [{{targets: {json.dumps(list(targets))}}}]\n"
    )
    return run_prometheus(binary, folder)


def start_serve(folder: Path) -> tuple[subprocess.Popen[bytes], str]:
    """``serve --config folder/serve.yaml`` on a free port (its stderr in serve.log), once it answers."""
    port = free_port()
    url = f"http://127.0.0.1:{port}"
    with (folder / "serve.log").open("ab") as log:
        process = subprocess.Popen(
            [*CLI, "serve", "--config", str(folder / "serve.yaml"), "--port", str(port)],
            stdout=subprocess.DEVNULL, stderr=log,
        )  # fmt: skip
    wait_until(lambda: httpx.get(f"{url}/api/health").json()["ok"], "serve to answer")
    return process, url


def wait_for_labelled_gpus(prometheus: str, count: int) -> None:
    """Wait until Prometheus holds ``count`` GPUs labelled with namespace team-a (the gang's pods)."""

    def labelled() -> bool:
        query = {"query": 'count(DCGM_FI_DEV_GPU_UTIL{namespace="team-a"})'}
        result = httpx.get(f"{prometheus}/api/v1/query", params=query).json()["data"]["result"]
        return bool(result) and float(result[0]["value"][1]) == count

    wait_until(labelled, f"Prometheus to hold the {count} GPUs labelled with the gang's pods")


def write_kubeconfig(folder: Path, server: str) -> Path:
    """A kubeconfig for the API double at ``server``, written into ``folder``."""
    kubeconfig = {
        "apiVersion": "v1", "kind": "Config", "current-context": "d",
        "clusters": [{"name": "d", "cluster": {"server": server}}],
        "users": [{"name": "u", "user": {}}],
        "contexts": [{"name": "d", "context": {"cluster": "d", "user": "u"}}],
    }  # fmt: skip
    path = folder / "kubeconfig"
    path.write_text(yaml.safe_dump(kubeconfig))
    return path


def stop(processes: Sequence[subprocess.Popen[bytes]]) -> None:
    """Terminate every process, then wait for each (20 s at most)."""
    for process in processes:
        process.terminate()
    for process in processes:
        process.wait(timeout=20)
