"""deploy/: every manifest valid (strict OpenAPI schema); the RBAC rules are exactly the calls made."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import kubernetes_validate
import pytest
import yaml
from typer.testing import CliRunner

from kube.helpers import a_node, a_pod, a_pod_group, wait_synced
from loadmaster.cli import app
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.checkpoint import UsageCheckpoint
from loadmaster.kube.cluster import KubeCluster
from loadmaster.kube.queues import plugin_args_from, profile_with
from loadmaster.kube.reclaim import KubeReclaimer
from loadmaster.scheduling import Scheduler
from loadmaster.scheduling.reclaim import ReclaimPolicy, ReclaimTracker
from loadmaster_testing.kube_api import SCHEMA_VERSION, KubeApiDouble

DEPLOY = Path(__file__).resolve().parents[2] / "deploy"
CRD_GROUPS = ("scheduling.x-k8s.io/", "kubeflow.org/")
"""Kinds defined by CRDs, which kubernetes-validate has no schema for: checked for shape only."""


def manifests() -> list[tuple[str, dict[str, Any]]]:
    return [
        (f"{path.relative_to(DEPLOY)}[{i}]", doc)
        for path in sorted(DEPLOY.rglob("*.yaml"))
        for i, doc in enumerate(yaml.safe_load_all(path.read_text()))
        if doc is not None
    ]


def by_kind(kind: str, name: str) -> dict[str, Any]:
    return next(d for _, d in manifests() if d["kind"] == kind and d["metadata"]["name"] == name)


@pytest.mark.parametrize(("where", "doc"), manifests(), ids=[w for w, _ in manifests()])
def test_every_manifest_is_valid(where: str, doc: dict[str, Any]) -> None:
    if doc["apiVersion"].startswith(CRD_GROUPS):
        assert doc["metadata"]["name"] and doc["spec"], where
        return
    kubernetes_validate.validate(doc, f"{SCHEMA_VERSION}.0", strict=True)


def test_the_deployment_runs_two_replicas_with_flags_the_cli_has() -> None:
    deployment = by_kind("Deployment", "loadmaster")
    assert deployment["spec"]["replicas"] == 2
    args = deployment["spec"]["template"]["spec"]["containers"][0]["args"]
    assert args[:2] == ["kube", "run"]
    help_text = CliRunner().invoke(app, ["kube", "run", "--help"], terminal_width=200).output
    for flag in args[2:]:
        assert flag.split("=")[0] in help_text, flag


def test_the_profiles_and_queues_configmaps_load(tmp_path: Path) -> None:
    profiles = tmp_path / "profiles.yaml"
    profiles.write_text(by_kind("ConfigMap", "loadmaster-profiles")["data"]["profiles.yaml"])
    assert set(load_profiles(str(profiles))) == {"gang-binpack", "fair"}
    args = plugin_args_from(by_kind("ConfigMap", "loadmaster-queues"))
    profile = profile_with("fair", args, str(profiles))
    quota = next(p for p in profile.plugins if p.name == "quota")
    assert set(quota.args.orgs["research"].groups) == {"team-a", "team-b"}  # type: ignore[attr-defined]


# ---------------------------------------------------------------- RBAC


def rbac_rules() -> set[tuple[str, str, str]]:
    """(group, resource, verb) the ClusterRole and the namespaced Role grant together."""
    roles = (by_kind("ClusterRole", "loadmaster-scheduler"), by_kind("Role", "loadmaster-scheduler"))
    return {
        (group, resource, verb)
        for role in roles
        for rule in role["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_scheduler_objects_are_granted_by_name_in_its_namespace_only() -> None:
    """The ConfigMap and the Lease: a Role with resourceNames, nothing cluster-wide (create has no name)."""
    cluster_wide = {
        r for rule in by_kind("ClusterRole", "loadmaster-scheduler")["rules"] for r in rule["resources"]
    }
    assert not cluster_wide & {"configmaps", "leases", "secrets"}
    role = by_kind("Role", "loadmaster-scheduler")
    args = by_kind("Deployment", "loadmaster")["spec"]["template"]["spec"]["containers"][0]["args"]
    flags = dict(a.removeprefix("--").split("=", 1) for a in args if "=" in a)
    queues_ns, _, queues_name = flags["queues"].partition("/")
    checkpoint_ns, _, checkpoint_name = flags["fairshare-checkpoint"].partition("/")
    assert role["metadata"]["namespace"] == queues_ns == checkpoint_ns == flags["lease-namespace"]
    named = {
        (r["resources"][0], tuple(r["verbs"])): r.get("resourceNames")
        for r in role["rules"]
        if r["verbs"] != ["create"]
    }
    assert named == {
        ("configmaps", ("get",)): [queues_name],
        ("configmaps", ("get", "update")): [checkpoint_name],
        ("leases", ("get", "update")): [LeaderElector.name],
    }
    assert sorted(r["resources"][0] for r in role["rules"] if r["verbs"] == ["create"]) == [
        "configmaps",
        "leases",
    ]


GROUPS = {
    "leases": "coordination.k8s.io",
    "podgroups": "scheduling.x-k8s.io",
    "priorityclasses": "scheduling.k8s.io",
}


def the_cli_commands(api: KubeApiDouble, tmp_path: Path) -> None:
    kubeconfig = tmp_path / "kubeconfig"
    kubeconfig.write_text(
        yaml.safe_dump(
            {
                "apiVersion": "v1",
                "kind": "Config",
                "clusters": [{"name": "d", "cluster": {"server": api.url}}],  # type: ignore[attr-defined]
                "users": [{"name": "u", "user": {}}],
                "contexts": [{"name": "d", "context": {"cluster": "d", "user": "u"}}],
                "current-context": "d",
            }
        )
    )
    api.create("configmaps", by_kind("ConfigMap", "loadmaster-queues"))
    for i in range(2):
        api.create("nodes", a_node(f"n{i}"))
    api.create("podgroups", a_pod_group("g", 2))
    api.create("podgroups", a_pod_group("big", 2))
    for i in range(2):
        api.create("pods", a_pod(f"g-{i}", 4, "g"))
        api.create("pods", a_pod(f"big-{i}", 8, "big"))
    base = ["--kubeconfig", str(kubeconfig)]
    runner = CliRunner()
    for command in (
        ["kube", "run", *base, "--profile", "fair", "--max-steps", "2", "--interval", "0"],
        ["kube", "dry-run", *base, "--profile", "fair"],
        ["kube", "snapshot", *base, "-o", str(tmp_path / "snap")],
    ):
        result = runner.invoke(app, command)
        assert result.exit_code == 0, result.output


def a_rollback_and_a_preemption(api: KubeApiDouble) -> None:
    """On its own double: the CLI's replica holds the Lease of the first."""
    client = api_client(host=api.serve())
    lease = LeaderElector(client, "a", namespace="loadmaster")
    checkpoint = UsageCheckpoint(client, every_s=0)  # written at every step that charged: an update
    cluster = KubeCluster(
        client,
        Scheduler(load_profiles()["priority"]),
        "a",
        lease=lease,
        gang_timeout_s=0,
        checkpoint=checkpoint,
    )
    cluster.start()
    api.create("nodes", a_node("p0"))
    api.create("podgroups", a_pod_group("rb", 2, namespace="team-b"))
    for i in range(2):
        pod = a_pod(f"rb-{i}", 4, "rb", namespace="team-b")
        pod["metadata"]["ownerReferences"] = [  # a controller recreates them: released by deletion
            {"apiVersion": "batch/v1", "kind": "Job", "name": "rb", "uid": "u1", "controller": True}
        ]
        api.create("pods", pod)
    wait_synced(cluster, api.rv)
    api.conflict_next_binds(1)  # one bind fails: the gang is short of minMember at its (zero) timeout
    cluster.step()
    for _ in range(3):
        wait_synced(cluster, api.rv)
        if cluster.step().rolled_back and api.requests.get(("delete", "pods")):
            break
    assert api.requests.get(("delete", "pods")) and api.requests.get(("patch", "podgroups"))
    api.reap()
    for pod in api.objects("pods"):
        api.delete("pods", f"team-b/{pod['metadata']['name']}", 0)
    api.create("pods", a_pod("low", 8, namespace="team-b"))
    wait_synced(cluster, api.rv)
    cluster.step()
    high = a_pod("high", 8, namespace="team-b")
    high["spec"]["priorityClassName"] = "high"  # the priority plugins read the class name
    api.create("pods", high)
    wait_synced(cluster, api.rv)
    assert cluster.step().evicted == ["team-b/low"]
    assert checkpoint.saves >= 2 and checkpoint.failures == 0  # created, then replaced
    a_reclaim_notice(api, cluster)
    cluster.stop()


def a_reclaim_notice(api: KubeApiDouble, cluster: KubeCluster) -> None:
    """kube run --reclaim: an idle pod gets its notice (a pod patch and an Event)."""
    api.create("nodes", a_node("p1"))
    api.create("pods", a_pod("idle", 1, namespace="team-b"))
    target = {"apiVersion": "v1", "kind": "Node", "name": "p1"}  # bound directly: not a call of the code
    meta = {"name": "idle", "namespace": "team-b"}
    api.bind("team-b", "idle", {"apiVersion": "v1", "kind": "Binding", "metadata": meta, "target": target})
    wait_synced(cluster, api.rv)
    assert cluster.lead()
    tracker = ReclaimTracker([ReclaimPolicy(idle_after_s=60)])
    reclaimer = KubeReclaimer(cluster, tracker, Idle(), None, interval_s=0)
    assert [d.job for d in reclaimer.step()] == ["team-b/idle"]


class Idle:
    def idle_since(self, pods: Mapping[str, Sequence[str]], now_s: float) -> dict[str, float | None]:
        return {job: now_s - 3600 for job in pods if job == "team-b/idle"}


def test_the_cluster_role_allows_exactly_the_calls_the_code_makes(api: KubeApiDouble, tmp_path: Path) -> None:
    the_cli_commands(api, tmp_path)
    other = KubeApiDouble(clock=lambda: 1_700_000_000.0)
    try:
        a_rollback_and_a_preemption(other)
    finally:
        other.close()
    made = {
        (GROUPS.get(resource.split("/")[0], ""), resource, verb)
        for verb, resource in [*api.requests, *other.requests]
    }
    assert api.invalid == [] and other.invalid == []
    assert made == rbac_rules()
