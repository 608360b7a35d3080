"""`loadmaster kube run | dry-run | snapshot` against the API double, through a kubeconfig file."""

from __future__ import annotations

import time
from pathlib import Path

import pytest
from typer.testing import CliRunner

from builders import by_id
from kube.helpers import a_finished_status, a_node, a_pod, a_pod_group, kubeconfig_for
from loadmaster.cli import app
from loadmaster.config import load_cluster, load_profiles, load_trace_workload
from loadmaster.config.usage import load_past_usage
from loadmaster.errors import ConfigError
from loadmaster.experiment import compare
from loadmaster.kube.api import api_client
from loadmaster.kube.queues import load_profile, plugin_args_from
from loadmaster.kube.translate import utc_stamp
from loadmaster.model.usage import HALF_LIFE_S
from loadmaster.traces.replay import ReplayReport, replay_time
from loadmaster.traces.trace import read_parquet
from loadmaster_testing.kube_api import KubeApiDouble

runner = CliRunner()


@pytest.fixture
def kubeconfig(api: KubeApiDouble, tmp_path: Path) -> Path:
    return kubeconfig_for(api, tmp_path / "kubeconfig")


def populate(api: KubeApiDouble) -> None:
    """Two 8-GPU nodes; a gang of 2 x 4 GPUs, a 4-GPU pod, and a 16-GPU pod that can never fit."""
    for i in range(2):
        api.create("nodes", a_node(f"n{i}"))
    api.create("podgroups", a_pod_group("g", 2))
    for i in range(2):
        api.create("pods", a_pod(f"g-{i}", 4, "g"))
    api.create("pods", a_pod("small", 4))
    api.create("pods", a_pod("later", 16))


def invoke(*args: str) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == 0, result.output + repr(result.exception)
    return result.output


def test_dry_run_prints_the_plan_and_writes_nothing(api: KubeApiDouble, kubeconfig: Path) -> None:
    populate(api)
    before = api.rv
    out = invoke("kube", "dry-run", "--kubeconfig", str(kubeconfig), "--queues", "")
    assert "team-a/g-0" in out and "team-a/g-1" in out and "team-a/small" in out
    assert "wait" in out and "team-a/later" in out
    assert api.bindings == [] and api.rv == before and api.objects("events") == []


def test_run_binds_and_explains(api: KubeApiDouble, kubeconfig: Path) -> None:
    populate(api)
    invoke("kube", "run", "--kubeconfig", str(kubeconfig), "--max-steps", "1", "--interval", "0")
    assert sorted(k for k, _ in api.bindings) == ["team-a/g-0", "team-a/g-1", "team-a/small"]
    later = api.get("pods", "team-a/later")
    assert later is not None
    condition = next(c for c in later["status"]["conditions"] if c["type"] == "PodScheduled")
    assert condition["status"] == "False" and condition["message"]
    for key in ("team-a/g-0", "team-a/small"):  # a pod bound this cycle is not marked unschedulable
        pod = api.get("pods", key)
        assert pod is not None
        assert [c["status"] for c in pod["status"]["conditions"] if c["type"] == "PodScheduled"] == ["True"]
    assert api.get("leases", "loadmaster/loadmaster") is not None
    assert api.invalid == []


def test_snapshot_writes_a_loadable_cluster_spec_and_trace(
    api: KubeApiDouble, kubeconfig: Path, tmp_path: Path
) -> None:
    populate(api)
    invoke("kube", "run", "--kubeconfig", str(kubeconfig), "--max-steps", "1", "--interval", "0")
    out = tmp_path / "snap"
    invoke("kube", "snapshot", "--kubeconfig", str(kubeconfig), "-o", str(out))
    cluster = load_cluster(str(out / "cluster.yaml"))
    assert len(cluster.nodes) == 2 and cluster.nodes.total_gpus == 16
    trace = read_parquet(out / "jobs.parquet")
    rows = {r["job_id"]: r for r in trace.table.to_pylist()}
    assert set(rows) == {"team-a/g", "team-a/small", "team-a/later"}
    assert rows["team-a/g"]["tasks"] == 2 and rows["team-a/g"]["gpu_milli_per_task"] == 4000
    assert rows["team-a/g"]["status"] == "running" and rows["team-a/later"]["status"] == "unknown"


QUEUES = """
quota:
  unknown_group: reject
  orgs:
    research:
      groups:
        team-a: {nominal: 4}
"""


def a_queues_configmap(text: str) -> dict[str, object]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "loadmaster-queues", "namespace": "loadmaster"},
        "data": {"plugins.yaml": text},
    }


def test_quotas_from_the_configmap_replace_the_profiles(api: KubeApiDouble) -> None:
    api.create("configmaps", a_queues_configmap(QUEUES))
    profile = load_profile(api_client(host=api.url), "fair")  # type: ignore[attr-defined]
    quota = next(p for p in profile.plugins if p.name == "quota")
    assert list(quota.args.orgs["research"].groups) == ["team-a"]  # type: ignore[attr-defined]
    assert quota.args.unknown_group == "reject"  # type: ignore[attr-defined]


def test_quota_limits_what_run_binds(api: KubeApiDouble, kubeconfig: Path) -> None:
    populate(api)
    api.create("configmaps", a_queues_configmap(QUEUES))
    invoke("kube", "run", "--kubeconfig", str(kubeconfig), "--profile", "fair", "--max-steps", "1")
    bound_gpus = 4 * len(api.bindings)  # every pod of populate() that can fit asks for 4 GPUs
    assert bound_gpus == 4  # the organisation holds 4 GPUs: the gang (8) waits, the 4-GPU pod runs
    assert api.invalid == []


@pytest.mark.parametrize(
    ("text", "wanted"),
    [
        ("nope: {a: 1}", "no such plugin"),
        ("quota: [1, 2]", "must map plugin names"),
        ("quota: {orgs: {r: {groups: {}}}}", "at least one group"),
    ],
)
def test_a_bad_queues_configmap_is_named_in_the_error(api: KubeApiDouble, text: str, wanted: str) -> None:
    api.create("configmaps", a_queues_configmap(text))
    with pytest.raises(ConfigError, match=wanted) as error:
        load_profile(api_client(host=api.url), "fair")  # type: ignore[attr-defined]
    assert "loadmaster-queues" in str(error.value)


def test_no_configmap_means_the_profile_as_written() -> None:
    assert plugin_args_from(a_queues_configmap("")) == {}


def test_run_schedules_each_scheduler_name_with_its_profile(api: KubeApiDouble, kubeconfig: Path) -> None:
    for i in range(2):
        api.create("nodes", a_node(f"n{i}"))
    mine = a_pod("batch", 4)
    mine["spec"]["schedulerName"] = "loadmaster-batch"
    api.create("pods", mine)
    api.create("pods", a_pod("plain", 4))
    other = a_pod("other", 4)
    other["spec"]["schedulerName"] = "someone-else"
    api.create("pods", other)
    base = ["--kubeconfig", str(kubeconfig), "--queues", ""]
    names = ["--scheduler-name", "loadmaster=binpack", "--scheduler-name", "loadmaster-batch=slurm"]
    invoke("kube", "run", *base, *names, "--max-steps", "1", "--interval", "0")
    assert sorted(key for key, _ in api.bindings) == ["team-a/batch", "team-a/plain"]
    result = runner.invoke(app, ["kube", "dry-run", *base, "--scheduler-name", "loadmaster"])
    assert isinstance(result.exception, ConfigError) and "NAME=PROFILE" in str(result.exception)


def test_a_snapshot_replays_with_the_live_fair_share(
    api: KubeApiDouble, kubeconfig: Path, tmp_path: Path
) -> None:
    """team-a's finished pod held the node for nine hours: replayed with `slurm` and the snapshot's
    usage.json, team-b's job takes the node when team-c's frees it, though team-a's was submitted
    first; without it, team-a's does."""
    now = time.time()
    api.create("nodes", a_node("n0"))
    done = a_pod("earlier", 8)
    done["spec"]["nodeName"] = "n0"
    done["status"] = a_finished_status(now - 3600, now - 10 * 3600)
    api.create("pods", done)
    holding = a_pod("holding", 8, namespace="team-c")
    holding["metadata"]["creationTimestamp"] = utc_stamp(now - 600)
    api.create("pods", holding)
    invoke("kube", "run", "--kubeconfig", str(kubeconfig), "--max-steps", "1", "--interval", "0")
    assert [key for key, _ in api.bindings] == ["team-c/holding"]
    waiting_a, waiting_b = a_pod("a2", 8), a_pod("b1", 8, namespace="team-b")
    waiting_a["metadata"]["creationTimestamp"] = utc_stamp(now - 120)
    waiting_b["metadata"]["creationTimestamp"] = utc_stamp(now - 60)
    api.create("pods", waiting_a)
    api.create("pods", waiting_b)
    out = tmp_path / "snap"
    invoke("kube", "snapshot", "--kubeconfig", str(kubeconfig), "-o", str(out))
    past = load_past_usage(out / "usage.json")
    assert past.usage_gpu_s["user/team-a"] == pytest.approx(
        8 * 9 * 3600 * 0.5 ** (3600 / HALF_LIFE_S), rel=1e-3
    )
    assert past.as_of_s == pytest.approx(600, abs=5)  # seconds after the first submission in the trace
    cluster = load_cluster(str(out / "cluster.yaml"))
    workload = load_trace_workload(out / "jobs.parquet", cluster)
    slurm = [load_profiles()["slurm"]]
    for usage, second in ((past, "team-b/b1"), (None, "team-a/a2")):
        starts = by_id(compare(cluster, workload, slurm, past_usage=usage)[0].result.jobs, "start_s")
        assert sorted(starts, key=lambda job: starts[job])[:2] == ["team-c/holding", second]
    report = tmp_path / "report"
    args = [
        "--cluster",
        str(out / "cluster.yaml"),
        "--trace",
        str(out / "jobs.parquet"),
        "--profiles",
        "slurm",
    ]
    invoke("simulate", *args, "--past-usage", str(out / "usage.json"), "--out", str(report))


def test_a_bad_past_usage_file_is_named(tmp_path: Path) -> None:
    path = tmp_path / "usage.json"
    path.write_text(
        '{"format": 1, "kind": "loadmaster/past-usage", "as_of_s": 0, "usage_gpu_s": {"alice": 1}}'
    )
    with pytest.raises(ConfigError, match=r"usage.json: usage_gpu_s: key 'alice' must start with user/"):
        load_past_usage(path)
    path.write_text("{}")
    with pytest.raises(ConfigError, match=r"usage.json: kind: expected 'loadmaster/past-usage', got None"):
        load_past_usage(path)
    path.write_text('{"format": 1, "kind": "loadmaster/past-usage", "as_of_s": 1700000000}')
    with pytest.raises(ConfigError, match=r"as_of_s: seconds from the trace's first submission.*Unix time\?"):
        load_past_usage(path)
    path.write_bytes(b"\xff\xfe{")
    with pytest.raises(ConfigError, match=r"usage.json: not a text file"):
        load_past_usage(path)


def test_past_usage_follows_the_replays_time() -> None:
    """A replay starts at its first replayed job and may scale the gaps: as_of_s moves with it."""
    report = ReplayReport(origin_s=100.0, time_factor=0.5)
    assert replay_time(report, 700.0) == 300.0
