"""Fair share survives a restart: the leader keeps the ledger in a ConfigMap, a new replica reads it.

The official client, :class:`KubeCluster` and the API double, whose ConfigMap writes follow
kube-apiserver's: ``PUT`` with a stale ``metadata.resourceVersion`` answers 409 Conflict, ``PUT``
of a missing object 404 (ConfigMaps do not create on update), ``POST`` of an existing one 409
AlreadyExists, and every body is validated against core/v1 ``ConfigMap``.
"""

from __future__ import annotations

import json
import logging
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
from kubernetes.client.exceptions import ApiException

from kube.helpers import Clock, a_node, wait_synced
from kube.test_fair_share_history import finished_pod, waiting_pod
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.checkpoint import DATA_KEY, UsageCheckpoint
from loadmaster.kube.cluster import KubeCluster, StepReport
from loadmaster.model.usage import HALF_LIFE_S
from loadmaster.scheduling import Scheduler
from loadmaster_testing.kube_api import KubeApiDouble

CONFIGMAP = "loadmaster/loadmaster-fairshare"
NINE_HOURS_ON_THE_NODE = 8 * 9 * 3600.0


def decayed(gpu_s: float, after_s: float) -> float:
    return gpu_s * 0.5 ** (after_s / HALF_LIFE_S)


def a_replica(api: KubeApiDouble, clock: Clock, name: str, **checkpoint: Any) -> KubeCluster:
    client = api_client(host=api.url)  # type: ignore[attr-defined]
    lease = LeaderElector(client, name, clock=clock, monotonic=clock)
    return KubeCluster(
        client,
        Scheduler(load_profiles()["slurm"]),
        name,
        lease=lease,
        clock=clock,
        checkpoint=UsageCheckpoint(client, CONFIGMAP, clock=clock, **checkpoint),
    )


@contextmanager
def replicas(api: KubeApiDouble, clock: Clock, *names: str, **checkpoint: Any) -> Iterator[list[KubeCluster]]:
    """Replicas named ``names``, started; stopped at the end (stopping one twice is harmless)."""
    made = [a_replica(api, clock, name, **checkpoint) for name in names]
    for replica in made:
        replica.start()
    try:
        yield made
    finally:
        for replica in reversed(made):
            replica.stop()


def step_as_leader(replica: KubeCluster, clock: Clock) -> StepReport:
    """A step once ``replica`` leads: a new replica waits a lease duration from when it first saw the
    last holder's Lease (client-go's rule, :class:`LeaderElector`)."""
    report = replica.step()
    if not report.leader:
        clock.now += replica.lease.lease_duration_s + 1
        report = replica.step()
    assert report.leader
    return report


def led_once(api: KubeApiDouble, clock: Clock, name: str) -> tuple[KubeCluster, StepReport]:
    """A replica started, synced, stepped once as the leader and stopped (a clean stop writes)."""
    with replicas(api, clock, name) as (replica,):
        wait_synced(replica, api.rv)
        return replica, step_as_leader(replica, clock)


def stored(api: KubeApiDouble) -> dict[str, str]:
    found = api.get("configmaps", CONFIGMAP)
    assert found is not None, "no checkpoint ConfigMap"
    data: dict[str, str] = found["data"]
    return data


def test_usage_of_a_pod_already_removed_survives_a_restart(api: KubeApiDouble, clock: Clock) -> None:
    """The pod that made team-a's usage is gone from the API when the new replica starts; without
    the checkpoint team-a's later job would go first (see test_fair_share_history)."""
    api.create("nodes", a_node("n0", gpus=8))
    now = clock.now
    api.create("pods", finished_pod("earlier", "team-a", now - 10 * 3600, now - 3600))
    led_once(api, clock, "a")
    saved = json.loads(stored(api)[DATA_KEY])
    assert saved["usage_gpu_s"]["user/team-a"] == pytest.approx(decayed(NINE_HOURS_ON_THE_NODE, 3600))
    api.delete("pods", "team-a/earlier", 0)  # the pod garbage collector took it
    clock.now += 600
    api.create("pods", waiting_pod("a2", "team-a", clock.now - 120))  # submitted first
    api.create("pods", waiting_pod("b1", "team-b", clock.now - 60))
    second, report = led_once(api, clock, "b")
    assert [key for key, _ in api.bindings] == ["team-b/b1"]
    assert report.view is not None
    usage = report.view.snapshot.usage_gpu_s
    assert usage["user/team-a"] == pytest.approx(decayed(NINE_HOURS_ON_THE_NODE, clock.now - (now - 3600)))
    assert report.view.snapshot.recent_runtimes_s == {"team-a": (9 * 3600.0,)}
    assert second.stats.counts.get("usage_charged", 0) == 0


def test_a_finished_pod_still_in_the_api_is_not_charged_twice(api: KubeApiDouble, clock: Clock) -> None:
    api.create("nodes", a_node("n0", gpus=8))
    ended = clock.now - 3600
    api.create("pods", finished_pod("earlier", "team-a", ended - 9 * 3600, ended))
    for name in ("a", "b"):
        _, report = led_once(api, clock, name)
        assert report.view is not None
        usage = report.view.snapshot.usage_gpu_s["user/team-a"]
        assert usage == pytest.approx(decayed(NINE_HOURS_ON_THE_NODE, clock.now - ended))
        assert report.view.snapshot.recent_runtimes_s == {"team-a": (9 * 3600.0,)}
        clock.now += 600


def test_an_unreadable_checkpoint_is_kept_and_the_scheduler_goes_on(
    api: KubeApiDouble, clock: Clock, caplog: pytest.LogCaptureFixture
) -> None:
    api.create("nodes", a_node("n0", gpus=8))
    bad = '{"format": 1, "saved_at": "monday"}'
    meta = {"name": "loadmaster-fairshare", "namespace": "loadmaster"}
    api.create(
        "configmaps", {"apiVersion": "v1", "kind": "ConfigMap", "metadata": meta, "data": {DATA_KEY: bad}}
    )
    api.create("pods", waiting_pod("a1", "team-a", clock.now - 60))
    replica = a_replica(api, clock, "a")
    replica.start()
    with caplog.at_level(logging.ERROR, logger="loadmaster.kube.checkpoint"):
        try:
            wait_synced(replica, api.rv)
            replica.step()
        finally:
            replica.stop()
    assert "ConfigMap loadmaster/loadmaster-fairshare, key usage.json: saved_at" in caplog.text
    assert [key for key, _ in api.bindings] == ["team-a/a1"]  # scheduling went on
    data = stored(api)
    assert data[f"unreadable.{int(clock.now)}.usage.json"] == bad  # nothing stored is lost
    assert json.loads(data[DATA_KEY])["format"] == 1


def test_no_scheduling_until_the_checkpoint_is_read(api: KubeApiDouble, clock: Clock) -> None:
    api.create("nodes", a_node("n0", gpus=8))
    api.create("pods", waiting_pod("a1", "team-a", clock.now - 60))
    replica = a_replica(api, clock, "a")
    replica.start()
    try:
        wait_synced(replica, api.rv)
        checkpoint = replica.checkpoint
        assert checkpoint is not None
        read = checkpoint.core.read_namespaced_config_map
        answers = iter([ApiException(status=500, reason="Internal Server Error")])

        def failing_once(*args: Any, **kwargs: Any) -> Any:
            # The double's fail_next would fail whichever request comes first (a watch, the Lease):
            # this fails the ConfigMap read alone, as the API server's 500 would reach it.
            failure = next(answers, None)
            if failure is not None:
                raise failure
            return read(*args, **kwargs)

        checkpoint.core.read_namespaced_config_map = failing_once  # type: ignore[method-assign]
        report = replica.step()
        assert "fair-share usage not read yet" in report.waiting["*"]
        assert api.bindings == [] and replica.checkpoint is not None and not replica.checkpoint.restored
        replica.step()
    finally:
        replica.stop()
    assert [key for key, _ in api.bindings] == ["team-a/a1"]


def test_a_write_that_conflicts_is_made_again_on_the_new_version(api: KubeApiDouble, clock: Clock) -> None:
    api.create("nodes", a_node("n0", gpus=8))
    replica = a_replica(api, clock, "a", every_s=0)
    replica.start()
    try:
        wait_synced(replica, api.rv)
        replica.step()  # creates it
        checkpoint = replica.checkpoint
        assert checkpoint is not None and checkpoint.saves == 1
        other = api.get("configmaps", CONFIGMAP)
        assert other is not None
        ledger = json.loads(other["data"][DATA_KEY])
        ledger["usage_gpu_s"]["user/team-z"] = 1000.0  # another writer's ledger
        other["data"][DATA_KEY] = json.dumps(ledger)
        api.replace("configmaps", CONFIGMAP, other)
        # It ends now (a pod is in the API from its creation; its end arrives with the kubelet's update).
        api.create("pods", finished_pod("done", "team-a", clock.now - 7200, clock.now))
        wait_synced(replica, api.rv)
        replica.step()
        assert (checkpoint.saves, checkpoint.failures) == (1, 1)  # 409: read it again first
        assert checkpoint.reload_wanted
        replica.step()  # within the backoff: no new try
        assert (checkpoint.saves, checkpoint.failures) == (1, 1)
        clock.now += 2
        replica.step()  # read again, the pod charged again on top of what was stored, written
        assert (checkpoint.saves, checkpoint.failures) == (2, 1) and not checkpoint.reload_wanted
    finally:
        replica.stop()
    assert json.loads(stored(api)[DATA_KEY])["usage_gpu_s"].keys() >= {"user/team-a", "user/team-z"}


def test_the_leader_writes_at_most_every_interval_and_on_a_clean_stop(
    api: KubeApiDouble, clock: Clock
) -> None:
    api.create("nodes", a_node("n0", gpus=8))
    replica = a_replica(api, clock, "a", every_s=60)
    replica.start()
    try:
        wait_synced(replica, api.rv)
        replica.step()
        api.create("pods", finished_pod("done", "team-a", clock.now - 7200, clock.now - 3600))
        wait_synced(replica, api.rv)
        replica.step()  # charged, but the interval has not passed
        assert "user/team-a" not in json.loads(stored(api)[DATA_KEY])["usage_gpu_s"]
    finally:
        replica.stop()  # the leader writes what changed before it goes
    assert "user/team-a" in json.loads(stored(api)[DATA_KEY])["usage_gpu_s"]


def test_a_follower_reads_the_checkpoint_and_writes_nothing(api: KubeApiDouble, clock: Clock) -> None:
    api.create("nodes", a_node("n0", gpus=8))
    api.create("pods", finished_pod("done", "team-a", clock.now - 7200, clock.now - 3600))
    with replicas(api, clock, "a", "b") as (leader, follower):
        wait_synced(leader, api.rv)
        leader.step()
        written = api.get("configmaps", CONFIGMAP)
        assert written is not None
        wait_synced(follower, api.rv)
        assert not follower.step().leader
        assert follower.checkpoint is not None and follower.checkpoint.restored
        assert follower.stats.counts.get("usage_charged", 0) == 0  # in the checkpoint already
        again = api.get("configmaps", CONFIGMAP)
        assert again is not None
        assert again["metadata"]["resourceVersion"] == written["metadata"]["resourceVersion"]


def test_a_new_leader_keeps_what_the_last_one_charged_after_the_follower_read(
    api: KubeApiDouble, clock: Clock
) -> None:
    """A rolling update: B reads the store, then A charges a pod that is removed at once
    (``ttlSecondsAfterFinished: 0``) and writes. B never saw that pod; when B leads, it starts again
    from the store before it writes, so the usage stays."""
    api.create("nodes", a_node("n0", gpus=8))
    with replicas(api, clock, "a", "b", every_s=0) as (a, b):
        wait_synced(a, api.rv)
        assert a.step().leader  # creates the store, empty
        wait_synced(b, api.rv)
        assert not b.step().leader  # reads it
        ended = clock.now
        api.create("pods", finished_pod("quick", "team-a", ended - 3600, ended))
        wait_synced(a, api.rv)
        a.step()  # charges it and writes
        assert "user/team-a" in json.loads(stored(api)[DATA_KEY])["usage_gpu_s"]
        api.delete("pods", "team-a/quick", 0)
        wait_synced(b, api.rv)
        b.step()  # the pod is gone: B never saw it
        a.stop()
        report = step_as_leader(b, clock)
    assert report.view is not None
    expected = decayed(8 * 3600.0, clock.now - ended)  # 8 GPUs for an hour
    assert report.view.snapshot.usage_gpu_s["user/team-a"] == pytest.approx(expected)
    assert "user/team-a" in json.loads(stored(api)[DATA_KEY])["usage_gpu_s"]


def test_a_new_leader_finding_no_ledger_writes_its_own(api: KubeApiDouble, clock: Clock) -> None:
    """The store was deleted (or set aside as unreadable) while B followed: B keeps what it charged
    and writes it, rather than starting from nothing."""
    api.create("nodes", a_node("n0", gpus=8))
    api.create("pods", finished_pod("done", "team-a", clock.now - 7200, clock.now - 3600))
    with replicas(api, clock, "a", "b") as (a, b):
        wait_synced(a, api.rv)
        a.step()
        wait_synced(b, api.rv)
        b.step()
        a.stop()
        api.delete("configmaps", CONFIGMAP)
        report = step_as_leader(b, clock)
    assert report.view is not None and report.view.snapshot.usage_gpu_s["user/team-a"] > 0
    assert "user/team-a" in json.loads(stored(api)[DATA_KEY])["usage_gpu_s"]
