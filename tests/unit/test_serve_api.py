"""The dashboard API over a demo cluster: endpoints, payload shapes, tokens and roles, demo stepping."""

from __future__ import annotations

from typing import Any

import pytest

from loadmaster.serve import DemoOptions, build_demo, create_app
from loadmaster.serve.auth import TokenTable
from loadmaster.serve.demo import Demo
from serve_demo import TestClient, auth, demo_fixtures

demo, client = demo_fixtures()


def _users(demo: Demo) -> list[str]:
    return [p.name for _, p in demo.tokens.principals() if not p.is_operator]


def _get(client: TestClient, path: str, headers: dict[str, str], status: int = 200) -> Any:
    response = client.get(path, headers=headers)
    assert response.status_code == status, response.text
    return response.json()


def test_health_needs_no_token(client: TestClient) -> None:
    assert client.get("/api/health").json() == {"ok": True}


@pytest.mark.parametrize(
    "path",
    [
        "/api/me",
        "/api/cluster",
        "/api/nodes",
        "/api/jobs",
        "/api/queue",
        "/api/operator/summary",
        "/api/operator/reclaim",
        "/api/time",
    ],
)
@pytest.mark.parametrize("header", [None, "Bearer nope", "Basic abc"])
def test_every_api_route_needs_a_valid_token(client: TestClient, path: str, header: str | None) -> None:
    headers = {"Authorization": header} if header else {}
    response = client.get(path, headers=headers)
    assert response.status_code == 401
    assert response.headers["WWW-Authenticate"] == "Bearer"


def test_snapshot_is_columnar_with_one_entry_per_gpu(client: TestClient, demo: Demo) -> None:
    snap = _get(client, "/api/cluster?metric=temp", auth(demo, "operator"))
    gpus = demo.sim.nodes.total_gpus
    assert snap["gpus"]["count"] == gpus
    assert len(snap["gpus"]["state"]) == len(snap["gpus"]["badges"]) == gpus
    assert len(snap["gpus"]["owner"]) == len(snap["gpus"]["value"]) == gpus
    assert sum(snap["nodes"]["gpus"]) == gpus
    assert set(snap["gpus"]["state"]) <= set("0123")
    assert snap["states"] == ["free", "allocated", "allocated-idle", "unhealthy"]
    assert snap["metric"]["key"] == "temp" and snap["metric"]["unit"] == "C"
    allocated = sum(1 for s in snap["gpus"]["state"] if s in "12")
    owned = sum(1 for o in snap["gpus"]["owner"] if o >= 0)
    assert allocated <= owned  # unhealthy GPUs may be owned too
    assert max(snap["gpus"]["owner"]) < len(snap["owners"]["job"])
    assert "others" not in snap["owners"]["job"]  # an operator sees every job


def test_unknown_metric_is_404(client: TestClient, demo: Demo) -> None:
    body = _get(client, "/api/cluster?metric=nope", auth(demo, "operator"), status=404)
    assert "known: util" in body["detail"]


def test_user_sees_others_only_in_aggregate(client: TestClient, demo: Demo) -> None:
    user = _users(demo)[0]
    snap = _get(client, "/api/cluster", auth(demo, user))
    owners = snap["owners"]
    assert set(owners["user"]) <= {user, "others"}
    assert "others" in owners["job"] and owners["hidden_jobs"] > 0
    jobs = _get(client, "/api/jobs?scope=all", auth(demo, user))
    assert {j["user"] for j in jobs["jobs"]} == {user}
    assert jobs["others"]["running_jobs"] > 0 and jobs["others"]["users"] > 0
    queue = _get(client, "/api/queue", auth(demo, user))
    assert all(j["user"] == user for q in queue["queues"] for j in q["jobs"])


def test_job_details_are_the_owners_or_an_operators(client: TestClient, demo: Demo) -> None:
    user = _users(demo)[0]
    running = list(demo.sim.cluster.running.values())
    own = next(r.job.id for r in running if r.job.user == user)
    other = next(r.job.id for r in running if r.job.user != user)
    mine = _get(client, f"/api/jobs/{own}", auth(demo, user))
    assert mine["state"] == "running" and mine["placements"]
    _get(client, f"/api/jobs/{other}", auth(demo, user), status=403)
    _get(client, f"/api/jobs/{other}/telemetry", auth(demo, user), status=403)
    _get(client, f"/api/jobs/{other}", auth(demo, "operator"))
    _get(client, "/api/jobs/j999999", auth(demo, "operator"), status=404)


def test_job_telemetry_is_a_rank_by_time_matrix(client: TestClient, demo: Demo) -> None:
    job = max(demo.sim.cluster.running.values(), key=lambda r: r.job.gpus).job
    body = _get(client, f"/api/jobs/{job.id}/telemetry?metric=util", auth(demo, "operator"))
    assert len(body["ranks"]) == int(job.gpus)
    assert len(body["values"]) == len(body["ranks"])
    assert all(len(row) == len(body["times_s"]) for row in body["values"])
    assert any(v is not None for row in body["values"] for v in row)


def test_operator_endpoints_refuse_users(client: TestClient, demo: Demo) -> None:
    user = _users(demo)[0]
    _get(client, "/api/operator/summary", auth(demo, user), status=403)
    response = client.post("/api/operator/speed", json={"speed": 5}, headers=auth(demo, user))
    assert response.status_code == 403
    summary = _get(client, "/api/operator/summary", auth(demo, "operator"))
    assert sum(summary["by_state"].values()) == demo.sim.nodes.total_gpus
    assert {p["pool"] for p in summary["pools"]} == set(demo.sim.nodes.pools)
    assert summary["idle_allocated"]["gpus"] == summary["by_state"]["allocated-idle"]


def test_job_findings_follow_the_jobs_access_rules(client: TestClient, demo: Demo) -> None:
    user = _users(demo)[0]
    running = list(demo.sim.cluster.running.values())
    own = next(r.job.id for r in running if r.job.user == user)
    other = next(r.job.id for r in running if r.job.user != user)
    mine = _get(client, f"/api/jobs/{own}/findings", auth(demo, user))
    assert mine["job"] == own and isinstance(mine["findings"], list)
    _get(client, f"/api/jobs/{other}/findings", auth(demo, user), status=403)
    _get(client, f"/api/jobs/{other}/findings", auth(demo, "operator"))
    _get(client, "/api/jobs/j999999/findings", auth(demo, "operator"), status=404)


def test_job_findings_name_kind_targets_interval_evidence_confidence(client: TestClient, demo: Demo) -> None:
    bodies = [
        _get(client, f"/api/jobs/{job_id}/findings", auth(demo, "operator"))
        for job_id in sorted(demo.sim.cluster.running)
    ]
    findings = [f for b in bodies for f in b["findings"]]
    assert findings, "the demo injects faults and idle jobs: some running job has a finding"
    for f in findings:
        assert f["kind"] and (f["gpus"] or f["nodes"])
        assert f["start_s"] < f["end_s"] and 0 < f["confidence"] <= 1
        assert f["evidence"]["metrics"] and f["evidence"]["text"]


def test_a_job_page_reaching_before_the_telemetry_shows_no_missing_data() -> None:
    """The default demo keeps 6 h of history but telemetry for only the last hour of its warm-up:
    a job that started earlier is diagnosed from where its telemetry begins, and the page says so."""
    long = build_demo(DemoOptions(speed=60.0))
    with TestClient(create_app(long, run_stepper=False)) as c:
        bodies = [
            _get(c, f"/api/jobs/{job_id}/findings", auth(long, "operator"))
            for job_id in sorted(long.sim.cluster.running)
        ]
    assert not [f["summary"] for b in bodies for f in b["findings"] if f["kind"] == "missing"]
    assert any("telemetry begins at" in b.get("note", "") for b in bodies)


def test_reclaim_report_is_for_operators_and_names_idle_gpus(client: TestClient, demo: Demo) -> None:
    _get(client, "/api/operator/reclaim", auth(demo, _users(demo)[0]), status=403)
    report = _get(client, "/api/operator/reclaim", auth(demo, "operator"))
    assert report["at_s"] == demo.now_s
    assert report["rule"]["sample_s"] >= demo.options.telemetry_step_s
    assert report["idle_gpus"] > 0, "the demo holds idle allocations"
    for row in report["jobs"]:
        assert row["job"] in demo.sim.index and row["action"]
        assert len(row["idle"]) + len(row["underused"]) <= row["gpus"]
    assert sum(u["idle_gpus"] for u in report["users"].values()) == report["idle_gpus"]


def test_operator_can_change_the_speed(client: TestClient, demo: Demo) -> None:
    response = client.post("/api/operator/speed", json={"speed": 120}, headers=auth(demo, "operator"))
    assert response.json() == {"speed": 120, "paused": False}
    demo.set_speed(60)


def test_queue_says_why_each_job_waits(client: TestClient, demo: Demo) -> None:
    queue = _get(client, "/api/queue", auth(demo, "operator"))
    rows = [j for q in queue["queues"] for j in q["jobs"]]
    assert len(rows) == len(demo.sim.cluster.pending)
    for row in rows:
        assert row["reason"] and row["position"] >= 1
        assert set(row) >= {"code", "plugin", "estimated_start_s", "wait_s"}


def test_me_and_nodes(client: TestClient, demo: Demo) -> None:
    user = _users(demo)[0]
    me = _get(client, "/api/me", auth(demo, user))
    assert me["name"] == user and me["role"] == "user" and me["running"]
    nodes = _get(client, "/api/nodes", auth(demo, user))
    assert len(nodes["nodes"]) == len(demo.sim.nodes)
    first = demo.sim.nodes.nodes[0]
    node = _get(client, f"/api/nodes/{first.name}", auth(demo, user))
    assert len(node["gpus"]) == first.gpus
    assert all(g["user"] in {None, user, "others"} for g in node["gpus"])
    _get(client, "/api/nodes/nope", auth(demo, user), status=404)


def test_scrubber_shows_a_past_frame(client: TestClient, demo: Demo) -> None:
    now = demo.now_s
    past = _get(client, f"/api/cluster?at={now - 900}", auth(demo, "operator"))
    assert demo.oldest_s <= past["time_s"] <= now - 900
    assert past["now_s"] == now


def test_static_dashboard_and_plotly_are_served(client: TestClient) -> None:
    assert "canvas" in client.get("/").text
    assert client.get("/static/app.js").status_code == 200
    js = client.get("/vendor/plotly.min.js")
    assert js.status_code == 200 and len(js.content) > 1_000_000


def test_stepping_advances_time_and_binds_jobs() -> None:
    demo = build_demo(DemoOptions(history_s=1800.0, speed=60.0))
    start, version = demo.now_s, demo.sim.version
    started_before = set(demo.sim.records)
    demo.tick(30.0)  # 30 wall seconds at 60x: half an hour of the cluster
    assert demo.now_s == pytest.approx(start + 1800.0)
    assert demo.sim.version > version
    assert set(demo.sim.records) - started_before, "no job started in half an hour of a busy afternoon"
    demo.set_speed(0)
    paused_at = demo.now_s
    demo.tick(30.0)
    assert demo.now_s == paused_at


def test_same_seed_same_demo() -> None:
    a = build_demo(DemoOptions(history_s=1800.0, warmup_s=20 * 3600.0))
    b = build_demo(DemoOptions(history_s=1800.0, warmup_s=20 * 3600.0))
    assert (a.sim.owner == b.sim.owner).all()
    assert list(a.sim.cluster.pending) == list(b.sim.cluster.pending)


def test_tokens_are_written_for_the_demo_users(tmp_path: Any) -> None:
    table = TokenTable.generate(["u001"], ["ops"])
    path = tmp_path / "tokens.json"
    table.write(path)
    text = path.read_text()
    assert table.token_of("u001") in text and '"operator"' in text
    assert table.authenticate(f"Bearer {table.token_of('ops')}").is_operator


def test_each_users_layout_is_saved_on_the_server(client: TestClient, demo: Demo) -> None:
    first, second = _users(demo)[:2]
    layout = {"colour": "util", "layout": "user", "collapsed": ["pool:training"]}
    saved = client.put("/api/me/layout", json=layout, headers=auth(demo, first))
    assert saved.status_code == 200
    assert _get(client, "/api/me/layout", auth(demo, first)) == layout
    assert _get(client, "/api/me/layout", auth(demo, second)) == {}  # one user's layout is theirs alone


@pytest.mark.parametrize(
    "bad",
    [{"colour": "purple"}, {"layout": "spiral"}, {"collapsed": "pool:training"}, {"zoom": 2}],
)
def test_a_bad_layout_is_refused_naming_the_field(
    client: TestClient, demo: Demo, bad: dict[str, object]
) -> None:
    user = _users(demo)[0]
    response = client.put("/api/me/layout", json=bad, headers=auth(demo, user))
    assert response.status_code == 422
    assert next(iter(bad)) in response.text
