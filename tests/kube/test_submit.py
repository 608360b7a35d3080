"""`loadmaster submit | queue | jobs | status | cancel | logs` on the API double, with the official client.

The Job controller is the double of :mod:`loadmaster_testing.kube_jobs` (no
controller-manager runs here); scheduling is ``KubeCluster``, the same loop
``loadmaster kube run`` runs.
"""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from typer.testing import CliRunner

from kube.helpers import a_node, kubeconfig_for
from loadmaster.cli import app
from loadmaster.config import load_profiles
from loadmaster.kube import translate as tr
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.model.cuda import DriverVersion, driver_labels
from loadmaster.scheduling import PluginSpec, Scheduler, build_profile
from loadmaster_testing.kube_api import KubeApiDouble
from loadmaster_testing.kube_jobs import JobControllerDouble

runner = CliRunner()
JOB = "train"
KEY = f"team-a/{JOB}"


@pytest.fixture
def kubeconfig(api: KubeApiDouble, tmp_path: Path) -> Path:
    return kubeconfig_for(api, tmp_path / "kubeconfig")


def as_user(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kubeconfig: Path, user: str) -> None:
    """Who runs the next commands: an identity file, as docs/researchers.md tells a user to write."""
    path = tmp_path / f"{user}.yaml"
    path.write_text(
        f"user: {user}\ngroup: team-a\nkubeconfig: {kubeconfig}\ndashboard: http://dash.example\n"
        "image_lookup: false\n"  # no registry here: tests/kube/test_registry.py covers the lookup
    )
    monkeypatch.setenv("LOADMASTER_CONFIG", str(path))


@pytest.fixture
def alice(monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kubeconfig: Path) -> None:
    as_user(monkeypatch, tmp_path, kubeconfig, "alice")


def invoke(*args: str, code: int = 0) -> str:
    result = runner.invoke(app, list(args))
    assert result.exit_code == code, result.output + repr(result.exception)
    return result.output


def scheduler(api: KubeApiDouble, plugins: tuple[str, ...] = ()) -> KubeCluster:
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    chosen = (
        build_profile(
            "t",
            ["allocate", "backfill"] if "backfill" in plugins else ["allocate"],
            [PluginSpec(p, {}) for p in plugins],
        )
        if plugins
        else load_profiles()["fifo"]
    )
    lease = LeaderElector(client, "s", clock=api.clock)
    return KubeCluster(client, Scheduler(chosen), "s", lease=lease, clock=api.clock)


def step(api: KubeApiDouble, plugins: tuple[str, ...] = ()) -> list[tuple[str, str]]:
    """Run the Job controller, then one scheduling cycle; the binds it made."""
    JobControllerDouble(api).reconcile()
    cluster = scheduler(api, plugins)
    cluster.list_now()
    return cluster.step().bound


def ours(api: KubeApiDouble, resource: str) -> list[str]:
    return sorted(
        o["metadata"]["name"]
        for o in api.objects(resource)
        if (o["metadata"].get("labels") or {}).get("loadmaster.io/job") == JOB
    )


def submit_gang(tasks: int = 4, gpus: int = 4, *extra: str) -> str:
    return invoke(
        "submit", "--name", JOB, "-n", str(tasks), "--gpus-per-task", str(gpus), "--image", "pytorch:2.3",
        "-t", "2:00:00", *extra, "--", "torchrun", "train.py",
    )  # fmt: skip


def test_submit_creates_exactly_the_documented_objects(api: KubeApiDouble, alice: None) -> None:
    for i in range(2):
        api.create("nodes", a_node(f"n{i}"))
    out = submit_gang(2, 8, "-e", "WANDB_MODE=offline")
    assert f"Submitted {KEY}: 2 task(s) x 8 GPU(s)" in out
    assert {r: ours(api, r) for r in ("podgroups", "services", "jobs", "pods")} == {
        "podgroups": [JOB], "services": [JOB], "jobs": [JOB], "pods": [],
    }  # fmt: skip
    assert api.invalid == []
    group = api.get("podgroups", KEY)
    service = api.get("services", KEY)
    job = api.get("jobs", KEY)
    assert group is not None and service is not None and job is not None
    assert group["spec"] == {"minMember": 2}
    assert group["metadata"]["labels"] == {
        "loadmaster.io/job": JOB, "loadmaster.io/user": "alice", "loadmaster.io/group": "team-a",
        "loadmaster.io/queue": "default",
    }  # fmt: skip
    assert service["spec"]["clusterIP"] == "None" and service["spec"]["selector"] == {
        "loadmaster.io/job": JOB
    }
    spec = job["spec"]
    assert (spec["completionMode"], spec["completions"], spec["parallelism"]) == ("Indexed", 2, 2)
    pod = spec["template"]["spec"]
    assert pod["schedulerName"] == "loadmaster" and pod["subdomain"] == JOB
    assert pod["activeDeadlineSeconds"] == 7200
    env = {e["name"]: e.get("value", e.get("valueFrom")) for e in pod["containers"][0]["env"]}
    assert env["MASTER_ADDR"] == "train-0.train" and env["MASTER_PORT"] == "29500"
    assert env["WORLD_SIZE"] == "2" and env["PET_NNODES"] == "2" and env["PET_NPROC_PER_NODE"] == "8"
    index = {"fieldRef": {"fieldPath": "metadata.annotations['batch.kubernetes.io/job-completion-index']"}}
    assert env["RANK"] == env["NODE_RANK"] == env["PET_NODE_RANK"] == index
    assert env["WANDB_MODE"] == "offline"
    assert pod["containers"][0]["command"] == ["torchrun", "train.py"]
    assert spec["template"]["metadata"]["labels"]["scheduling.x-k8s.io/pod-group"] == JOB


def test_a_four_task_gang_is_scheduled_as_one_and_lost_pods_come_back(
    api: KubeApiDouble, alice: None
) -> None:
    for i in range(2):
        api.create("nodes", a_node(f"n{i}"))
    submit_gang(4, 4)
    cluster = scheduler(api)
    cluster.list_now()
    assert cluster.step().bound == []  # no pods before the Job controller makes them
    bound = step(api)
    assert len(bound) == 4 and {n for _, n in bound} == {"n0", "n1"}
    pods = api.objects("pods")
    assert sorted(p["spec"]["hostname"] for p in pods) == [f"train-{i}" for i in range(4)]
    assert all(p["spec"]["containers"][0]["env"][-1]["name"] == "JOB_COMPLETION_INDEX" for p in pods)
    status = json.loads(invoke("status", JOB, "--json"))
    assert status["state"] == "running" and status["gpus"] == 16 and status["position"] is None
    assert sorted(t["rank"] for t in status["task_views"]) == [0, 1, 2, 3]
    assert all(t["node"] and len(t["gpus"].split(",")) == 4 for t in status["task_views"])
    # A pod lost (a node drained, a gang rolled back) is recreated by the Job controller for its index.
    lost = next(
        p for p in pods if p["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"] == "2"
    )
    with api.lock:
        api.delete("pods", f"team-a/{lost['metadata']['name']}")
    created = JobControllerDouble(api).reconcile()
    assert len(created) == 1 and created[0].startswith("team-a/train-2-")
    assert api.invalid == []


def test_cancel_removes_everything_it_created(api: KubeApiDouble, alice: None) -> None:
    api.create("nodes", a_node("n0"))
    submit_gang(2, 4)
    step(api)
    assert len(ours(api, "pods")) == 2
    out = invoke("cancel", JOB)
    assert "deleted Job train, Service train, PodGroup train, Pod train-0-" in out
    assert all(ours(api, r) == [] for r in ("podgroups", "services", "jobs"))
    # Pods deleted with a grace period stay Terminating until it passes, as the API server keeps them.
    assert all(
        api.get("pods", f"team-a/{name}")["metadata"].get("deletionTimestamp") for name in ours(api, "pods")
    )  # type: ignore[index]
    JobControllerDouble(api).reconcile()  # nothing comes back: the Job is gone
    assert all(
        api.get("pods", f"team-a/{name}")["metadata"].get("deletionTimestamp") for name in ours(api, "pods")
    )  # type: ignore[index]


def test_another_user_can_neither_read_nor_cancel_the_job(
    api: KubeApiDouble, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kubeconfig: Path
) -> None:
    api.create("nodes", a_node("n0"))
    as_user(monkeypatch, tmp_path, kubeconfig, "alice")
    submit_gang(2, 4)  # runs
    invoke(
        "submit", "--name", "xl", "--gpus-per-task", "8", "--image", "x", "--", "b"
    )  # waits (same second: ids order)
    step(api)
    as_user(monkeypatch, tmp_path, kubeconfig, "bob")
    for command in (("status", JOB), ("cancel", JOB), ("logs", JOB)):
        result = runner.invoke(app, list(command))
        assert result.exit_code != 0
        assert "belongs to another user" in str(result.exception), command
    assert ours(api, "jobs") == [JOB] and len(ours(api, "pods")) == 2
    assert len(api.bindings) == 2
    queue = json.loads(invoke("queue", "--json"))
    assert [(j["id"], j["user"], j["reason"]) for j in queue["jobs"]] == [("(other)", "(other)", "")]
    assert json.loads(invoke("queue", "--me", "--json"))["jobs"] == []
    assert json.loads(invoke("jobs", "--json"))["jobs"] == []


def test_submit_refuses_what_can_never_run_and_creates_nothing(api: KubeApiDouble, alice: None) -> None:
    old = a_node("old")
    old["metadata"]["labels"].update(driver_labels(DriverVersion.parse("470.82.01")))
    api.create("nodes", old)
    result = runner.invoke(app, ["submit", "--image", "x", "--cuda", "13.0", "--", "python", "a.py"])
    assert result.exit_code != 0
    assert "cannot run on any node" in str(result.exception)
    assert "CUDA 13.0" in str(result.exception) and "580.65.06" in str(result.exception)
    assert api.objects("jobs") == [] and api.objects("podgroups") == [] and api.objects("services") == []
    big = runner.invoke(app, ["submit", "--image", "x", "--gpus-per-task", "16", "--", "python", "a.py"])
    assert big.exit_code != 0 and "gpu: want 16" in str(big.exception)


def test_queue_shows_place_reason_and_the_reserved_start(api: KubeApiDouble, alice: None) -> None:
    api.create("nodes", a_node("n0"))
    invoke("submit", "--name", "first", "--gpus-per-task", "8", "--image", "x", "-t", "60", "--", "a")
    invoke("submit", "--name", "second", "--gpus-per-task", "8", "--image", "x", "--", "b")
    invoke("submit", "--name", "third", "-p", "small", "--gpus-per-task", "8", "--image", "x", "--", "c")
    step(api, ("fifo", "gang", "first-fit", "backfill"))
    step(api, ("fifo", "gang", "first-fit", "backfill"))
    queue = json.loads(invoke("queue", "--json"))
    rows = {j["name"]: j for j in queue["jobs"]}
    assert set(rows) == {"second", "third"}
    assert (rows["second"]["queue"], rows["second"]["position"]) == ("default", 1)
    assert (rows["third"]["queue"], rows["third"]["position"]) == ("small", 1)
    assert rows["second"]["estimated_start_s"] == 1_700_000_000 + 3600
    assert "reserved from" in rows["second"]["reason"]
    table = invoke("queue")
    assert "second" in table and "reserved from" in table
    text = invoke("status", "second")
    assert "waits: #1 in queue default" in text and "estimated start: " in text
    assert "dashboard: http://dash.example/#job=team-a%2Fsecond" in text  # the job's own page


def test_logs_of_a_rank(api: KubeApiDouble, alice: None) -> None:
    api.create("nodes", a_node("n0"))
    submit_gang(2, 4)
    step(api)
    for pod in api.objects("pods"):
        rank = pod["metadata"]["annotations"]["batch.kubernetes.io/job-completion-index"]
        api.logs[f"team-a/{pod['metadata']['name']}"] = f"hello from rank {rank}\n"
    assert invoke("logs", JOB, "--rank", "1") == "hello from rank 1\n"
    assert invoke("logs", JOB) == "hello from rank 0\n"
    assert invoke("logs", JOB, "--follow") == "hello from rank 0\n"  # the stream ends when the pod's log does
    result = runner.invoke(app, ["logs", JOB, "--rank", "5"])
    assert result.exit_code != 0 and "no pod of rank 5" in str(result.exception)


def test_an_interactive_session_takes_a_mig_slice_in_the_interactive_pool(
    api: KubeApiDouble, alice: None
) -> None:
    node = a_node("i0", gpus=0, pool="interactive")
    for resources in (node["status"]["allocatable"], node["status"]["capacity"]):
        resources.update({"nvidia.com/mig-3g.40gb": "2", "nvidia.com/mig-1g.10gb": "7"})
    api.create("nodes", node)
    out = invoke("submit", "--interactive", "--name", "nb")
    job = api.get("jobs", "team-a/nb")
    assert job is not None
    template = job["spec"]["template"]
    resources = template["spec"]["containers"][0]["resources"]
    assert resources["limits"] == {"nvidia.com/mig-1g.10gb": "1"}
    assert template["spec"]["nodeSelector"] == {"loadmaster.io/pool": "interactive"}
    assert template["spec"]["activeDeadlineSeconds"] == 4 * 3600
    assert template["metadata"]["labels"]["loadmaster.io/interactive"] == "true"
    assert template["metadata"]["annotations"]["loadmaster.io/reclaim"] == "first"
    assert "port-forward" in out and "8888:8888" in out and "MIG slice 1g.10gb" in out
    assert [node for _, node in step(api)] == ["i0"]  # KubeCluster places MIG pods (docs/kubernetes.md)
    status = json.loads(invoke("status", "nb", "--json"))
    assert status["interactive"] and status["state"] == "running"
    # the scheduler's job carries the mark that makes the idle-reclaim policy take it first
    pods = [p for p in api.objects("pods") if p["metadata"]["labels"].get("loadmaster.io/interactive")]
    assert tr.job_from("team-a/nb", pods, None, 3600.0).reclaim_first


def test_dry_run_prints_valid_manifests_and_needs_no_cluster(alice: None) -> None:
    out = invoke(
        "submit", "--dry-run", "-n", "2", "--image", "nvidia/cuda:12.4.1-runtime", "--", "python", "a.py"
    )
    docs = [d for d in yaml.safe_load_all(out) if d]
    assert [d["kind"] for d in docs] == ["PodGroup", "Service", "Job"]
    assert docs[2]["spec"]["template"]["metadata"]["annotations"] == {"loadmaster.io/cuda": "12.4"}
    assert "&id" not in out  # no YAML anchors: kubectl users read these


def test_job_file_errors_name_file_line_and_field(alice: None, tmp_path: Path) -> None:
    path = tmp_path / "job.yaml"
    path.write_text("tasks: 2\nimage: x\ngpus_per_task: 2\nqueue: Big_Queue\n")
    result = runner.invoke(app, ["submit", str(path), "--dry-run"])
    assert result.exit_code != 0
    assert f"{path}:4: queue:" in str(result.exception)
    path.write_text("tasks: 2\nimage: x\ngpu: 2\n")
    result = runner.invoke(app, ["submit", str(path), "--dry-run"])
    assert f"{path}:3: gpu: unknown field; allowed: name, tasks, gpus_per_task" in str(result.exception)
    path.write_text("tasks: 2\nimage: x\ncommand: [python, train.py]\n")
    out = invoke("submit", str(path), "--dry-run", "-n", "3")
    assert next(d for d in yaml.safe_load_all(out) if d)["spec"] == {"minMember": 3}


GROUPS = {"pods": "", "services": "", "nodes": "", "jobs": "batch", "podgroups": "scheduling.x-k8s.io"}


def researcher_rules() -> set[tuple[str, str, str]]:
    docs = yaml.safe_load_all(
        (Path(__file__).resolve().parents[2] / "deploy" / "rbac-researcher.yaml").read_text()
    )
    return {
        (group, resource, verb)
        for doc in docs
        if doc["kind"] == "ClusterRole"
        for rule in doc["rules"]
        for group in rule["apiGroups"]
        for resource in rule["resources"]
        for verb in rule["verbs"]
    }


def test_the_researcher_roles_allow_exactly_what_the_commands_call(api: KubeApiDouble, alice: None) -> None:
    api.create("nodes", a_node("n0"))
    submit_gang(2, 4)
    JobControllerDouble(api).reconcile()
    api.requests.clear()  # from here on, only the researcher's commands
    invoke("submit", "--name", "other", "--image", "x", "--", "a")
    for command in (("queue",), ("jobs",), ("status", JOB), ("logs", JOB), ("cancel", JOB)):
        invoke(*command)
    called = {(GROUPS[r.split("/")[0]], r, verb) for verb, r in api.requests}
    assert called == researcher_rules()


def test_kubecluster_keeps_a_cuda_job_off_old_drivers(api: KubeApiDouble, alice: None) -> None:
    for name, driver in (("a-old", "470.82.01"), ("b-new", "550.54.15")):
        node = a_node(name)
        node["metadata"]["labels"].update(driver_labels(DriverVersion.parse(driver)))
        api.create("nodes", node)
    invoke(
        "submit", "--name", "cu124", "--gpus-per-task", "8", "--image", "nvidia/cuda:12.4.1-base", "--", "a"
    )
    invoke("submit", "--name", "cu118", "--gpus-per-task", "8", "--cuda", "11.8", "--image", "x", "--", "b")
    invoke("submit", "--name", "cu124b", "--gpus-per-task", "8", "--cuda", "12.4", "--image", "x", "--", "c")
    bound = dict(
        (key.split("/")[1].rsplit("-", 2)[0], node)
        for key, node in step(api, ("fifo", "gang", "cuda-compat", "first-fit"))
    )
    assert bound == {"cu118": "a-old", "cu124": "b-new"}
    waiting = json.loads(invoke("status", "cu124b", "--json"))
    assert "driver >= 525.60.13 for CUDA 12.4" in waiting["reason"]


def test_a_name_clash_is_refused_and_leaves_the_first_job_alone(api: KubeApiDouble, alice: None) -> None:
    api.create("nodes", a_node("n0"))
    submit_gang(1, 4)
    result = runner.invoke(app, ["submit", "--name", JOB, "--image", "y", "--", "b"])
    assert result.exit_code != 0
    assert "could not create PodGroup team-a/train: 409" in str(result.exception)
    assert "choose another --name" in str(result.exception)
    assert {r: ours(api, r) for r in ("podgroups", "services", "jobs")} == {
        "podgroups": [JOB],
        "services": [JOB],
        "jobs": [JOB],
    }
    job = api.get("jobs", KEY)
    assert job is not None and job["spec"]["template"]["spec"]["containers"][0]["image"] == "pytorch:2.3"


def test_a_failed_submission_undoes_only_what_it_created(api: KubeApiDouble, alice: None) -> None:
    api.create("nodes", a_node("n0"))
    service = {
        "apiVersion": "v1",
        "kind": "Service",
        "metadata": {"name": JOB},
        "spec": {"clusterIP": "None"},
    }
    api.create("services", service, namespace="team-a")  # someone else's Service of that name
    result = runner.invoke(app, ["submit", "--name", JOB, "--image", "y", "--", "b"])
    assert "could not create Service team-a/train: 409" in str(result.exception)
    assert api.objects("podgroups") == [] and api.objects("jobs") == []
    assert api.get("services", KEY) is not None


def test_status_shows_what_the_kubelet_says_of_a_task(api: KubeApiDouble, alice: None) -> None:
    api.create("nodes", a_node("n0"))
    submit_gang(2, 4)
    step(api)
    pods = sorted(api.objects("pods"), key=lambda p: p["metadata"]["name"])
    pulling = {"reason": "ImagePullBackOff", "message": 'Back-off pulling image "pytorch:2.3"'}
    states = ({"waiting": pulling}, {"terminated": {"reason": "Error", "exitCode": 1}})
    with api.lock:
        for pod, state in zip(pods, states, strict=True):
            container = {"name": "task", "image": "pytorch:2.3", "imageID": "", "ready": False}
            status = {"containerStatuses": [{**container, "restartCount": 0, "state": state}]}
            api.patch("pods", f"team-a/{pod['metadata']['name']}", {"status": status})
    text = invoke("status", JOB)
    assert 'GPUs 0,1,2,3 (ImagePullBackOff: Back-off pulling image "pytorch:2.3")' in text
    assert "rank 1: train-1-00001 Running n0 GPUs 4,5,6,7 (Error (exit 1))" in text


def test_torchrun_reads_its_arguments_from_the_environment_submit_writes(alice: None) -> None:
    """torchrun's parser (torch/distributed/run.py) takes every argument from ``PET_<NAME>`` when it
    is not given; with the default static rendezvous, a bare ``torchrun train.py`` joins the job."""
    from torch.distributed.run import get_args_parser  # noqa: PLC0415 - torch only for this test

    out = invoke(
        "submit", "--dry-run", "--name", "llm", "-N", "2", "--gpus-per-task", "8", "--image", "x", "--", "a"
    )
    job = [d for d in yaml.safe_load_all(out) if d][2]
    env: dict[str, str] = {}
    for item in job["spec"]["template"]["spec"]["containers"][0]["env"]:
        if "value" in item:
            env[item["name"]] = item["value"]
        else:  # the downward API: the completion index of task 1
            assert item["valueFrom"]["fieldRef"]["fieldPath"].endswith(
                "['batch.kubernetes.io/job-completion-index']"
            )
            env[item["name"]] = "1"
    with pytest.MonkeyPatch.context() as patch:
        for key, value in env.items():
            patch.setenv(key, value)
        args = get_args_parser().parse_args(["train.py"])
    assert (args.nnodes, args.nproc_per_node, args.node_rank) == ("2", "8", 1)
    assert (args.master_addr, args.master_port, args.rdzv_backend) == ("llm-0.llm", 29500, "static")


def test_the_five_commands_of_docs_researchers(
    api: KubeApiDouble, monkeypatch: pytest.MonkeyPatch, tmp_path: Path, kubeconfig: Path
) -> None:
    """docs/researchers.md: identity file, submit a 2-node job, status, logs (the scheduler runs between)."""
    home = tmp_path / "home"
    (home / ".kube").mkdir(parents=True)
    (home / ".kube" / "config").write_text(kubeconfig.read_text())
    monkeypatch.setenv("HOME", str(home))
    monkeypatch.delenv("KUBECONFIG", raising=False)
    monkeypatch.delenv("LOADMASTER_CONFIG", raising=False)
    monkeypatch.delenv("XDG_CONFIG_HOME", raising=False)
    (home / ".config" / "loadmaster").mkdir(parents=True)
    (home / ".config" / "loadmaster" / "config.yaml").write_text("user: alice\ngroup: team-a\n")
    for i in range(2):
        api.create("nodes", a_node(f"n{i}"))
    image = "nvcr.io/nvidia/pytorch:24.05-py3"
    out = invoke(
        "submit",
        "-N",
        "2",
        "--gpus-per-task",
        "8",
        "--image",
        image,
        "-t",
        "4:00:00",
        "--",
        "torchrun",
        "train.py",
    )
    name = out.split("Submitted team-a/")[1].split(":")[0]
    assert name.startswith("alice-torchrun-")
    assert "pending" in invoke("status", name)
    bound = step(api)
    assert sorted(node for _, node in bound) == ["n0", "n1"]
    assert f"team-a/{name}  running" in invoke("status", name)
    for pod in api.objects("pods"):
        api.logs[f"team-a/{pod['metadata']['name']}"] = "epoch 1\n"
    assert invoke("logs", name, "--rank", "0", "-f") == "epoch 1\n"
