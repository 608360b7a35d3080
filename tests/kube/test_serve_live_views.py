"""The operator's history and groups views over a live cluster (the API double, telemetry labelled as
the agent labels it): the same views as the demo, from the cluster's informers and its store."""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from kube.test_serve_live import GPUS, get, scheduled, telemetry
from loadmaster.kube.api import api_client
from loadmaster.kube.watch import ClusterWatch
from loadmaster.serve import create_app
from loadmaster.serve.auth import TokenTable
from loadmaster.serve.livecluster import LiveDashboard, LiveTiming
from loadmaster.serve.views import NO_SCHEDULER
from loadmaster_testing.kube_api import KubeApiDouble

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette's TestClient warns about its httpx transport on import
    from fastapi.testclient import TestClient


@pytest.fixture
def live(api: KubeApiDouble) -> Iterator[tuple[LiveDashboard, TestClient]]:
    scheduled(api)
    watch = ClusterWatch(api_client(host=api.url))  # type: ignore[attr-defined]
    watch.list_now()
    watch.start()
    tokens = TokenTable.generate(["team-a", "team-b"], ["operator"])
    board = LiveDashboard(
        watch, telemetry(api), tokens, cluster_name="double", options=LiveTiming(60.0, 3600.0)
    )
    app = create_app(board, run_stepper=False)
    with TestClient(app) as client:
        yield board, client
    watch.stop()


def test_history_and_groups_over_a_live_cluster(live: Any) -> None:
    board, client = live
    get(board, client, "/api/operator/history", "team-a", status=403)
    history = get(board, client, "/api/operator/history", "operator")
    assert history["times_s"][-1] == pytest.approx(board.now_s)
    (pool,) = history["pools"]
    assert pool["gpus"] == 2 * GPUS
    assert pool["allocated"][-1] == 8  # the gang's two 4-GPU pods
    assert pool["queue"][-1] == 0 and history["queue_any_pool"][-1] == 1  # the 40-GPU pod: no pool named
    assert pool["util_pct"][-1] is not None  # the agent's series read back through the store
    groups = get(board, client, "/api/operator/groups", "operator")
    assert groups["quota"] is False and groups["note"] == NO_SCHEDULER
    used = {g["group"]: g for g in groups["groups"]}
    assert sum(g["used"] for g in used.values()) == 8
    assert sum(g["pending_jobs"] for g in used.values()) == 1
