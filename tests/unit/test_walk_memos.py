"""The walks' memos change no decision: the same job table with every shortcut on or off.

The non-strict walk sorts a long queue into verdict classes (``allocate._walk_runs``), failed
placements are remembered until the next bind (``allocate._place_on_cycle_state``) and so is
whether a request fits with no eviction (``preempt._fits_now``). Each is a pure speed-up: here
a lab workload at a load that keeps a queue is simulated with the shortcuts forced on for every
cycle (a class table even for a short queue) and with them all off, and the job tables compared
column by column, and every cycle's decisions and reasons.
"""

from __future__ import annotations

import numpy as np
import pytest

from builders import a_cluster, a_job, a_snapshot, cycle, profile
from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model import ClusterSnapshot, JobTable
from loadmaster.scheduling import CycleResult, Scheduler
from loadmaster.scheduling.actions import allocate, preempt
from loadmaster.sim import SimOptions, simulate

COLUMNS = ("start_s", "end_s", "node_names", "preemptions", "reason", "wait_reason", "gpus")


class _Recording(Scheduler):
    """The scheduler, also keeping every cycle's decisions and every waiting job's reason."""

    def __init__(self, *args: object) -> None:
        super().__init__(*args)  # type: ignore[arg-type]
        self.cycles: list[tuple[str, list[tuple[str, str]]]] = []

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        result = super().cycle(snapshot, now, rng)
        self.cycles.append((repr(result.decisions), [(k, str(v)) for k, v in result.statuses.items()]))
        return result


def _run(profile_name: str) -> tuple[JobTable, list[tuple[str, list[tuple[str, str]]]]]:
    cluster = load_cluster("lab")
    workload = load_workload("lab", cluster, jobs=500, load=1.6)
    scheduler = _Recording(load_profiles()[profile_name])
    return simulate(cluster.nodes, scheduler, workload.jobs, SimOptions()).jobs, scheduler.cycles


@pytest.mark.parametrize("profile_name", ["fair", "kube-default"])
def test_the_shortcuts_change_no_decision(profile_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as forced:
        forced.setattr(allocate, "_RUNS_MIN_QUEUE", 1)
        fast, fast_cycles = _run(profile_name)
    with monkeypatch.context() as plain:
        plain.setattr(allocate, "_RUNS_MIN_QUEUE", 10**9)
        plain.setattr(allocate, "_failure_key", lambda *args, **kwargs: None)
        plain.setattr(preempt, "_fits_now", lambda s, p, scoring: preempt._fits_without(s, p, [], scoring))
        slow, slow_cycles = _run(profile_name)
    assert np.isfinite(np.asarray(fast.start_s, dtype=float)).any()  # some jobs ran
    assert any(reason for reason in fast.wait_reason)  # and some waited, with a reason
    assert fast_cycles == slow_cycles  # every cycle: the same binds and evictions, every reason
    for column in COLUMNS:
        assert np.asarray(getattr(fast, column)).tolist() == np.asarray(getattr(slow, column)).tolist(), (
            column
        )


def test_a_bind_makes_the_walk_ask_admission_again(monkeypatch: pytest.MonkeyPatch) -> None:
    # b lends 3 GPUs: group a's 8-GPU jobs wait, and the reason says what b can lend. b's bind
    # between two such jobs lends less, so the second job's reason must be asked again.
    monkeypatch.setattr(allocate, "_RUNS_MIN_QUEUE", 1)
    orgs = {"org": {"groups": {"a": {"nominal": 4, "borrowing_limit": 8}, "b": {"nominal": 4}}}}
    chosen = profile("fifo", "gang", "first-fit", "quota", strict=False, args={"quota": {"orgs": orgs}})
    cluster = a_cluster().nodes(2, gpus=8).build()
    jobs = [
        a_job("a1").user("ua", "a").gpus(8).submitted(0),
        a_job("b1").user("ub", "b").gpus(2).submitted(1),
        a_job("a2").user("ua", "a").gpus(8).submitted(2),
    ]
    running = a_job("b0").user("ub", "b").gpus(1)
    result = cycle(chosen, a_snapshot(cluster).running(running, "n0").pending(*jobs).build())

    assert [b.job_id for b in result.binds] == ["b1"]
    assert result.statuses["a1"].reason.endswith("org org can lend 3 more")
    assert result.statuses["a2"].reason.endswith("org org can lend 1 more")
