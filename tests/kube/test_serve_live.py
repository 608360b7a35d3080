"""The dashboard over a live cluster: the API double, scheduled by loadmaster's own ``kube run`` loop,
watched read-only by ClusterWatch (the informers of kube run), with dcgm-style telemetry whose pod
labels map GPUs to pods, jobs and users; the same views and access rules as the demo."""

from __future__ import annotations

import time
import warnings
from collections.abc import Iterator
from typing import Any

import pyarrow as pa
import pytest
from kubernetes import client as k8s

from kube.helpers import a_node, a_pod, a_pod_group, wait_synced
from loadmaster.config import load_profiles
from loadmaster.kube.api import api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.kube.watch import ClusterWatch
from loadmaster.scheduling import Scheduler
from loadmaster.serve import create_app
from loadmaster.serve.auth import TokenTable
from loadmaster.serve.livecluster import LiveDashboard, LiveTiming
from loadmaster.telemetry import SAMPLE_SCHEMA, field_code
from loadmaster.telemetry.memory import MemoryStore
from loadmaster.telemetry.schema import field
from loadmaster.telemetry.store import Series
from loadmaster_testing.kube_api import KubeApiDouble

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette's TestClient warns about its httpx transport on import
    from fastapi.testclient import TestClient


GPUS = 16


def scheduled(api: KubeApiDouble) -> None:
    """Two 16-GPU nodes, a gang of two 4-GPU pods (bound by loadmaster) and a 40-GPU pod that cannot fit."""
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    cluster = KubeCluster(client, Scheduler(load_profiles()["sds"]), "sched")
    cluster.start()
    for i in range(2):
        api.create("nodes", a_node(f"n{i}", gpus=GPUS))
    api.create("podgroups", a_pod_group("g", 2))
    for i in range(2):
        api.create("pods", a_pod(f"g-{i}", 4, "g"))
    api.create("pods", a_pod("big", 40, namespace="team-b"))
    wait_synced(cluster, api.rv)
    cluster.step()
    cluster.stop()


def telemetry(api: KubeApiDouble) -> MemoryStore:
    """GPU series as the agent labels them; the gang's pods on the GPUs the scheduler recorded,
    except g-0, which telemetry shows on the four highest free GPUs of its node (the kubelet's truth)."""
    store = MemoryStore()
    pods = {p["metadata"]["name"]: p for p in api.objects("pods")}
    recorded = {
        name: (
            pods[name]["spec"]["nodeName"],
            [int(g) for g in pods[name]["metadata"]["annotations"]["loadmaster.io/gpus"].split(",")],
        )
        for name in ("g-0", "g-1")
    }
    where: dict[tuple[str, int], str] = {
        (node, g): name for name, (node, gpus) in recorded.items() for g in gpus
    }
    node = recorded["g-0"][0]
    free = [g for g in range(GPUS) if (node, g) not in where][-4:]
    for g in recorded["g-0"][1]:
        del where[(node, g)]
    for g in free:
        where[(node, g)] = "g-0"
    series = []
    for n in range(2):
        for g in range(GPUS):
            labels = {"gpu": str(g), "UUID": f"GPU-{n}-{g}", "device": f"nvidia{g}", "Hostname": f"n{n}"}
            pod = where.get((f"n{n}", g))
            if pod is not None:
                labels |= {"pod": pod, "namespace": "team-a", "container": "main"}
            series.append(Series(n * GPUS + g, "gpu", labels))
    g1_node = recorded["g-1"][0]
    spare = next(g for g in range(GPUS) if (g1_node, g) not in where)
    stale = Series(
        2 * GPUS, "gpu", {"gpu": str(spare), "Hostname": g1_node, "pod": "g-1", "namespace": "team-a"}
    )
    store.register([*series, stale])  # g-1 on another GPU two hours ago: an old label set, not the truth now
    now = time.time()
    old = pa.table({"time_s": [now - 7200.0], "series": [stale.id], "field": [field_code(field("GPU_UTIL"))],
                    "value": [50.0]}, schema=SAMPLE_SCHEMA)  # fmt: skip
    store.append(old)
    # g-0 works; g-1 has held its GPUs idle for the last 40 minutes (the reclaim table's case)
    util = field_code(field("GPU_UTIL"))
    rows = [(now - 60.0 * k, s.id, util, 95.0 if s.labels.get("pod") == "g-0" else 0.0)
            for k in range(40) for s in series]  # fmt: skip
    store.append(
        pa.table(dict(zip(SAMPLE_SCHEMA.names, zip(*rows, strict=True), strict=True)), schema=SAMPLE_SCHEMA)
    )
    return store


@pytest.fixture
def live(api: KubeApiDouble) -> Iterator[tuple[LiveDashboard, TestClient, KubeApiDouble]]:
    scheduled(api)
    watch = ClusterWatch(api_client(host=api.url))  # type: ignore[attr-defined]
    watch.list_now()
    watch.start()
    tokens = TokenTable.generate(["team-a", "team-b"], ["operator"])
    board = LiveDashboard(
        watch, telemetry(api), tokens, cluster_name="double", options=LiveTiming(60.0, 3600.0)
    )
    with TestClient(create_app(board, run_stepper=False)) as client:
        yield board, client, api
    watch.stop()


def get(board: LiveDashboard, client: TestClient, path: str, who: str, status: int = 200) -> Any:
    response = client.get(path, headers={"Authorization": f"Bearer {board.tokens.token_of(who)}"})  # type: ignore[attr-defined]
    assert response.status_code == status, response.text
    return response.json()


def test_tiles_show_each_gpu_with_its_pods_job_and_owner(live: Any) -> None:
    board, client, _ = live
    snap = get(board, client, "/api/cluster?metric=util", "team-a")
    owners = snap["owners"]
    slot = owners["job"].index("team-a/g")
    assert owners["user"][slot] == "team-a" and owners["mine"][slot] is True
    held = [i for i, o in enumerate(snap["gpus"]["owner"]) if o == slot]
    assert len(held) == 8
    names = snap["nodes"]["name"]
    first = [sum(snap["nodes"]["gpus"][:k]) for k in range(len(names))]
    pods = {p["metadata"]["name"]: p for p in live[2].objects("pods")}
    node_of_g0 = names.index(pods["g-0"]["spec"]["nodeName"])
    telemetry_gpus = {int(s.labels["gpu"]) for s in board.store.series(pod="g-0")}  # the kubelet's truth
    on_node = {i - first[node_of_g0] for i in held if first[node_of_g0] <= i < first[node_of_g0] + GPUS}
    assert telemetry_gpus <= on_node and len(telemetry_gpus) == 4
    recorded = {int(g) for g in pods["g-0"]["metadata"]["annotations"]["loadmaster.io/gpus"].split(",")}
    assert not recorded & telemetry_gpus and not recorded <= on_node - telemetry_gpus
    assert sorted(snap["gpus"]["value"][i] for i in held) == [0] * 4 + [95] * 4
    other = get(board, client, "/api/cluster?metric=util", "team-b")["owners"]
    assert "team-a/g" not in other["job"] and "others" in other["job"]  # the same access rules as the demo


def test_job_pages_queue_reasons_and_access(live: Any) -> None:
    board, client, _ = live
    job = get(board, client, "/api/jobs/team-a/g", "team-a")
    assert job["state"] == "running" and len(job["placements"]) == 2
    get(board, client, "/api/jobs/team-a/g", "team-b", status=403)
    queue = get(board, client, "/api/queue", "operator")["queues"]
    waiting = {j["id"]: j for q in queue for j in q["jobs"]}
    assert "team-b/big" in waiting and waiting["team-b/big"]["reason"]
    assert waiting["team-b/big"]["reason"] != "not yet examined by the scheduler"
    found = get(board, client, "/api/jobs/team-a/g/findings", "team-a")
    assert found["job"] == "team-a/g" and isinstance(found["findings"], list)
    series = board.gpu_series_of("team-a/g")
    assert sorted(s.labels["pod"] for s in series) == ["g-0"] * 4 + ["g-1"] * 4
    assert get(board, client, "/api/operator/summary", "operator")["gpus"] == 2 * GPUS
    reclaim = get(board, client, "/api/operator/reclaim", "operator")
    (row,) = reclaim["jobs"]
    assert row["job"] == "team-a/g" and row["user"] == "team-a" and len(row["idle"]) == 4
    assert "shrink" in row["action"] and row["idle_for_s"] >= 1800 and row["wasted_gpu_hours"] > 0


def test_a_finished_job_leaves_its_gpus_free(live: Any) -> None:
    board, client, api = live
    core = k8s.CoreV1Api(api_client(host=api.url))  # type: ignore[attr-defined]
    for name in ("g-0", "g-1"):
        core.delete_namespaced_pod(name, "team-a")
    deadline = time.monotonic() + 10
    while "team-a/g" in board.sim.cluster.running and time.monotonic() < deadline:
        board.tick(0.5)
        time.sleep(0.05)
    assert "team-a/g" not in board.sim.cluster.running
    record = board.sim.records["team-a/g"]
    assert record.end_s is not None and record.end_s >= record.start_s
    job = get(board, client, "/api/jobs/team-a/g", "team-a")
    assert job["state"] == "finished"
