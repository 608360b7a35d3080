"""The reclaim loop: notify after the idle threshold, act after the grace, leave busy and exempt jobs
alone, start over when a job works again, dry run by default."""

from __future__ import annotations

import pytest

from loadmaster.errors import ModelError
from loadmaster.scheduling.reclaim import (
    JobActivity,
    ReclaimAction,
    ReclaimPolicy,
    ReclaimTracker,
    Step,
)

POLICY = ReclaimPolicy(
    pool="interactive", idle_after_s=1800, grace_s=600, exempt_namespaces=frozenset({"ops"})
)


def job(name: str = "nb", idle_since: float | None = 0.0, **kw: object) -> JobActivity:
    base: dict[str, object] = {"owner": "ann", "pool": "interactive", "namespace": "team-a", "gpus": 2}
    base.update(kw)
    return JobActivity(name, idle_since_s=idle_since, **base)  # type: ignore[arg-type]


def steps(
    tracker: ReclaimTracker, times: list[float], jobs: list[JobActivity]
) -> list[tuple[float, str, str]]:
    return [(d.at_s, d.job, d.step.value) for t in times for d in tracker.observe(t, jobs)]


def test_notify_after_the_threshold_then_act_after_the_grace_once() -> None:
    tracker = ReclaimTracker([POLICY])
    assert steps(tracker, [0, 1000, 1800, 2000, 2400, 3000], [job()]) == [
        (1800, "nb", "notify"),
        (2400, "nb", "act"),
    ]
    (decision,) = ReclaimTracker([POLICY]).observe(1800, [job()])
    assert decision.dry_run and decision.action is ReclaimAction.EVICT
    assert "idle for 30 min" in decision.reason and decision.idle_gpu_hours == pytest.approx(1.0)


@pytest.mark.parametrize(
    ("activity", "why"),
    [
        (job(idle_since=None), "busy"),
        (job(namespace="ops"), "exempt namespace"),
        (job(labels={"loadmaster.io/reclaim": "never"}), "exempt label"),
        (job(pool="training"), "no policy for the pool"),
    ],
)
def test_jobs_out_of_reach_get_nothing(activity: JobActivity, why: str) -> None:
    policy = ReclaimPolicy(
        pool="interactive", idle_after_s=60, grace_s=0, exempt_namespaces=frozenset({"ops"}),
        exempt_labels={"loadmaster.io/reclaim": "never"},
    )  # fmt: skip
    assert steps(ReclaimTracker([policy]), [0, 100, 10_000], [activity]) == [], why


def test_a_job_that_works_again_starts_over() -> None:
    tracker = ReclaimTracker([POLICY])
    assert steps(tracker, [1800], [job()]) == [(1800, "nb", "notify")]
    assert steps(tracker, [2000], [job(idle_since=None)]) == []  # used its GPUs before the grace ran out
    assert tracker.notified("nb") is None
    assert steps(tracker, [2400, 3900, 4500], [job(idle_since=2100)]) == [
        (3900, "nb", "notify"),
        (4500, "nb", "act"),
    ]


def test_an_operator_exemption_and_a_catch_all_policy() -> None:
    tracker = ReclaimTracker([POLICY, ReclaimPolicy(idle_after_s=60, grace_s=60, action=ReclaimAction.MARK)])
    tracker.exempt("nb")
    training = job("train", pool="training")
    found = tracker.observe(120, [job(), training])
    assert [(d.job, d.step) for d in found] == [("train", Step.NOTIFY)]
    assert tracker.observe(180, [training])[0].action is ReclaimAction.MARK
    assert "nb" not in tracker.exempted  # it ended: the exemption goes with it


def test_bad_policies_are_refused() -> None:
    with pytest.raises(ModelError, match="idle_after_s must be > 0"):
        ReclaimPolicy(idle_after_s=0)
    with pytest.raises(ModelError, match="one reclaim policy per pool"):
        ReclaimTracker([ReclaimPolicy(), ReclaimPolicy()])


def test_an_interactive_session_is_told_first_then_reclaimed_after_the_same_grace() -> None:
    tracker = ReclaimTracker([POLICY])  # idle_after_s 1800, first_idle_after_s 900 (default), grace 600
    jobs = [job("train"), job("nb", first=True)]
    assert steps(tracker, [0, 900, 1500, 1800, 2400], jobs) == [
        (900, "nb", "notify"),
        (1500, "nb", "act"),
        (1800, "train", "notify"),
        (2400, "train", "act"),
    ]
    (decision,) = ReclaimTracker([POLICY]).observe(900, [job("nb", first=True)])
    assert "interactive session, policy: 15 min" in decision.reason
    # a pool whose ordinary threshold is already shorter does not wait longer for a session
    quick = ReclaimPolicy(pool="interactive", idle_after_s=300, grace_s=0)
    assert quick.idle_after_for(job(first=True)) == 300


def test_an_idle_start_read_a_little_differently_each_look_is_the_same_stretch() -> None:
    """Telemetry read over a moving window puts a stretch's start a little differently at each look
    (found against a real Prometheus: the notice was repeated every look and the action never came);
    a start after the previous look means the job worked in between: a new stretch."""
    tracker = ReclaimTracker([POLICY])
    looks = [(1800, 0.0), (2100, 12.0), (2400, 7.0)]
    assert [steps(tracker, [t], [job(idle_since=s)]) for t, s in looks] == [
        [(1800, "nb", "notify")], [], [(2400, "nb", "act")],
    ]  # fmt: skip
    tracker = ReclaimTracker([POLICY])
    assert steps(tracker, [1800], [job(idle_since=0.0)]) == [(1800, "nb", "notify")]
    assert steps(tracker, [2400, 3700], [job(idle_since=1900.0)]) == [(3700, "nb", "notify")]


def test_a_restored_notice_goes_on_unless_the_job_worked_since() -> None:
    """A tracker told by the ledger that the owner was told at 1800 (idle since 0) acts at 2400 without
    telling again; a job idle only since after that notice, or acted on already, is not continued."""
    same = ReclaimTracker([POLICY])
    same.restore("nb", 1800, acted=False)
    assert steps(same, [2000, 2400], [job()]) == [(2400, "nb", "act")]
    worked = ReclaimTracker([POLICY])
    worked.restore("nb", 1800, acted=False)
    assert steps(worked, [4000, 4600], [job(idle_since=2000)]) == [
        (4000, "nb", "notify"),
        (4600, "nb", "act"),
    ]
    done = ReclaimTracker([POLICY])
    done.restore("nb", 1800, acted=True)
    assert steps(done, [2000, 2400, 9000], [job()]) == []
