"""The API's routers: every route but the public ones needs a token (401), every operator route the
operator role (403), checked by the router, not by each route; the OpenAPI document declares the bearer
scheme and needs a token too; operators approve, exempt and undo ledger entries."""

from __future__ import annotations

import re
import time
from typing import Any

import pytest
from fastapi.routing import APIRoute

from loadmaster.errors import TelemetryError
from loadmaster.scheduling.reclaim import ReclaimPolicy
from loadmaster.serve import create_app
from loadmaster.serve.app import operators, public, users
from loadmaster.serve.demo import Demo
from loadmaster.serve.reclaimloop import ReclaimLoop
from loadmaster.serve.state import LedgerEntry, StateStore
from serve_demo import TestClient, auth, demo_fixtures

PUBLIC = {"/", "/vendor/plotly.min.js", "/api/health"}


demo, client = demo_fixtures()


def _user(demo: Demo) -> str:
    return next(p.name for _, p in demo.tokens.principals() if not p.is_operator)


def _routes(router: Any) -> list[tuple[str, str]]:
    out = []
    for route in router.routes:
        assert isinstance(route, APIRoute)
        path = re.sub(r"\{[^}]+\}", "x", route.path)
        out.extend((method, path) for method in sorted(route.methods))
    return out


def test_the_public_router_holds_only_the_page_and_liveness() -> None:
    assert {path for _, path in _routes(public)} == PUBLIC


@pytest.mark.parametrize(("method", "path"), _routes(users) + _routes(operators))
def test_every_other_route_is_401_without_a_token(client: TestClient, method: str, path: str) -> None:
    response = client.request(method, path)
    assert response.status_code == 401, response.text
    assert response.headers["WWW-Authenticate"] == "Bearer"


@pytest.mark.parametrize(("method", "path"), _routes(operators))
def test_every_operator_route_is_403_for_a_user(
    client: TestClient, demo: Demo, method: str, path: str
) -> None:
    response = client.request(method, path, headers=auth(demo, _user(demo)))
    assert response.status_code == 403, response.text


def test_openapi_needs_a_token_and_declares_bearer(client: TestClient, demo: Demo) -> None:
    assert client.get("/openapi.json").status_code == 401
    doc = client.get("/openapi.json", headers=auth(demo, _user(demo))).json()
    schemes = doc["components"]["securitySchemes"]
    assert schemes == {
        "HTTPBearer": {
            "type": "http",
            "scheme": "bearer",
            "description": schemes["HTTPBearer"]["description"],
        }
    }
    assert doc["paths"]["/api/operator/summary"]["get"]["security"] == [{"HTTPBearer": []}]
    assert "security" not in doc["paths"]["/api/health"]["get"]
    assert client.get("/docs").status_code == 404 and client.get("/redoc").status_code == 404


def _entry(demo: Demo, job: str, action: str) -> LedgerEntry:
    running = demo.sim.cluster.running[job]
    return LedgerEntry(demo.now_s, job, running.job.user, None, action, "idle", "scheduler", 1, 0.5)


def test_without_a_loop_operator_actions_are_recorded_for_the_scheduler(demo: Demo) -> None:
    store = StateStore()
    job = next(iter(demo.sim.cluster.running))
    notice = store.record(_entry(demo, job, "notify (dry run)"))
    evicted = store.record(_entry(demo, job, "evict"))
    with TestClient(create_app(demo, run_stepper=False, state=store)) as c:
        op = auth(demo, "operator")
        assert (
            c.post(f"/api/operator/ledger/{notice.id}/approve", headers=auth(demo, _user(demo))).status_code
            == 403
        )
        approved = c.post(f"/api/operator/ledger/{notice.id}/approve", headers=op).json()
        assert (approved["action"], approved["actor"], approved["ref"]) == ("approve", "operator", notice.id)
        undone = c.post(f"/api/operator/ledger/{approved['id']}/undo", headers=op).json()
        assert (undone["action"], undone["ref"]) == ("undo", approved["id"])
        refused = c.post(f"/api/operator/ledger/{evicted.id}/undo", headers=op)
        assert refused.status_code == 404 and "cannot" in refused.json()["detail"]
        assert c.post(f"/api/operator/ledger/{evicted.id}/approve", headers=op).status_code == 404
        assert c.post(f"/api/operator/ledger/{notice.id}/delete", headers=op).status_code == 404
        assert c.post("/api/operator/ledger/99999/exempt", headers=op).status_code == 404
        assert c.post(f"/api/operator/ledger/{evicted.id}/exempt", headers=op).json()["action"] == "exempt"
    assert [e.action for e in store.since(evicted.id or 0)] == ["approve", "undo", "exempt"]


def test_with_a_loop_an_approved_notice_is_acted_on_for_real_at_the_next_look(demo: Demo) -> None:
    store = StateStore()
    loop = ReclaimLoop([ReclaimPolicy(idle_after_s=600, grace_s=3600)], store, interval_s=60)
    noticed = loop.step(demo)
    assert noticed and all(d.dry_run for d in noticed)
    notice = next(e for e in store.ledger() if e.job == noticed[0].job)
    with TestClient(create_app(demo, run_stepper=False, state=store, reclaim=loop)) as c:
        made = c.post(f"/api/operator/ledger/{notice.id}/approve", headers=auth(demo, "operator")).json()
    assert made["ref"] == notice.id and notice.job in loop.tracker.approved
    demo.advance(120.0)
    acted = [d for d in loop.step(demo) if d.job == notice.job]
    assert [(d.step.value, d.dry_run) for d in acted] == [("act", False)]
    assert "approved by an operator" in acted[0].reason


def test_owners_see_the_ledger_of_their_own_jobs_only(demo: Demo) -> None:
    store = StateStore()
    mine, other = _user(demo), "someone-else"
    job = next(iter(demo.sim.cluster.running))
    store.record(LedgerEntry(demo.now_s, job, mine, "team-a", "notify", "idle", "scheduler", 1, 0.5))
    store.record(LedgerEntry(demo.now_s, "x", other, "team-b", "notify", "idle", "scheduler", 1, 0.5))
    with TestClient(create_app(demo, run_stepper=False, state=store)) as c:
        entries = c.get("/api/me/reclaim", headers=auth(demo, mine)).json()["entries"]
        assert c.get("/api/me/reclaim").status_code == 401
    assert [(e["job"], e["owner"]) for e in entries] == [(job, mine)]
    assert [e.owner for e in store.ledger(owners=(mine,), namespaces=("team-b",))] == [other, mine]


def test_a_failed_refresh_is_logged_and_the_stepper_goes_on(
    demo: Demo, monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    ticks: list[float] = []

    def tick(wall_s: float) -> None:
        ticks.append(wall_s)
        if len(ticks) == 1:
            raise TelemetryError("Prometheus at http://prometheus:9090: connection refused")

    monkeypatch.setattr(demo, "tick", tick)
    with TestClient(create_app(demo, step_interval_s=0.02)):
        deadline = time.monotonic() + 10
        while len(ticks) < 3 and time.monotonic() < deadline:
            time.sleep(0.02)
    assert len(ticks) >= 3
    assert "refreshing the dashboard failed" in caplog.text and "connection refused" in caplog.text
