"""The operator's history charts, groups and idle-GPU reconciliation views, their routes, and the
demo's queue from its first minute (issue 21, item 7)."""

from __future__ import annotations

import inspect
import warnings
from collections import Counter
from collections.abc import Iterator

import numpy as np
import pytest

from loadmaster.cli.serve import serve as serve_command
from loadmaster.serve import DemoOptions, build_demo, create_app, views
from loadmaster.serve.demo import DEMO_LOAD, Demo
from loadmaster.serve.live import FREE

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette's TestClient warns about its httpx transport on import
    from fastapi.testclient import TestClient


@pytest.fixture(scope="module")
def demo() -> Demo:
    return build_demo(DemoOptions(history_s=1800.0, load=DEMO_LOAD))


@pytest.fixture(scope="module")
def client(demo: Demo) -> Iterator[TestClient]:
    app = create_app(demo, run_stepper=False)
    with TestClient(app) as c:
        yield c


def _auth(demo: Demo, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {demo.tokens.token_of(name)}"}


def _user(demo: Demo) -> str:
    return next(p.name for _, p in demo.tokens.principals() if not p.is_operator)


def test_history_ends_at_the_cluster_as_it_is_now(demo: Demo) -> None:
    h = views.pool_history(demo)
    assert h["times_s"][-1] == pytest.approx(demo.now_s)
    assert h["times_s"][0] >= demo.oldest_s - h["step_s"]
    assert len(h["times_s"]) <= views.HISTORY_POINTS + 1
    owner = demo.index.flat(demo.sim.owner)
    pool_of_gpu = np.asarray(demo.sim.nodes.pool_index)[demo.index.node]
    held = np.bincount(pool_of_gpu[owner != FREE], minlength=len(demo.sim.nodes.pools))
    waiting = Counter(p.job.pool for p in demo.sim.cluster.pending.values())
    for p, row in enumerate(h["pools"]):
        assert row["pool"] == demo.sim.nodes.pools[p]
        assert len(row["allocated"]) == len(row["util_pct"]) == len(row["queue"]) == len(h["times_s"])
        assert row["allocated"][-1] == held[p]
        assert row["queue"][-1] == waiting[row["pool"]]
        assert all(0 <= a <= row["gpus"] for a in row["allocated"])
        util = [u for u in row["util_pct"] if u is not None]
        assert util and all(0 <= u <= 100 for u in util)
        assert util[-1] == row["util_pct"][-1]  # the newest point has data


def test_history_window_narrows_the_range(demo: Demo) -> None:
    wide, narrow = views.pool_history(demo), views.pool_history(demo, 600.0)
    assert narrow["window_s"] == 600.0 and narrow["times_s"][-1] == wide["times_s"][-1]
    assert len(narrow["times_s"]) < len(wide["times_s"])
    assert narrow["times_s"][0] >= demo.now_s - 600.0


def test_idle_count_is_one_count_reconciled_with_the_reclaim_table(demo: Demo) -> None:
    summary = views.operator_summary(demo)
    report = views.reclaim_view(demo)
    idle = report["idle_now"]
    assert idle["gpus"] == summary["idle_allocated"]["gpus"] == summary["by_state"]["allocated-idle"]
    assert idle["listed"] + idle["not_listed"] == idle["gpus"]
    assert idle["listed"] + idle["listed_not_idle_now"] == report["idle_gpus"]


def test_groups_show_usage_without_a_quota_plugin(demo: Demo) -> None:
    g = views.groups_view(demo)
    assert not g["quota"] and "no quota plugin" in g["note"]
    running = sum(r.job.gpus for r in demo.sim.cluster.running.values())
    assert sum(r["used"] for r in g["groups"]) == pytest.approx(running)
    assert sum(r["pending_jobs"] for r in g["groups"]) == len(demo.sim.cluster.pending)
    assert sum(r["share_pct"] for r in g["groups"]) == pytest.approx(100.0, abs=0.5)
    assert all(r["nominal"] is None and r["borrowed"] is None for r in g["groups"])


def test_groups_show_quota_and_borrowing_under_the_fair_profile() -> None:
    fair = build_demo(DemoOptions(history_s=600.0, profile="fair", warmup_s=13 * 3600.0, days=1.0))
    g = views.groups_view(fair)
    assert g["quota"] and g["note"] is None
    assert [o["org"] for o in g["orgs"]] == ["research"]
    by_group = {r["group"]: r for r in g["groups"]}
    assert by_group["lab-a"]["nominal"] == 48 and by_group["lab-a"]["borrowing_limit"] == 32
    assert by_group["lab-a"]["nominal_share_pct"] == 30.0  # 48 of the organisation's 160
    for row in g["groups"]:
        assert row["org"] == "research"
        assert row["borrowed"] == pytest.approx(max(0.0, row["used"] - row["nominal"]))
        assert row["unused_nominal"] == pytest.approx(max(0.0, row["nominal"] - row["used"]))
        assert row["borrowed"] <= row["borrowing_limit"] + 1e-6  # the quota plugin keeps the limit
    assert g["orgs"][0]["used"] == pytest.approx(sum(r["used"] for r in g["groups"]))


def test_routes_need_an_operator(demo: Demo, client: TestClient) -> None:
    for path in ("/api/operator/history", "/api/operator/history?window_s=600", "/api/operator/groups"):
        assert client.get(path).status_code == 401
        assert client.get(path, headers=_auth(demo, _user(demo))).status_code == 403
        assert client.get(path, headers=_auth(demo, "operator")).status_code == 200
    bad = client.get("/api/operator/history?window_s=-5", headers=_auth(demo, "operator"))
    assert bad.status_code == 422 and "window_s" in bad.text
    body = client.get("/api/operator/history?window_s=600", headers=_auth(demo, "operator")).json()
    assert body["window_s"] == 600.0


def test_the_served_demo_shows_a_queue_with_reasons_from_its_first_minute(demo: Demo) -> None:
    """``serve --demo`` asks DEMO_LOAD; over its first wall minute at 60x (a simulated hour) jobs wait,
    each with a reason, every ten simulated minutes."""
    assert inspect.signature(serve_command).parameters["load"].default == DEMO_LOAD
    operator = next(p for _, p in demo.tokens.principals() if p.is_operator)
    fresh = build_demo(DemoOptions(history_s=600.0, load=DEMO_LOAD))
    for _ in range(7):
        queues = views.queue_view(fresh, operator)["queues"]
        jobs = [j for q in queues for j in q["jobs"]]
        assert jobs, f"nothing waits at t={fresh.now_s:.0f} s"
        assert all(j["reason"] and j["reason"] != "not yet examined by the scheduler" for j in jobs)
        fresh.advance(600.0)
