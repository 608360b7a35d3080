"""The walks' memos change no decision: the same job table with every shortcut on or off.

The non-strict walk sorts a long queue into verdict classes (``allocate._walk_runs``), failed
placements are remembered until the next bind (``allocate._place_on_cycle_state``) and so is
whether a request fits with no eviction (``preempt._fits_now``). Each is a pure speed-up: here
a lab workload at a load that keeps a queue is simulated with the shortcuts forced on for every
cycle (a class table even for a short queue) and with them all off, and the job tables compared
column by column, reasons included.
"""

from __future__ import annotations

import numpy as np
import pytest

from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model import JobTable
from loadmaster.scheduling import Scheduler
from loadmaster.scheduling.actions import allocate, preempt
from loadmaster.sim import SimOptions, simulate

COLUMNS = ("start_s", "end_s", "node_names", "preemptions", "reason", "wait_reason", "gpus")


def _table(profile_name: str) -> JobTable:
    cluster = load_cluster("lab")
    workload = load_workload("lab", cluster, jobs=500, load=1.6)
    scheduler = Scheduler(load_profiles()[profile_name])
    return simulate(cluster.nodes, scheduler, workload.jobs, SimOptions()).jobs


@pytest.mark.parametrize("profile_name", ["fair", "kube-default"])
def test_the_shortcuts_change_no_decision(profile_name: str, monkeypatch: pytest.MonkeyPatch) -> None:
    with monkeypatch.context() as forced:
        forced.setattr(allocate, "_RUNS_MIN_QUEUE", 1)
        fast = _table(profile_name)
    with monkeypatch.context() as plain:
        plain.setattr(allocate, "_RUNS_MIN_QUEUE", 10**9)
        plain.setattr(allocate, "_failure_key", lambda *args: None)
        plain.setattr(preempt, "_fits_now", lambda s, p, scoring: preempt._fits_without(s, p, [], scoring))
        slow = _table(profile_name)
    assert np.isfinite(np.asarray(fast.start_s, dtype=float)).any()  # some jobs ran
    assert any(reason for reason in fast.wait_reason)  # and some waited, with a reason
    for column in COLUMNS:
        assert np.asarray(getattr(fast, column)).tolist() == np.asarray(getattr(slow, column)).tolist(), column
