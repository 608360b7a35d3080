"""The reclaim loop over the demo: idle jobs are noticed, then acted on after the grace (a dry run by
default), every decision in the ledger; operators exempt, approve and undo; users get 403."""

from __future__ import annotations

import warnings
from pathlib import Path
from typing import Any

import pytest

from loadmaster.errors import ConfigError
from loadmaster.scheduling.reclaim import ReclaimAction, ReclaimPolicy
from loadmaster.serve import DemoOptions, build_demo, create_app
from loadmaster.serve.config import load_serve_config
from loadmaster.serve.demo import Demo
from loadmaster.serve.reclaimloop import POLICY_ACTOR, ReclaimLoop, loop_from_config
from loadmaster.serve.state import StateStore

with warnings.catch_warnings():
    warnings.simplefilter("ignore")  # Starlette's TestClient warns about its httpx transport on import
    from fastapi.testclient import TestClient


@pytest.fixture(scope="module")
def demo() -> Demo:
    return build_demo(DemoOptions(history_s=3600.0, speed=60.0))


def auth(demo: Demo, name: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {demo.tokens.token_of(name)}"}


def test_idle_jobs_are_notified_then_acted_on_in_the_ledger(demo: Demo) -> None:
    state = StateStore()
    loop = ReclaimLoop([ReclaimPolicy(idle_after_s=600, grace_s=600)], state, interval_s=60)
    first = loop.step(demo)
    assert first and all(d.step.value == "notify" for d in first)
    assert loop.step(demo) == []  # within the interval: nothing new
    demo.advance(700.0)
    acted = [d for d in loop.step(demo) if d.step.value == "act"]
    assert acted and all(d.dry_run for d in acted)
    entries = state.ledger()
    actions = {(e.job, e.action) for e in entries}
    for d in acted:
        assert (d.job, "notify (dry run)") in actions and (d.job, "evict (dry run)") in actions
    assert all(e.actor == POLICY_ACTOR and e.reason and e.gpus > 0 for e in entries)
    idle_jobs = {d.job for d in first}
    assert all(demo.sim.cluster.running[j].job.user for j in idle_jobs)


def test_operators_exempt_approve_and_undo_through_the_api(demo: Demo) -> None:
    state = StateStore()
    loop = ReclaimLoop([ReclaimPolicy(idle_after_s=600, grace_s=3600)], state, interval_s=60)
    noticed = loop.step(demo)
    assert noticed
    job = noticed[0].job
    user = next(p.name for _, p in demo.tokens.principals() if not p.is_operator)
    with TestClient(create_app(demo, run_stepper=False, state=state, reclaim=loop)) as c:
        path = f"/api/operator/reclaim/{job}"
        assert c.post(f"{path}/exempt", headers=auth(demo, user)).status_code == 403
        approved: Any = c.post(f"{path}/approve", headers=auth(demo, "operator")).json()
        assert approved["action"] == "approve" and approved["actor"] == "operator"
        assert c.post(f"{path}/exempt", headers=auth(demo, "operator")).status_code == 200
        assert job in loop.tracker.exempted
        assert c.post(f"{path}/approve", headers=auth(demo, "operator")).status_code == 404  # nothing pending
        assert c.post(f"{path}/undo", headers=auth(demo, "operator")).status_code == 200
        assert c.post(f"{path}/nonsense", headers=auth(demo, "operator")).status_code == 404
        ledger = c.get(f"/api/operator/ledger?job={job}", headers=auth(demo, "operator")).json()["entries"]
    assert [e["action"] for e in ledger][:3] == ["undo", "exempt", "approve"]
    assert job not in loop.tracker.exempted


def test_serve_yaml_describes_the_loop(tmp_path: Path) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text(
        "reclaim:\n  interval_s: 30\n  policies:\n"
        "    - {pool: interactive, idle_after_s: 600, grace_s: 900, action: mark, exempt_namespaces: [ops]}\n"
        "    - {idle_after_s: 3600}\n"
    )
    config = load_serve_config(path)
    assert config.reclaim is not None
    loop = loop_from_config(config.reclaim, StateStore())
    interactive = loop.tracker.policy_for("interactive")
    assert interactive is not None and interactive.action is ReclaimAction.MARK and interactive.dry_run
    assert interactive.exempt_namespaces == frozenset({"ops"}) and loop.interval_s == 30
    fallback = loop.tracker.policy_for("training")
    assert fallback is not None and fallback.idle_after_s == 3600
    path.write_text("reclaim:\n  policies:\n    - {action: delete}\n")
    with pytest.raises(ConfigError, match=r"serve\.yaml:3: reclaim\.policies\[0\]\.action"):
        load_serve_config(path)


def test_a_job_the_policy_evicts_ends_in_the_simulator_and_frees_its_gpus() -> None:
    demo = build_demo(DemoOptions(history_s=3600.0, speed=60.0))  # its own: jobs end here
    state = StateStore()
    loop = ReclaimLoop([ReclaimPolicy(idle_after_s=600, grace_s=600, dry_run=False)], state, interval_s=60)
    noticed = {d.job for d in loop.step(demo)}
    demo.advance(700.0)
    evicted = {d.job for d in loop.step(demo) if d.step.value == "act"}
    assert evicted and evicted <= noticed
    sim = demo.sim
    for job in evicted:
        number = sim.index[job]
        assert job not in sim.cluster.running and job not in sim.cluster.pending  # ended, not requeued
        assert not (sim.owner == number).any()
        assert sim.records[job].end_s == pytest.approx(demo.now_s)
        assert sim.log.reason[number].startswith("evicted: still idle")
    assert {e.job for e in state.ledger() if e.action == "evict"} == evicted
    demo.advance(3600.0)
    assert not evicted & set(sim.cluster.running)
    assert [d for d in loop.step(demo) if d.job in evicted] == []  # gone from the loop too
