"""Failed placements kept across cycles by the free resources they were tried on (``view_failures``).

The memo is exact only if a failure is a function of what its key holds: the free resources, the
node table, the allowed nodes and what fit reads of the job. The runs below compare, cycle by
cycle, every decision and every waiting job's status of a backfilling profile with the memo and
without it, on the lab cluster where thousands of placements fail on shadows that come back.
"""

from __future__ import annotations

import pytest
from tests.builders import assert_same_tables, lab_runs_with_and_without

from loadmaster.scheduling.status import unschedulable
from loadmaster.scheduling.view_failures import PER_VIEW, VIEWS, ViewFailures

RUNS = [("sds", 1.1), ("slurm", 1.1), ("nsml", 1.6), ("learned", 1.1)]


@pytest.mark.parametrize(("name", "load"), RUNS)
def test_every_cycle_decides_and_explains_as_without_the_memo(name: str, load: float) -> None:
    (jobs, kept), (jobs_off, off) = lab_runs_with_and_without(name, load, ["_view_failures"])
    remembered, tried = kept.placements_remembered
    assert remembered > 0 and tried > 0, "the memo answered nothing: this run would prove nothing"
    assert off.placements_remembered == (0, 0)
    assert len(kept.cycles) == len(off.cycles)
    for number, (with_memo, without) in enumerate(zip(kept.cycles, off.cycles, strict=True)):
        assert with_memo == without, f"cycle {number} differs"
    assert_same_tables(jobs, jobs_off)


def test_a_failure_is_answered_only_for_the_same_view_and_key() -> None:
    memo = ViewFailures()
    failure = unschedulable("0 of 4 nodes have a free GPU", "fit")
    memo.put(("nodes", b"\x00\x01"), ("mask", 1000), failure)
    assert memo.get(("nodes", b"\x00\x01"), ("mask", 1000)) is failure
    assert memo.get(("nodes", b"\x00\x02"), ("mask", 1000)) is None  # one byte of free resources
    assert memo.get(("nodes", b"\x00\x01"), ("mask", 2000)) is None  # another request
    assert (memo.hits, memo.misses) == (1, 1)


def test_the_memo_keeps_the_newest_views_and_a_bounded_number_of_failures_each() -> None:
    memo = ViewFailures()
    failure = unschedulable("no room", "fit")
    for view in range(VIEWS + 5):
        memo.put(view, "key", failure)
    assert memo.get(0, "key") is None  # the oldest views are dropped
    assert memo.get(VIEWS + 4, "key") is failure
    for key in range(PER_VIEW + 1):
        memo.put("busy", key, failure)
    assert memo.get("busy", 0) is None  # a full view starts afresh
    assert memo.get("busy", PER_VIEW) is failure
