"""deploy/agent-daemonset.yaml and deploy/prometheus-scrape.yaml: flags the agent has, the kubelet
socket mounted where the agent reads it, and a scrape configuration promtool accepts that keeps the
agent's pods. (test_deploy.py validates every manifest against the Kubernetes schema.)"""

from __future__ import annotations

import os
import re
import shutil
import subprocess
from pathlib import Path
from typing import Any

import pytest
import yaml
from typer.testing import CliRunner

from loadmaster.cli import app

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def load(name: str) -> dict[str, Any]:
    doc = yaml.safe_load((DEPLOY / name).read_text())
    assert isinstance(doc, dict)
    return doc


def test_the_daemonset_passes_flags_the_agent_has_and_mounts_the_socket_it_reads() -> None:
    spec = load("agent-daemonset.yaml")["spec"]["template"]["spec"]
    container = spec["containers"][0]
    args = container["args"]
    assert args[0] == "agent"
    help_text = CliRunner().invoke(app, ["agent", "--help"], terminal_width=200).output
    for flag in args[1:]:
        assert flag.split("=")[0] in help_text, flag
    socket = next(a.split("=", 1)[1] for a in args if a.startswith("--pod-resources-socket="))
    mount = next(m for m in container["volumeMounts"] if m["name"] == "pod-resources")
    volume = next(v for v in spec["volumes"] if v["name"] == "pod-resources")
    assert os.path.dirname(socket) == mount["mountPath"] == volume["hostPath"]["path"]
    assert mount["readOnly"] is True
    port = next(a.split("=", 1)[1] for a in args if a.startswith("--port="))
    assert container["ports"][0]["containerPort"] == int(port)
    assert container["livenessProbe"]["httpGet"]["path"] == "/healthz"
    assert "nvidia.com/gpu" not in str(container["resources"])  # takes no GPU from the scheduler


def scrape_config() -> str:
    text = load("prometheus-scrape.yaml")["data"]["prometheus.yml"]
    assert isinstance(text, str)
    return text


def test_the_scrape_config_keeps_the_agent_pods() -> None:
    daemonset = load("agent-daemonset.yaml")
    pod_labels = daemonset["spec"]["template"]["metadata"]["labels"]
    port_name = daemonset["spec"]["template"]["spec"]["containers"][0]["ports"][0]["name"]
    job = yaml.safe_load(scrape_config())["scrape_configs"][0]
    keeps = {r["source_labels"][0]: r["regex"] for r in job["relabel_configs"] if r.get("action") == "keep"}
    label = keeps["__meta_kubernetes_pod_label_app_kubernetes_io_name"]
    assert re.fullmatch(label, pod_labels["app.kubernetes.io/name"])
    assert re.fullmatch(keeps["__meta_kubernetes_pod_container_port_name"], port_name)
    assert job["kubernetes_sd_configs"][0]["namespaces"]["names"] == [daemonset["metadata"]["namespace"]]
    assert "honor_labels" not in job


def test_promtool_accepts_the_scrape_config(tmp_path: Path) -> None:
    """Debian's Prometheus is built without the Kubernetes service discovery, so promtool checks a copy
    whose kubernetes_sd_configs is a static target (every other part, the relabelling included, as
    shipped); the discovery block's shape is checked against Prometheus's documented fields."""
    promtool = shutil.which("promtool")
    if promtool is None:
        if os.environ.get("CI") == "true":
            pytest.fail("promtool is missing; CI installs it with the prometheus package (.ci/run)")
        pytest.skip("promtool is not installed")
    config = yaml.safe_load(scrape_config())
    for job in config["scrape_configs"]:
        for sd in job.pop("kubernetes_sd_configs"):
            assert set(sd) <= {"role", "namespaces", "selectors", "api_server", "kubeconfig_file"}
            assert sd["role"] in {"node", "service", "pod", "endpoints", "endpointslice", "ingress"}
        job["static_configs"] = [{"targets": ["127.0.0.1:9400"]}]
    path = tmp_path / "prometheus.yml"
    path.write_text(yaml.safe_dump(config))
    result = subprocess.run(
        [promtool, "check", "config", str(path)], capture_output=True, text=True, check=False
    )
    assert result.returncode == 0, result.stdout + result.stderr
