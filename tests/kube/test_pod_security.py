"""deploy/*.yaml passes the restricted Pod Security Standard; deploy/examples/ the baseline one.

The checks (tests/kube/pod_security.py) follow the standard's page and kube-apiserver's
pod-security-admission policy checks; the table below shows each check catching what it forbids,
so that a lint which passes is a lint which could have failed.
"""

from __future__ import annotations

import copy
from pathlib import Path
from typing import Any

import pytest
import yaml

from kube.pod_security import BASELINE, RESTRICTED, pod_specs, violations

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"


def docs(pattern: str) -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.relative_to(DEPLOY)}[{i}]", doc)
        for path in sorted(DEPLOY.glob(pattern))
        for i, doc in enumerate(yaml.safe_load_all(path.read_text()))
        if doc is not None
    ]


AGENT_NEEDS = {"hostPathVolumes", "restrictedVolumes", "runAsNonRoot", "runAsUser"}
"""The GPU agent reads the kubelet's pod-resources socket: a hostPath volume, as root (namespace.yaml)."""


def test_the_manifests_pass_restricted_but_the_agents_socket() -> None:
    found = {
        where.split("[")[0]: violations(spec) for where, doc in docs("*.yaml") for _, spec in pod_specs(doc)
    }
    assert set(found) == {"deployment.yaml", "serve.yaml", "agent-daemonset.yaml"}  # the lint saw every pod
    assert found["deployment.yaml"] == [] and found["serve.yaml"] == []
    assert {v.split(":")[0] for v in found["agent-daemonset.yaml"]} == AGENT_NEEDS


def test_the_examples_pass_baseline() -> None:
    specs = [
        (f"{where} {path}", spec) for where, doc in docs("examples/*.yaml") for path, spec in pod_specs(doc)
    ]
    assert len(specs) == 6  # four gang pods, the PyTorchJob's master and worker templates
    assert {w: violations(s, BASELINE) for w, s in specs} == {w: [] for w, _ in specs}


def compliant() -> dict[str, Any]:
    """The Deployment's pod spec: restricted-compliant (the test above)."""
    deployment = next(d for _, d in docs("deployment.yaml"))
    spec: dict[str, Any] = copy.deepcopy(deployment["spec"]["template"]["spec"])
    return spec


def container(spec: dict[str, Any]) -> dict[str, Any]:
    found: dict[str, Any] = spec["containers"][0]
    return found


def no_seccomp(spec: dict[str, Any]) -> None:
    del container(spec)["securityContext"]["seccompProfile"]
    del spec["securityContext"]["seccompProfile"]


BREAKS = [
    ("hostNamespaces", lambda s: s.update(hostNetwork=True)),
    ("privileged", lambda s: container(s)["securityContext"].update(privileged=True)),
    (
        "capabilities_baseline",
        lambda s: container(s)["securityContext"]["capabilities"].update(add=["SYS_ADMIN"]),
    ),
    ("hostPathVolumes", lambda s: s["volumes"].append({"name": "h", "hostPath": {"path": "/"}})),
    ("hostPorts", lambda s: container(s)["ports"][0].update(hostPort=10251)),
    (
        "hostProbesAndhostLifecycle",
        lambda s: container(s)["livenessProbe"]["httpGet"].update(host="10.0.0.1"),
    ),
    ("appArmorProfile", lambda s: s["securityContext"].update(appArmorProfile={"type": "Unconfined"})),
    ("seLinuxOptions", lambda s: s["securityContext"].update(seLinuxOptions={"type": "spc_t"})),
    ("procMount", lambda s: container(s)["securityContext"].update(procMount="Unmasked")),
    ("seccompProfile_baseline", lambda s: s["securityContext"].update(seccompProfile={"type": "Unconfined"})),
    ("sysctls", lambda s: s["securityContext"].update(sysctls=[{"name": "kernel.msgmax", "value": "1"}])),
    ("windowsHostProcess", lambda s: s["securityContext"].update(windowsOptions={"hostProcess": True})),
    ("restrictedVolumes", lambda s: s["volumes"].append({"name": "n", "nfs": {"server": "x", "path": "/"}})),
    ("allowPrivilegeEscalation", lambda s: container(s)["securityContext"].pop("allowPrivilegeEscalation")),
    ("runAsNonRoot", lambda s: container(s)["securityContext"].update(runAsNonRoot=False)),
    ("runAsUser", lambda s: container(s)["securityContext"].update(runAsUser=0)),
    (
        "seccompProfile_restricted",
        no_seccomp,
    ),
    (
        "capabilities_restricted",
        lambda s: container(s)["securityContext"]["capabilities"].update(drop=["NET_RAW"]),
    ),
]


@pytest.mark.parametrize(("check", "breaking"), BREAKS, ids=[c for c, _ in BREAKS])
def test_each_check_catches_what_it_forbids(check: str, breaking: Any) -> None:
    spec = compliant()
    breaking(spec)
    found = violations(spec)
    assert any(v.startswith(f"{check}:") for v in found), found  # (a breach may break a second rule too)


def test_every_check_is_exercised() -> None:
    assert {c for c, _ in BREAKS} == set(RESTRICTED)


def test_run_as_non_root_at_pod_level_covers_the_containers() -> None:
    spec = compliant()
    del container(spec)["securityContext"]["runAsNonRoot"]
    assert violations(spec) == []
    del spec["securityContext"]["runAsNonRoot"]
    assert [v.split(":")[0] for v in violations(spec)] == ["runAsNonRoot"]
