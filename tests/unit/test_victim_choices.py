"""Preemption's victim choices kept across cycles (``preempt._fewest_remembered``) are the choices
it would make afresh.

The ``fair`` profile (quota with reclaim by preemption) runs the ``lab`` workload twice, with the
memo and with every choice made afresh, and the decisions and every pending job's status are
compared cycle by cycle (``StatusLog``), and the job tables. The memo must also have answered
choices, or the comparison says nothing (at load 0.85 the first 800 jobs rarely preempt).
"""

from __future__ import annotations

import pytest

from builders import StatusLog, assert_same_tables
from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model import PendingJob, RunningJob
from loadmaster.scheduling.actions import preempt
from loadmaster.scheduling.placement import Scoring
from loadmaster.scheduling.session import Session
from loadmaster.sim import SimOptions, simulate


@pytest.mark.parametrize("load", [1.1, 1.3])
def test_remembered_victim_choices_are_the_choices_made_afresh(
    load: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_cluster("lab")
    trace = list(load_workload("lab", spec, jobs=800, load=load).jobs)
    remembered = preempt._fewest_remembered
    fresh = preempt._fewest
    answered = 0

    def counted(
        session: Session, pending: PendingJob, candidates: list[RunningJob], scoring: Scoring
    ) -> list[RunningJob]:
        nonlocal answered
        made = 0

        def made_here(*args: object) -> list[RunningJob]:
            nonlocal made
            made += 1
            return fresh(*args)  # type: ignore[arg-type]

        monkeypatch.setattr(preempt, "_fewest", made_here)
        victims = remembered(session, pending, candidates, scoring)
        monkeypatch.setattr(preempt, "_fewest", fresh)
        answered += not made
        return victims

    runs = []
    for choose in (counted, fresh):
        monkeypatch.setattr(preempt, "_fewest_remembered", choose)
        scheduler = StatusLog(load_profiles()["fair"])
        runs.append((simulate(spec.nodes, scheduler, trace, SimOptions()).jobs, scheduler))
    (table, log), (fresh_table, fresh_log) = runs
    assert answered > 100, answered  # the memo answered choices in this run
    assert log.cycles == fresh_log.cycles
    assert_same_tables(table, fresh_table)
