"""Reclaim closed by the scheduler, end to end against the API double with a fake clock: an idle pod is
told (annotation and Event), then evicted through the Eviction API after its grace; a busy pod, a pod in
an exempt namespace and a pod with an exempt label are left alone; every step is in the ledger; an
operator's approval, exemption and undo, written to the ledger as the dashboard writes them, are carried
out by the scheduler."""

from __future__ import annotations

import json
import re
from collections.abc import Iterator, Mapping, Sequence
from pathlib import Path
from typing import Any

import pyarrow as pa
import pytest

from kube.helpers import Clock, a_node, a_pod, kubeconfig_for, wait_synced
from kube.test_submit import JOB, as_user, invoke, scheduler, step, submit_gang
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.kube.reclaim import ACTOR, MARK_ANNOTATION, NOTICE_ANNOTATION, KubeReclaimer, PrometheusIdle
from loadmaster.kube.runner import run_loop
from loadmaster.scheduling import Scheduler
from loadmaster.scheduling.reclaim import LedgerEntry, ReclaimAction, ReclaimPolicy, ReclaimTracker
from loadmaster.serve.reclaimloop import operator_entry
from loadmaster.serve.state import StateStore
from loadmaster.telemetry.memory import MemoryStore
from loadmaster.telemetry.schema import SAMPLE_SCHEMA, field, field_code
from loadmaster.telemetry.store import Series
from loadmaster_testing.kube_api import KubeApiDouble

PODS = {  # pod key -> GPU utilisation from t0 on (before t0 every GPU works at 50 %)
    "team-a/idle": 0.0,
    "team-a/busy": 80.0,
    "ops/notebook": 0.0,
    "team-a/pinned": 0.0,
}
STEP_S = 30.0
POLICY = ReclaimPolicy(
    idle_after_s=600,
    grace_s=1200,
    action=ReclaimAction.EVICT,
    dry_run=False,
    exempt_namespaces=frozenset({"ops"}),
    exempt_labels={"loadmaster.io/reclaim": "never"},
)


class Telemetry:
    """One GPU series per pod, labelled as dcgm-exporter labels them, fed up to the clock."""

    def __init__(self, clock: Clock, utils: dict[str, float]) -> None:
        self.clock, self.utils, self.t0 = clock, dict(utils), clock.now
        self.store = MemoryStore()
        self.ids = {key: i for i, key in enumerate(utils)}
        self.store.register(
            [
                Series(
                    i,
                    "gpu",
                    {
                        "Hostname": "n1",
                        "gpu": str(i),
                        "namespace": key.split("/")[0],
                        "pod": key.split("/")[1],
                        "UUID": f"GPU-{i}",
                    },
                )
                for key, i in self.ids.items()
            ]
        )
        self.fed_s = self.t0 - 600.0

    def feed(self) -> None:
        rows: dict[str, list[Any]] = {"time_s": [], "series": [], "field": [], "value": []}
        while self.fed_s <= self.clock.now:
            for key, i in self.ids.items():
                rows["time_s"].append(self.fed_s)
                rows["series"].append(i)
                rows["field"].append(field_code(field("GPU_UTIL")))
                rows["value"].append(50.0 if self.fed_s < self.t0 else self.utils[key])
            self.fed_s += STEP_S
        self.store.append(pa.table(rows, schema=SAMPLE_SCHEMA))


@pytest.fixture
def setup(api: KubeApiDouble, clock: Clock) -> Iterator[tuple[KubeCluster, Telemetry]]:
    api.create("nodes", a_node("n1", gpus=8))
    for key in PODS:
        namespace, name = key.split("/")
        pod = a_pod(name, 1, namespace=namespace)
        pod["metadata"]["labels"]["loadmaster.io/user"] = "ann"
        if name == "pinned":
            pod["metadata"]["labels"]["loadmaster.io/reclaim"] = "never"
        api.create("pods", pod)
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    lease = LeaderElector(client, "a", clock=clock, monotonic=clock)
    cluster = KubeCluster(client, Scheduler(load_profiles()["fifo"]), "a", lease=lease, clock=clock)
    cluster.start()
    wait_synced(cluster, api.rv)
    cluster.step()
    wait_synced(cluster, api.rv)
    assert all(api.get("pods", key)["status"]["phase"] == "Running" for key in PODS)  # type: ignore[index]
    yield cluster, Telemetry(clock, PODS)
    cluster.stop()


def advance(
    api: KubeApiDouble, cluster: KubeCluster, clock: Clock, telemetry: Telemetry, seconds: float
) -> None:
    """Move time on, feed the telemetry up to it, and run one scheduling step (which renews the lease)."""
    clock.now += seconds
    telemetry.feed()
    cluster.step()
    wait_synced(cluster, api.rv)


def annotations(api: KubeApiDouble, key: str) -> dict[str, str]:
    pod = api.get("pods", key)
    assert pod is not None
    return dict(pod["metadata"].get("annotations") or {})


def events(api: KubeApiDouble, reason: str) -> list[str]:
    found = [e for e in api.objects("events") if e.get("reason") == reason]
    return [f"{e['involvedObject']['namespace']}/{e['involvedObject']['name']}" for e in found]


def test_idle_pod_is_told_then_evicted_after_grace_busy_and_exempt_ones_left_alone(
    api: KubeApiDouble, clock: Clock, setup: tuple[KubeCluster, Telemetry]
) -> None:
    cluster, telemetry = setup
    ledger = StateStore()
    reclaimer = KubeReclaimer(
        cluster, ReclaimTracker([POLICY]), PrometheusIdle(telemetry.store), ledger, 60.0
    )

    advance(api, cluster, clock, telemetry, 300)
    assert reclaimer.step() == []  # idle 5 min of the 10 the policy waits
    advance(api, cluster, clock, telemetry, 330)
    told = reclaimer.step()
    assert [(d.job, d.step.value) for d in told] == [("team-a/idle", "notify")]
    wait_synced(cluster, api.rv)
    notice = annotations(api, "team-a/idle")[NOTICE_ANNOTATION]
    assert re.match(r"every GPU idle for 1[01] min \(policy: 10 min\); evict in 20 min", notice), notice
    assert "evict at" in notice
    assert events(api, "IdleGPUs") == ["team-a/idle"]
    for key in ("team-a/busy", "ops/notebook", "team-a/pinned"):
        assert NOTICE_ANNOTATION not in annotations(api, key), key

    advance(api, cluster, clock, telemetry, 600)
    assert reclaimer.step() == []  # within the grace: nothing more
    assert api.get("pods", "team-a/idle")["metadata"].get("deletionTimestamp") is None  # type: ignore[index]
    advance(api, cluster, clock, telemetry, 630)
    acted = reclaimer.step()
    assert [(d.job, d.step.value, d.dry_run) for d in acted] == [("team-a/idle", "act", False)]
    evicted = api.get("pods", "team-a/idle")
    assert evicted is None or evicted["metadata"].get("deletionTimestamp")  # evicted: graceful deletion
    assert events(api, "Reclaimed") == ["team-a/idle"]
    for key in ("team-a/busy", "ops/notebook", "team-a/pinned"):
        pod = api.get("pods", key)
        assert pod is not None and not pod["metadata"].get("deletionTimestamp"), key
    entries = [(e.job, e.action, e.actor, e.owner) for e in reversed(ledger.ledger())]
    assert entries == [
        ("team-a/idle", "notify", ACTOR, "ann"),
        ("team-a/idle", "evict", ACTOR, "ann"),
    ]
    assert "1 of 1 pods evicted" in ledger.ledger()[0].reason


def test_a_dry_run_only_records_and_a_busy_job_has_its_notice_lifted(
    api: KubeApiDouble, clock: Clock, setup: tuple[KubeCluster, Telemetry]
) -> None:
    cluster, telemetry = setup
    ledger = StateStore()
    policy = ReclaimPolicy(idle_after_s=600, grace_s=600)  # dry run, the default
    reclaimer = KubeReclaimer(
        cluster, ReclaimTracker([policy]), PrometheusIdle(telemetry.store), ledger, 60.0
    )
    advance(api, cluster, clock, telemetry, 630)
    assert {d.job for d in reclaimer.step()} == {"team-a/idle", "ops/notebook", "team-a/pinned"}
    advance(api, cluster, clock, telemetry, 630)
    assert {(d.step.value, d.dry_run) for d in reclaimer.step()} == {("act", True)}
    wait_synced(cluster, api.rv)
    assert annotations(api, "team-a/idle")[NOTICE_ANNOTATION].startswith("(dry run) would evict now")
    assert all(not (api.get("pods", k) or {})["metadata"].get("deletionTimestamp") for k in PODS)
    assert len(events(api, "ReclaimDryRun")) == 3 and not events(api, "Reclaimed")
    telemetry.utils["team-a/idle"] = 90.0  # the owner starts working again
    advance(api, cluster, clock, telemetry, 60)
    reclaimer.step()
    wait_synced(cluster, api.rv)
    assert NOTICE_ANNOTATION not in annotations(api, "team-a/idle")
    assert ledger.ledger()[0].action == "notice lifted"


def test_operators_actions_in_the_ledger_are_carried_out(
    api: KubeApiDouble, clock: Clock, setup: tuple[KubeCluster, Telemetry]
) -> None:
    cluster, telemetry = setup
    ledger = StateStore()
    policy = ReclaimPolicy(idle_after_s=600, grace_s=3600, action=ReclaimAction.MARK)  # dry run
    reclaimer = KubeReclaimer(
        cluster, ReclaimTracker([policy]), PrometheusIdle(telemetry.store), ledger, 60.0
    )
    advance(api, cluster, clock, telemetry, 630)
    reclaimer.step()
    notices = {e.job: e for e in ledger.ledger() if e.action == "notify (dry run)"}
    assert set(notices) == {"team-a/idle", "ops/notebook", "team-a/pinned"}

    def operator(entry: LedgerEntry, what: str) -> LedgerEntry:  # as the dashboard's API records it
        return ledger.record(operator_entry(entry, what, "olga", clock.now))

    approved = operator(notices["team-a/idle"], "approve")
    exempt = operator(notices["ops/notebook"], "exempt")
    advance(api, cluster, clock, telemetry, 60)
    acted = reclaimer.step()
    assert [(d.job, d.step.value, d.dry_run) for d in acted] == [("team-a/idle", "act", False)]
    wait_synced(cluster, api.rv)
    assert "approved by an operator" in annotations(api, "team-a/idle")[MARK_ANNOTATION]
    assert NOTICE_ANNOTATION not in annotations(api, "ops/notebook")  # exempt: notice lifted
    assert "ops/notebook" in reclaimer.tracker.exempted
    mark = next(e for e in ledger.ledger() if e.action == "mark")
    operator(mark, "undo")
    operator(exempt, "undo")
    advance(api, cluster, clock, telemetry, 60)
    reclaimer.step()
    wait_synced(cluster, api.rv)
    assert MARK_ANNOTATION not in annotations(api, "team-a/idle")
    assert "ops/notebook" not in reclaimer.tracker.exempted
    assert approved.ref == notices["team-a/idle"].id


class AllIdle:
    """Every job idle for the last hour (the telemetry path is tested above)."""

    def __init__(self, clock: Clock) -> None:
        self.clock = clock

    def idle_since(self, pods: Mapping[str, Sequence[str]], now_s: float) -> dict[str, float | None]:
        return dict.fromkeys(pods, now_s - 3600.0)


def test_the_owner_sees_the_notice_in_status_and_jobs(
    api: KubeApiDouble, clock: Clock, monkeypatch: pytest.MonkeyPatch, tmp_path: Path
) -> None:
    as_user(monkeypatch, tmp_path, kubeconfig_for(api, tmp_path / "kubeconfig"), "alice")
    for i in range(2):
        api.create("nodes", a_node(f"n{i}"))
    submit_gang(2, 4)
    assert len(step(api)) == 2
    cluster = scheduler(api)
    cluster.list_now()
    cluster.step()
    reclaimer = KubeReclaimer(cluster, ReclaimTracker([ReclaimPolicy(idle_after_s=600)]), AllIdle(clock))
    assert run_loop(cluster, interval_s=0.0, max_steps=1, reclaim=reclaimer) == 1
    status = invoke("status", JOB)
    assert "reclaim: notice: (dry run) every GPU idle for 60 min" in status.replace("\n  ", " ")
    listed = invoke("jobs")
    assert "reclaim (idle GPUs)" in listed.replace("\n", " ") or "reclaim" in listed
    assert json.loads(invoke("status", JOB, "--json"))["reclaim"].startswith(
        "notice: (dry run) every GPU idle"
    )


def test_an_eviction_a_disruption_budget_refuses_is_recorded_with_the_reason(
    api: KubeApiDouble, clock: Clock, setup: tuple[KubeCluster, Telemetry]
) -> None:
    cluster, telemetry = setup
    api.create("poddisruptionbudgets", {
        "apiVersion": "policy/v1", "kind": "PodDisruptionBudget",
        "metadata": {"name": "keep", "namespace": "team-a"},
        "spec": {"selector": {"matchLabels": {"loadmaster.io/user": "ann"}}, "minAvailable": 3},
        "status": {"disruptionsAllowed": 0, "currentHealthy": 3, "desiredHealthy": 3, "expectedPods": 3,
                   "observedGeneration": 1},
    })  # fmt: skip
    ledger = StateStore()
    reclaimer = KubeReclaimer(
        cluster, ReclaimTracker([POLICY]), PrometheusIdle(telemetry.store), ledger, 60.0
    )
    advance(api, cluster, clock, telemetry, 630)
    reclaimer.step()
    advance(api, cluster, clock, telemetry, 1230)
    assert [d.step.value for d in reclaimer.step()] == ["act"]
    pod = api.get("pods", "team-a/idle")
    assert pod is not None and not pod["metadata"].get("deletionTimestamp")  # the budget holds it
    entry = ledger.ledger()[0]
    assert entry.action == "evict (refused)"
    assert "0 of 1 pods evicted; refused: team-a/idle: 429" in entry.reason
    assert cluster.stats.counts["eviction_failures"] == 1


def test_a_restarted_scheduler_does_not_tell_the_owner_again_and_keeps_the_first_notices_grace(
    api: KubeApiDouble, clock: Clock, setup: tuple[KubeCluster, Telemetry], tmp_path: Path
) -> None:
    cluster, telemetry = setup
    path = tmp_path / "state.sqlite"

    def scheduler_process() -> KubeReclaimer:  # a fresh tracker over the persisted ledger
        tracker = ReclaimTracker([POLICY])
        return KubeReclaimer(cluster, tracker, PrometheusIdle(telemetry.store), StateStore(path), 60.0)

    first = scheduler_process()
    advance(api, cluster, clock, telemetry, 630)
    assert [(d.job, d.step.value) for d in first.step()] == [("team-a/idle", "notify")]
    told_at = clock.now
    wait_synced(cluster, api.rv)
    restarted = scheduler_process()
    advance(api, cluster, clock, telemetry, 60)
    assert restarted.step() == []  # told already: no second notice, no second Event
    assert events(api, "IdleGPUs") == ["team-a/idle"]
    advance(api, cluster, clock, telemetry, told_at + POLICY.grace_s - 60 - clock.now)
    assert restarted.step() == []  # the grace runs from the first notice...
    advance(api, cluster, clock, telemetry, 60)
    assert [(d.job, d.step.value) for d in restarted.step()] == [("team-a/idle", "act")]  # ...and ends there
    entries = [(e.job, e.action) for e in reversed(StateStore(path).ledger())]
    assert entries == [("team-a/idle", "notify"), ("team-a/idle", "evict")]
