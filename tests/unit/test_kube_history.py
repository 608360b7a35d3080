"""JobHistory: fair-share usage and run-time history of the jobs a Kubernetes scheduler ran."""

from __future__ import annotations

import logging
from typing import Any

import pytest

from builders import a_cluster
from kube.helpers import a_pod
from loadmaster.kube import translate as tr
from loadmaster.kube.cluster import utc_stamp
from loadmaster.kube.history import JobHistory
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
    usage = history.usage.view(T0 + 3600)  # charged at the job's end
    assert usage["user/team-a"] == pytest.approx(7200.0)
    assert usage["group/team-a"] == pytest.approx(7200.0)
    assert history.usage.view(now)["user/team-a"] == pytest.approx(decayed(7200.0, T0 + 3600, now))
    assert history.recent_runtimes == {"team-a": (3600.0,)}
    assert history.recent_limits == {"team-a": (tr.DEFAULT_TIME_LIMIT_S,)}


def test_a_failed_job_is_charged_without_history_and_other_schedulers_pods_are_not() -> None:
    history = JobHistory()
    failed = ran("a", 1, end=T0 + 100, phase="Failed")
    theirs = ran("b", 8, end=T0 + 100, phase="Succeeded", scheduler="default-scheduler")
    history.observe(pods_of(failed, theirs), NAMES, T0 + 100)
    assert history.usage.view(T0 + 100)["user/team-a"] == pytest.approx(100.0)
    assert dict(history.usage.view(T0 + 100)).keys() == {"user/team-a", "group/team-a"}
    assert history.recent_runtimes == {}


def test_a_job_that_disappears_while_running_is_charged_up_to_when_it_was_found_gone() -> None:
    history = JobHistory()
    history.observe(pods_of(ran("a", 4)), NAMES, T0 + 10)
    assert history.usage.view(T0 + 10).get("user/team-a") is None  # running: nothing charged yet
    assert history.observe({}, NAMES, T0 + 1000) == 1
    assert history.usage.view(T0 + 1000)["user/team-a"] == pytest.approx(4 * 1000.0)
    assert history.recent_runtimes == {}
    assert history.observe({}, NAMES, T0 + 2000) == 0  # once


def test_a_gang_runs_from_its_first_start_to_its_last_end_on_all_its_gpus() -> None:
    history = JobHistory()
    members = [
        ran("g-0", 2, start=T0, end=T0 + 500, phase="Succeeded", group="g"),
        ran("g-1", 2, start=T0 + 10, end=T0 + 900, phase="Succeeded", group="g"),
    ]
    history.observe(pods_of(*members), NAMES, T0 + 900)
    assert history.usage.view(T0 + 900)["user/team-a"] == pytest.approx(4 * 900.0)
    assert history.recent_runtimes == {"team-a": (900.0,)}


def test_a_gang_with_a_member_still_running_is_running() -> None:
    history = JobHistory()
    members = [
        ran("g-0", 1, end=T0 + 500, phase="Succeeded", group="g"),
        ran("g-1", 1, group="g"),
    ]
    assert history.observe(pods_of(*members), NAMES, T0 + 600) == 0
    assert not history.recent_runtimes


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


def test_usage_decays_with_the_half_life_from_the_jobs_end() -> None:
    history = JobHistory(half_life_s=3600.0)
    history.observe(pods_of(ran("a", 1, end=T0 + 1000, phase="Succeeded")), NAMES, T0 + 1000)
    assert history.usage.view(T0 + 1000 + 3600)["user/team-a"] == pytest.approx(500.0)
    reference = UsageLedger(3600.0)
    reference.charge("user/team-a", 1000.0, T0 + 1000)
    assert history.usage.view(T0 + 9999)["user/team-a"] == pytest.approx(
        reference.value("user/team-a", T0 + 9999)
    )


def test_the_record_of_charged_jobs_holds_only_pods_still_cached() -> None:
    history = JobHistory()
    first = ran("a", 1, start=T0, end=T0 + 100, phase="Succeeded")
    history.observe(pods_of(first), NAMES, T0 + 100)
    history.observe({}, NAMES, T0 + 200)  # garbage-collected
    assert not history._charged
    again = ran("a", 1, start=T0 + 300, end=T0 + 400, phase="Succeeded")  # the same name, a new run
    assert history.observe(pods_of(again), NAMES, T0 + 400) == 1
    assert history.recent_runtimes == {"team-a": (100.0, 100.0)}


def test_a_finished_pod_without_an_end_time_ends_when_first_seen_so() -> None:
    history = JobHistory()
    pod = ran("a", 1, phase="Failed")  # evicted before a container ran: no finishedAt
    history.observe(pods_of(pod), NAMES, T0 + 50)
    assert history.usage.view(T0 + 50)["user/team-a"] == pytest.approx(50.0)


def test_shares_and_mig_instances_count_by_their_gpu_share() -> None:
    history = JobHistory()
    share = ran("s", 1, end=T0 + 1000, phase="Succeeded")
    requests = share["spec"]["containers"][0]["resources"]
    requests["requests"]["nvidia.com/gpu"] = "0"
    requests["limits"] = {"nvidia.com/mig-3g.40gb": "1"}
    history.observe(pods_of(share), NAMES, T0 + 1000)
    assert history.usage.view(T0 + 1000)["user/team-a"] == pytest.approx(1000.0 * (3000 // 7) / 1000)


def test_applied_puts_the_history_in_the_snapshot(caplog: Any) -> None:
    history = JobHistory()
    with caplog.at_level(logging.DEBUG, logger="loadmaster.kube.history"):
        history.observe(pods_of(ran("a", 1, end=T0 + 10, phase="Succeeded")), NAMES, T0 + 10)
    lines = [(r.levelno, r.getMessage()) for r in caplog.records]
    assert lines == [
        (
            logging.DEBUG,
            "fair-share usage charged: team-a/a succeeded, 10 GPU-seconds to user team-a and group team-a",
        ),
        (logging.INFO, "fair-share usage charged for 1 jobs that ended (1 succeeded), 0.0 GPU-hours"),
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


def test_a_job_whose_pods_were_replaced_is_charged_for_the_run_that_ended() -> None:
    history = JobHistory()
    history.observe(pods_of(ran("a", 2, start=T0)), NAMES, T0 + 100)
    replaced = ran("a", 2, start=T0 + 500)  # the controller made a new pod of the same name
    assert history.observe(pods_of(replaced), NAMES, T0 + 600) == 1
    assert history.usage.view(T0 + 600)["user/team-a"] == pytest.approx(2 * 600.0)
    assert history.observe(pods_of(replaced), NAMES, T0 + 700) == 0  # the new run: not yet


def test_a_gang_that_binds_more_members_is_charged_for_all_of_them() -> None:
    history = JobHistory()
    first = ran("g-0", 1, start=T0, group="g")
    waiting = a_pod("g-1", 1, "g", "team-a")
    waiting["metadata"]["creationTimestamp"] = utc_stamp(T0 - 60)
    history.observe(pods_of(first, waiting), NAMES, T0 + 10)
    both = pods_of(first, ran("g-1", 1, start=T0 + 20, group="g"))
    history.observe(both, NAMES, T0 + 30)
    history.observe({}, NAMES, T0 + 100)
    assert history.usage.view(T0 + 100)["user/team-a"] == pytest.approx(2 * 100.0)
