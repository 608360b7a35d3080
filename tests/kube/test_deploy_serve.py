"""deploy/serve.yaml: its serve.yaml and tokens load, the Deployment's flags and mounts agree with them,
and the ClusterRole allows exactly the calls the live dashboard makes (test_deploy.py validates every
manifest against the Kubernetes schema)."""

from __future__ import annotations

import os
import time
from pathlib import Path
from typing import Any

import yaml
from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.kube.api import api_client
from loadmaster.kube.watch import ClusterWatch
from loadmaster.serve.config import load_serve_config
from loadmaster.serve.identity import HashedTokens
from loadmaster_testing.kube_api import KubeApiDouble

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def docs() -> list[dict[str, Any]]:
    return [d for d in yaml.safe_load_all((DEPLOY / "serve.yaml").read_text()) if d]


def one(kind: str) -> dict[str, Any]:
    return next(d for d in docs() if d["kind"] == kind)


def test_the_config_and_tokens_load_and_the_deployment_agrees(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(one("ConfigMap")["data"]["serve.yaml"])
    config = load_serve_config(path)
    assert config.cluster is not None and config.cluster.kubeconfig is None  # the pod's service account
    assert config.prometheus is not None and config.auth is not None and config.auth.tokens_file is not None
    tokens = tmp_path / "tokens.yaml"
    tokens.write_text(one("Secret")["stringData"]["tokens.yaml"])
    HashedTokens.load(tokens)
    pod = one("Deployment")["spec"]["template"]["spec"]
    container = pod["containers"][0]
    args = container["args"]
    assert args[0] == "serve"
    help_text = CliRunner().invoke(app, ["serve", "--help"], terminal_width=200).output
    for flag in args[1:]:
        assert flag.split("=")[0] in help_text, flag
    mounts = {m["name"]: m["mountPath"] for m in container["volumeMounts"]}
    config_arg = next(a.split("=", 1)[1] for a in args if a.startswith("--config="))
    assert os.path.dirname(config_arg) == mounts["config"]
    assert str(config.auth.tokens_file.parent) == mounts["tokens"]
    assert str(config.state.path.parent) == mounts["state"]
    assert pod["serviceAccountName"] == one("ServiceAccount")["metadata"]["name"]
    assert one("Deployment")["spec"]["strategy"]["type"] == "Recreate"  # one writer of the state file


def test_the_cluster_role_allows_exactly_the_calls_the_watch_makes(api: KubeApiDouble) -> None:
    watch = ClusterWatch(api_client(host=api.url))  # type: ignore[attr-defined]
    watch.list_now()
    watch.start()
    deadline = time.monotonic() + 10
    while not all(("watch", kind) in api.requests for kind in ("nodes", "pods", "podgroups")):
        assert time.monotonic() < deadline, api.requests
        time.sleep(0.02)
    watch.stop()
    groups = {"podgroups": "scheduling.x-k8s.io"}
    made = {(groups.get(resource, ""), resource, verb) for verb, resource in api.requests}
    allowed = {
        (group, resource, verb)
        for rule in one("ClusterRole")["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }
    assert made == allowed
