"""JobHistory: fair-share usage and run-time history of the pods a Kubernetes scheduler ran."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from builders import a_cluster
from kube.helpers import a_pod
from loadmaster.kube import translate as tr
from loadmaster.kube.history import JobHistory
from loadmaster.kube.translate import utc_stamp
from loadmaster.model import ClusterSnapshot
from loadmaster.model.usage import HALF_LIFE_S, UsageLedger

T0 = 1_700_000_000.0
NAMES = (tr.SCHEDULER_NAME,)


def ran(
    name: str,
    gpus: int = 1,
    *,
    start: float = T0,
    end: float | None = None,
    phase: str = "Running",
    namespace: str = "team-a",
    group: str | None = None,
    scheduler: str = tr.SCHEDULER_NAME,
) -> dict[str, Any]:
    """A pod bound to n0 that started at ``start``; with ``end``, its container terminated then."""
    pod = a_pod(name, gpus, group, namespace)
    pod["metadata"]["creationTimestamp"] = utc_stamp(start - 60)
    pod["spec"]["nodeName"] = "n0"
    pod["spec"]["schedulerName"] = scheduler
    pod["metadata"]["uid"] = f"{namespace}-{name}-{start:.0f}"
    status: dict[str, Any] = {"phase": phase, "startTime": utc_stamp(start)}
    if end is not None:
        terminated = {"exitCode": 0 if phase == "Succeeded" else 1, "finishedAt": utc_stamp(end)}
        status["containerStatuses"] = [{"name": "main", "state": {"terminated": terminated}}]
    pod["status"] = status
    return pod


def pods_of(*pods: dict[str, Any]) -> dict[str, dict[str, Any]]:
    return {tr.key_of(p): p for p in pods}


def decayed(gpu_s: float, at: float, now: float) -> float:
    return gpu_s * 0.5 ** ((now - at) / HALF_LIFE_S)


def test_a_finished_job_is_charged_once_at_its_end_and_adds_to_its_users_history() -> None:
    history = JobHistory()
    done = ran("a", 2, end=T0 + 3600, phase="Succeeded")
    now = T0 + 7200
    assert history.observe(pods_of(done), NAMES, now) == 1
    assert history.observe(pods_of(done), NAMES, now + 60) == 0  # already charged
    usage = history.usage.view(T0 + 3600)  # charged at the pod's end
    assert usage["user/team-a"] == pytest.approx(7200.0)
    assert usage["group/team-a"] == pytest.approx(7200.0)
    assert history.usage.view(now)["user/team-a"] == pytest.approx(decayed(7200.0, T0 + 3600, now))
    assert history.recent_runtimes == {"team-a": (3600.0,)}
    assert history.recent_limits == {"team-a": (tr.DEFAULT_TIME_LIMIT_S,)}


def test_a_failed_pod_is_charged_without_history_and_other_schedulers_pods_are_not() -> None:
    history = JobHistory()
    failed = ran("a", 1, end=T0 + 100, phase="Failed")
    theirs = ran("b", 8, end=T0 + 100, phase="Succeeded", scheduler="default-scheduler")
    history.observe(pods_of(failed, theirs), NAMES, T0 + 100)
    assert history.usage.view(T0 + 100)["user/team-a"] == pytest.approx(100.0)
    assert dict(history.usage.view(T0 + 100)).keys() == {"user/team-a", "group/team-a"}
    assert history.recent_runtimes == {}


def test_a_pod_that_disappears_while_running_is_charged_up_to_when_it_was_found_gone() -> None:
    history = JobHistory()
    history.observe(pods_of(ran("a", 4)), NAMES, T0 + 10)
    assert history.usage.view(T0 + 10).get("user/team-a") is None  # running: nothing charged yet
    assert history.observe({}, NAMES, T0 + 1000) == 1
    assert history.usage.view(T0 + 1000)["user/team-a"] == pytest.approx(4 * 1000.0)
    assert history.recent_runtimes == {}
    assert history.observe({}, NAMES, T0 + 2000) == 0  # once


def test_a_bound_pod_the_kubelet_has_not_started_has_used_nothing() -> None:
    history = JobHistory()
    waiting = ran("a", 4, start=T0 + 36_000)
    del waiting["status"]["startTime"]  # bound, not yet taken by the kubelet: no startTime
    history.observe(pods_of(waiting), NAMES, T0 + 36_000)
    started = ran("a", 4, start=T0 + 36_001)
    history.observe(pods_of(started), NAMES, T0 + 36_010)  # same pod, now started
    assert dict(history.usage.view(T0 + 36_010)) == {}  # its 10 h in the queue are not usage
    history.observe({}, NAMES, T0 + 36_101)
    assert history.usage.view(T0 + 36_101)["user/team-a"] == pytest.approx(4 * 100.0)


def test_each_pod_of_a_gang_is_charged_its_own_run_and_the_job_its_run_time() -> None:
    history = JobHistory()
    members = [
        ran("g-0", 2, start=T0, end=T0 + 500, phase="Succeeded", group="g"),
        ran("g-1", 2, start=T0 + 10, end=T0 + 900, phase="Succeeded", group="g"),
    ]
    history.observe(pods_of(*members), NAMES, T0 + 900)
    assert history.usage.view(T0 + 900)["user/team-a"] == pytest.approx(
        decayed(2 * 500, T0 + 500, T0 + 900) + 2 * 890
    )
    assert history.recent_runtimes == {"team-a": (900.0,)}


def test_a_finished_gang_whose_pods_go_one_by_one_is_charged_and_recorded_once() -> None:
    history = JobHistory()
    members = [ran(f"g-{i}", 1, start=T0 + i, end=T0 + 100, phase="Succeeded", group="g") for i in range(4)]
    for left in range(4, 0, -1):  # the garbage collector removes the oldest first
        history.observe(pods_of(*members[4 - left :]), NAMES, T0 + 200 + left)
    assert history.usage.view(T0 + 100)["user/team-a"] == pytest.approx(100 + 99 + 98 + 97)
    assert history.recent_runtimes == {"team-a": (100.0,)}


def test_a_failed_member_replaced_by_its_controller_is_charged_only_until_it_failed() -> None:
    history = JobHistory()
    failed = ran("g-0", 4, start=T0, end=T0 + 100, phase="Failed", group="g")
    other = ran("g-1", 4, start=T0, group="g")
    history.observe(pods_of(failed, other), NAMES, T0 + 200)
    assert history.usage.view(T0 + 100)["user/team-a"] == pytest.approx(4 * 100.0)
    replacement = ran("g-0b", 4, start=T0 + 300, group="g")
    history.observe(pods_of(failed, other, replacement), NAMES, T0 + 400)
    history.observe({}, NAMES, T0 + 1000)  # the job is deleted
    total = 4 * 100 + 4 * 1000 + 4 * 700
    assert history.usage.view(T0 + 1000)["user/team-a"] == pytest.approx(
        decayed(400, T0 + 100, T0 + 1000) + total - 400
    )


def test_history_keeps_each_users_latest_runs_in_end_order() -> None:
    history = JobHistory(history_jobs=3)
    pods = [ran(f"j{i}", end=T0 + 100 * (7 - i), phase="Succeeded") for i in range(6)]  # j5 ends first
    history.observe(pods_of(*pods), NAMES, T0 + 1000)
    assert history.recent_runtimes["team-a"] == (500.0, 600.0, 700.0)  # j2, j1, j0: the last to end


def test_a_restarted_history_rebuilds_the_usage_of_the_pods_still_in_the_api() -> None:
    pods = pods_of(
        ran("a", 2, start=T0, end=T0 + 3600, phase="Succeeded"),
        ran("b", 1, start=T0 + 100, end=T0 + 200, phase="Failed", namespace="team-b"),
        ran("c", 8, start=T0 + 50),
    )
    first, second = JobHistory(), JobHistory()
    first.observe(pods, NAMES, T0 + 4000)
    second.observe(pods, NAMES, T0 + 90_000)  # a new leader, a day later
    later = T0 + 100_000
    assert dict(first.usage.view(later)) == pytest.approx(dict(second.usage.view(later)))
    assert first.recent_runtimes == second.recent_runtimes


def test_usage_decays_with_the_half_life_from_the_pods_end() -> None:
    history = JobHistory(half_life_s=3600.0)
    history.observe(pods_of(ran("a", 1, end=T0 + 1000, phase="Succeeded")), NAMES, T0 + 1000)
    assert history.usage.view(T0 + 1000 + 3600)["user/team-a"] == pytest.approx(500.0)
    reference = UsageLedger(3600.0)
    reference.charge("user/team-a", 1000.0, T0 + 1000)
    assert history.usage.view(T0 + 9999)["user/team-a"] == pytest.approx(
        reference.value("user/team-a", T0 + 9999)
    )


def test_the_records_hold_only_pods_still_cached() -> None:
    history = JobHistory()
    first = ran("a", 1, start=T0, end=T0 + 100, phase="Succeeded")
    history.observe(pods_of(first), NAMES, T0 + 100)
    history.observe({}, NAMES, T0 + 200)  # garbage-collected
    assert not history._charged and not history._recorded and not history._running
    again = ran("a", 1, start=T0 + 300, end=T0 + 400, phase="Succeeded")  # the same name, a new pod
    assert history.observe(pods_of(again), NAMES, T0 + 400) == 1
    assert history.recent_runtimes == {"team-a": (100.0, 100.0)}


def test_an_ended_pod_without_a_container_end_ends_at_its_conditions_or_when_seen() -> None:
    history = JobHistory()
    seen = ran("a", 1)
    history.observe(pods_of(seen), NAMES, T0 + 10)
    failed = ran("a", 1, phase="Failed")  # an init container failed: no container ever finished
    history.observe(pods_of(failed), NAMES, T0 + 50)
    assert history.usage.view(T0 + 50)["user/team-a"] == pytest.approx(50.0)  # seen running: until seen ended
    restarted = JobHistory()
    restarted.observe(pods_of(failed), NAMES, T0 + 300_000)  # no end to go by: not charged
    assert dict(restarted.usage.view(T0 + 300_000)) == {}
    failed["status"]["conditions"] = [
        {"type": "Ready", "status": "False", "lastTransitionTime": utc_stamp(T0 + 70)}
    ]
    again = JobHistory()
    again.observe(pods_of(failed), NAMES, T0 + 300_000)
    assert again.usage.view(T0 + 70)["user/team-a"] == pytest.approx(70.0)


def mig_pod(name: str, profile: str, end: float) -> dict[str, Any]:
    pod = ran(name, 1, end=end, phase="Succeeded")
    resources = pod["spec"]["containers"][0]["resources"]
    resources["requests"] = {"cpu": "1", "memory": "1Gi"}
    resources["limits"] = {f"nvidia.com/mig-{profile}": "1"}
    return pod


def test_shares_and_mig_instances_count_by_their_gpu_share() -> None:
    history = JobHistory()
    nodes = {"n0": {"metadata": {"name": "n0", "labels": {tr.PRODUCT_LABEL: "NVIDIA-A30-24GB"}}}}
    history.observe(pods_of(mig_pod("s", "3g.40gb", T0 + 1000)), NAMES, T0 + 1000)
    assert history.usage.view(T0 + 1000)["user/team-a"] == pytest.approx(1000.0 * (3000 // 7) / 1000)
    a30 = JobHistory()
    a30.observe(pods_of(mig_pod("t", "4g.24gb", T0 + 1000)), NAMES, T0 + 1000, nodes=nodes)
    assert a30.usage.view(T0 + 1000)["user/team-a"] == pytest.approx(1000.0)  # 4 of the A30's 4 slices


def test_a_pod_whose_request_cannot_be_read_is_left_out_with_one_warning(caplog: Any) -> None:
    history = JobHistory()
    bad = ran("bad", 1, end=T0 + 10, phase="Succeeded")
    bad["spec"]["containers"][0]["resources"]["requests"]["cpu"] = "lots"
    good = ran("good", 1, end=T0 + 10, phase="Succeeded")
    with caplog.at_level(logging.WARNING, logger="loadmaster.kube.history"):
        for _ in range(3):
            history.observe(pods_of(bad, good), NAMES, T0 + 10)
    assert history.usage.view(T0 + 10)["user/team-a"] == pytest.approx(10.0)
    assert [r.getMessage().split(":")[0] for r in caplog.records] == ["fair share"]


def test_applied_puts_the_history_in_the_snapshot(caplog: Any) -> None:
    history = JobHistory()
    with caplog.at_level(logging.DEBUG, logger="loadmaster.kube.history"):
        history.observe(pods_of(ran("a", 1, end=T0 + 10, phase="Succeeded")), NAMES, T0 + 10)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines == [
        (
            logging.DEBUG,
            "fair-share usage charged: pod team-a/a Succeeded, 10 GPU-seconds to user team-a and "
            "group team-a",
        ),
        (logging.INFO, "fair-share usage charged for 1 pods that ended, 0.0 GPU-hours"),
    ]
    snapshot = history.applied(ClusterSnapshot.empty(a_cluster().nodes(1).build()), T0 + 10)
    assert snapshot.usage_gpu_s["user/team-a"] == pytest.approx(10.0)
    assert snapshot.recent_runtimes_s == {"team-a": (10.0,)}
    assert snapshot.recent_limits_s == {"team-a": (tr.DEFAULT_TIME_LIMIT_S,)}


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ValueError, match="half_life_s"):
        JobHistory(half_life_s=0)
    with pytest.raises(ValueError, match="history_jobs"):
        JobHistory(history_jobs=0)
