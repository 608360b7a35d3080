"""The backfill walk's memo-answered visits (``backfill._Walk.answered``) are the visits they skip.

Each case runs the ``lab`` workload through a backfilling profile twice, with the shortcut and with
every job visited (``answered`` returning False), and compares the decisions and every pending
job's status, cycle by cycle (``StatusLog``), and the job tables. The shortcut must also have
answered visits, or the comparison says nothing.
"""

from __future__ import annotations

import pytest

from builders import StatusLog, assert_same_tables
from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model import PendingJob
from loadmaster.scheduling.actions import backfill
from loadmaster.sim import SimOptions, simulate


@pytest.mark.parametrize(
    ("name", "load"), [("sds", 1.1), ("nsml", 1.1), ("slurm", 1.1), ("learned-fair", 1.6), ("learned", 1.1)]
)
def test_answered_visits_are_the_visits_they_skip(
    name: str, load: float, monkeypatch: pytest.MonkeyPatch
) -> None:
    spec = load_cluster("lab")
    trace = list(load_workload("lab", spec, jobs=600, load=load).jobs)
    answered = backfill._Walk.answered
    count = 0

    def counted(walk: backfill._Walk, pending: PendingJob) -> bool:
        nonlocal count
        found = answered(walk, pending)
        count += found
        return found

    runs = []
    for shortcut in (counted, lambda walk, pending: False):
        monkeypatch.setattr(backfill._Walk, "answered", shortcut)
        scheduler = StatusLog(load_profiles()[name])
        runs.append((simulate(spec.nodes, scheduler, trace, SimOptions()).jobs, scheduler))
    (table, log), (visited_table, visited) = runs
    assert count > 200, count  # the shortcut answered visits in this run
    assert log.cycles == visited.cycles
    assert_same_tables(table, visited_table)
