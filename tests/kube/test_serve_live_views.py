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
from loadmaster.serve.livecluster import LIVE_FIELDS, LiveDashboard, LiveTiming
from loadmaster.serve.views import NO_SCHEDULER
from loadmaster.telemetry import field
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


class CountingStore:
    """A store that counts the reads of newest values (Prometheus's instant queries in production)."""

    def __init__(self, inner: Any) -> None:
        self.inner = inner
        self.latest_calls = 0

    def __getattr__(self, name: str) -> Any:
        return getattr(self.inner, name)

    def latest(self, field: Any, at_s: float | None = None) -> dict[int, float]:
        self.latest_calls += 1
        return dict(self.inner.latest(field, at_s))


def test_the_tiles_come_from_the_last_refresh_not_from_a_query_per_request(api: KubeApiDouble) -> None:
    """A snapshot request reads no telemetry store: the refresh read each tile field once, off the
    request path, and the values it serves are the store's newest."""
    scheduled(api)
    watch = ClusterWatch(api_client(host=api.url))  # type: ignore[attr-defined]
    watch.list_now()
    watch.start()
    store = CountingStore(telemetry(api))
    tokens = TokenTable.generate(["team-a"], ["operator"])
    clock = [0.0]
    board = LiveDashboard(watch, store, tokens, options=LiveTiming(60.0, 3600.0), clock=lambda: clock[0])  # type: ignore[arg-type]
    try:
        assert store.latest_calls == len(LIVE_FIELDS)
        with TestClient(create_app(board, run_stepper=False)) as client:
            for metric in ("util", "power", "memory"):
                get(board, client, f"/api/cluster?metric={metric}", "operator")
            snap = get(board, client, "/api/cluster?metric=util", "team-a")
            assert store.latest_calls == len(LIVE_FIELDS)
            newest = store.inner.latest(field("GPU_UTIL"))
            want = [-1 if s < 0 else round(newest.get(int(s), -1)) for s in board.telemetry.series_of_gpu]
            assert snap["gpus"]["value"] == want and max(want) > 0
            board.refresh()  # within series_refresh_s: the feed only
            assert store.latest_calls == len(LIVE_FIELDS)
            clock[0] = board.series_refresh_s
            board.refresh()
            assert store.latest_calls == 2 * len(LIVE_FIELDS)
    finally:
        watch.stop()
