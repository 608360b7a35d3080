"""`kube run`'s /healthz, /readyz and /metrics, its logs, and the queues ConfigMap re-read while running."""

from __future__ import annotations

import io
import json
import logging
import threading
import urllib.error
import urllib.request
from collections.abc import Iterator
from typing import Any

import pytest
from prometheus_client.parser import text_string_to_metric_families

from kube.helpers import Clock, a_node, a_pod, a_pod_group, wait_synced
from loadmaster.cli.logs import LogFormat, LogLevel, configure
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.kube.metrics import SchedulerMetrics
from loadmaster.kube.queues import QueuesReloader
from loadmaster.kube.runner import run_loop
from loadmaster.kube.serving import Health, HealthServer
from loadmaster.scheduling import Scheduler
from loadmaster_testing.kube_api import KubeApiDouble


@pytest.fixture
def cluster(api: KubeApiDouble) -> Iterator[KubeCluster]:
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    built = KubeCluster(
        client,
        Scheduler(load_profiles()["binpack"]),
        "a",
        lease=LeaderElector(client, "a", namespace="loadmaster"),
    )
    built.start()
    yield built
    built.stop()


def get(port: int, path: str) -> tuple[int, str]:
    try:
        with urllib.request.urlopen(f"http://127.0.0.1:{port}{path}", timeout=5) as response:
            return response.status, response.read().decode()
    except urllib.error.HTTPError as error:
        return error.code, error.read().decode()


def samples(text: str) -> dict[tuple[str, tuple[tuple[str, str], ...]], float]:
    return {
        (s.name, tuple(sorted(s.labels.items()))): s.value
        for family in text_string_to_metric_families(text)
        for s in family.samples
    }


def test_probes_and_metrics_of_a_running_scheduler(api: KubeApiDouble, cluster: KubeCluster) -> None:
    api.create("nodes", a_node("n0"))
    for name, gpus in (("a", 4), ("b", 4), ("c", 8)):
        api.create("pods", a_pod(name, gpus))
    api.create("podgroups", a_pod_group("g", 3))
    api.create("pods", a_pod("g-0", 1, "g"))  # a gang short of members: gated
    metrics, health = SchedulerMetrics("binpack"), Health()
    server = HealthServer(health, metrics, "127.0.0.1", 0)
    server.start()
    try:
        assert get(server.port, "/readyz")[0] == 500  # nothing listed yet
        wait_synced(cluster, api.rv)
        run_loop(cluster, interval_s=0, max_steps=1, metrics=metrics, health=health)
        assert get(server.port, "/healthz") == (200, "ok")
        code, text = get(server.port, "/readyz?verbose")
        assert code == 200 and "[+]informers ok" in text and "[+]leader-election ok" in text
        code, text = get(server.port, "/metrics")
    finally:
        server.stop()
    found = samples(text)
    assert (
        found[("scheduler_schedule_attempts_total", (("profile", "binpack"), ("result", "scheduled")))] == 2
    )
    assert (
        found[("scheduler_schedule_attempts_total", (("profile", "binpack"), ("result", "unschedulable")))]
        == 1
    )
    assert found[("scheduler_pending_pods", (("queue", "unschedulable"),))] == 1
    assert found[("scheduler_pending_pods", (("queue", "gated"),))] == 1
    bind = (("extension_point", "Bind"), ("profile", "binpack"), ("status", "Success"))
    assert found[("scheduler_framework_extension_point_duration_seconds_count", bind)] == 2
    failed = (("extension_point", "Bind"), ("profile", "binpack"), ("status", "Error"))
    assert (  # no failed bind yet: the Error series does not exist (nor does kube-scheduler's)
        "scheduler_framework_extension_point_duration_seconds_count",
        failed,
    ) not in found
    assert found[("scheduler_scheduling_algorithm_duration_seconds_count", ())] == 1
    assert found[("leader_election_master_status", (("name", "loadmaster"),))] == 1
    assert {labels for name, labels in found if name == "loadmaster_informer_staleness_seconds"} == {
        (("resource", kind),) for kind in cluster.informers
    }
    assert found[("process_resident_memory_bytes", ())] > 0


def test_a_failed_bind_is_counted_under_the_error_status(api: KubeApiDouble, cluster: KubeCluster) -> None:
    """A Binding the API refuses is observed with ``status="Error"`` and its attempt with ``result="error"``;
    the retry at the next step, accepted, with ``status="Success"``."""
    api.create("nodes", a_node("n0"))
    api.create("pods", a_pod("a", 4))
    api.create("pods", a_pod("b", 4))
    api.conflict_next_binds(1)  # one of the two concurrent binds answers 409 Conflict
    metrics = SchedulerMetrics("binpack")
    wait_synced(cluster, api.rv)
    run_loop(cluster, interval_s=0, max_steps=1, metrics=metrics)
    found = samples(metrics.exposition().decode())
    count = "scheduler_framework_extension_point_duration_seconds_count"
    bind = (("extension_point", "Bind"), ("profile", "binpack"))
    assert found[(count, (*bind, ("status", "Error")))] == 1
    assert found[(count, (*bind, ("status", "Success")))] == 1
    attempts, profile = "scheduler_schedule_attempts_total", ("profile", "binpack")
    assert found[(attempts, (profile, ("result", "error")))] == 1
    assert found[(attempts, (profile, ("result", "scheduled")))] == 1
    assert cluster.stats.counts["bind_failures"] == 1
    attempt_s = "scheduler_scheduling_attempt_duration_seconds_sum"
    bind_sum = "scheduler_framework_extension_point_duration_seconds_sum"
    for status, result in (("Success", "scheduled"), ("Error", "error")):  # an attempt includes its bind
        bind_s = found[(bind_sum, (*bind, ("status", status)))]
        assert found[(attempt_s, (profile, ("result", result)))] >= bind_s > 0
    wait_synced(cluster, api.rv)
    run_loop(cluster, interval_s=0, max_steps=1, metrics=metrics)  # the failed bind is retried and passes
    found = samples(metrics.exposition().decode())
    assert found[(count, (*bind, ("status", "Error")))] == 1
    assert found[(count, (*bind, ("status", "Success")))] == 2
    assert len(api.bindings) == 2


@pytest.mark.parametrize(("profile", "skips"), [("binpack", False), ("slurm-periodic", True)])
def test_a_cycle_that_skips_its_periodic_backfill_walk_is_counted_and_logged(
    api: KubeApiDouble, clock: Clock, caplog: Any, profile: str, skips: bool
) -> None:
    """With ``interval_s`` (slurm-periodic: 30 s), a cycle within 30 s of the last walk skips it:
    counted in ``loadmaster_backfill_walks_skipped_total`` and logged at debug level; a cycle 30 s
    later walks again. The default profile (binpack) has no periodic walk: nothing counted."""
    api.create("nodes", a_node("n0"))
    api.create("pods", a_pod("a", 8))
    api.create("pods", a_pod("b", 8))  # waits for "a": a cycle runs at every step
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    lease = LeaderElector(client, "a", namespace="loadmaster", clock=clock, monotonic=clock)
    cluster = KubeCluster(client, Scheduler(load_profiles()[profile]), "a", lease=lease, clock=clock)
    cluster.start()
    metrics = SchedulerMetrics(profile)
    series = ("loadmaster_backfill_walks_skipped_total", (("profile", profile),))
    counted: list[float] = []
    try:
        with caplog.at_level(logging.DEBUG, logger="loadmaster.kube.cluster"):
            for seconds in (0.0, 1.0, 30.0):  # a walk, one skipped 1 s later, a walk when due
                clock.now += seconds
                wait_synced(cluster, api.rv)
                run_loop(cluster, interval_s=0, max_steps=1, metrics=metrics)
                counted.append(samples(metrics.exposition().decode()).get(series, 0.0))
    finally:
        cluster.stop()
    assert counted == ([0.0, 1.0, 1.0] if skips else [0.0, 0.0, 0.0])
    assert cluster.stats.counts["walks_skipped"] == int(skips)
    logged = [r for r in caplog.records if r.getMessage().startswith("backfill walk skipped")]
    assert len(logged) == int(skips)
    assert all(r.levelno == logging.DEBUG and r.walks_skipped == 1 for r in logged)  # type: ignore[attr-defined]


def test_a_stuck_loop_fails_liveness_and_a_lost_lease_fails_readiness() -> None:
    now = [0.0]
    health = Health(liveness_timeout_s=60, stale_after_s=120, clock=lambda: now[0])
    health.stepped(True, "standby", {"pods": 1.0})
    assert all(v is None for v in health.ready().values())  # a standby is ready
    now[0] = 61.0
    assert health.live()["loop"] == "no step for 61 s (> 60 s)"
    health.stepped(True, "unknown", {"pods": 500.0})
    ready = health.ready()
    assert ready["loop"] is None and ready["informers"] == "stale: pods 500 s"
    assert ready["leader-election"] == "role 'unknown': the Lease could not be read"


def test_a_failing_step_is_logged_and_the_loop_goes_on(cluster: KubeCluster, caplog: Any) -> None:
    calls: list[int] = []

    def broken() -> None:
        calls.append(1)
        raise RuntimeError("boom")

    with caplog.at_level(logging.ERROR, logger="loadmaster"):
        steps = run_loop(cluster, interval_s=0, max_steps=3, before_step=broken)
    assert steps == 3 and len(calls) == 3
    failures = [r for r in caplog.records if r.getMessage().startswith("scheduling step failed")]
    assert len(failures) == 3 and failures[0].exc_info is not None


def test_the_loop_stops_when_told(cluster: KubeCluster) -> None:
    stop = threading.Event()
    stop.set()
    assert run_loop(cluster, interval_s=10, stop=stop) == 0


def test_json_logs_carry_the_extra_fields() -> None:
    stream = io.StringIO()
    configure(LogLevel.info, LogFormat.json, stream)
    log = logging.getLogger("loadmaster.kube.test")
    log.debug("hidden")
    log.info("bound", extra={"pod": "team-a/p0", "node": "n0"})
    try:
        raise ValueError("bad")
    except ValueError:
        log.exception("failed")
    lines = [json.loads(line) for line in stream.getvalue().splitlines()]
    # only this test's logger: an informer thread of an earlier test may still log while it winds down
    lines = [r for r in lines if r["logger"] == "loadmaster.kube.test"]
    assert [r["msg"] for r in lines] == ["bound", "failed"]
    assert lines[0]["pod"] == "team-a/p0" and lines[0]["node"] == "n0" and lines[0]["level"] == "info"
    assert "ValueError: bad" in lines[1]["exc"]
    configure(LogLevel.warning, LogFormat.plain, stream)
    log.warning("plain", extra={"pod": "p"})
    mine = [line for line in stream.getvalue().splitlines() if " loadmaster.kube.test: " in line]
    assert mine[-1].endswith("loadmaster.kube.test: plain pod=p")


QUEUES = (
    "quota:\n  unknown_group: reject\n  orgs:\n    research:\n      groups:\n        team-a: {nominal: %d}\n"
)


def queues_configmap(nominal: int) -> dict[str, Any]:
    return {
        "apiVersion": "v1",
        "kind": "ConfigMap",
        "metadata": {"name": "loadmaster-queues", "namespace": "loadmaster"},
        "data": {"plugins.yaml": QUEUES % nominal},
    }


def nominal(profile: Any) -> int:
    quota = next(p for p in profile.plugins if p.name == "quota")
    return int(quota.args.orgs["research"].groups["team-a"].nominal)


def edit(api: KubeApiDouble, text: str) -> None:
    with api.lock:
        api.patch("configmaps", "loadmaster/loadmaster-queues", {"data": {"plugins.yaml": text}})


def test_the_queues_configmap_is_reloaded_when_it_changes(api: KubeApiDouble, caplog: Any) -> None:
    api.create("configmaps", queues_configmap(4))
    now = [0.0]
    reloader = QueuesReloader(api_client(host=api.url), ["fair"], every_s=10, clock=lambda: now[0])  # type: ignore[attr-defined]
    assert nominal(reloader.load()["fair"]) == 4
    edit(api, QUEUES % 8)
    assert reloader.poll() is None  # not yet time to look
    now[0] = 10.0
    changed = reloader.poll()
    assert changed is not None and nominal(changed["fair"]) == 8
    now[0] = 20.0
    assert reloader.poll() is None  # unchanged
    edit(api, "quota: [1]")
    now[0] = 30.0
    with caplog.at_level(logging.ERROR, logger="loadmaster"):
        assert reloader.poll() is None  # invalid: the running configuration stays
    assert reloader.failures == 1 and reloader.reloads == 1
    assert "must map plugin names" in caplog.records[-1].error  # type: ignore[attr-defined]
    with api.lock:  # the double's own methods expect its lock held, as its HTTP handler holds it
        api.delete("configmaps", "loadmaster/loadmaster-queues")
    now[0] = 40.0
    back = reloader.poll()  # deleted: the profile as written
    assert back is not None and reloader.reloads == 2
