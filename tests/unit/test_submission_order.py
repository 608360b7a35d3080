"""The scheduler's check that a queue is in submission order, which lets an order sort by a prefix."""

from __future__ import annotations

import pytest

from builders import a_job
from loadmaster.model import Job
from loadmaster.scheduling.scheduler import _in_submission_order


def _jobs(times: list[float], ids: list[str]) -> list[Job]:
    return [a_job(i).submitted(t).build() for t, i in zip(times, ids, strict=True)]


@pytest.mark.parametrize("count", [5, 200])
def test_the_check_agrees_with_sorting_by_submit_time_then_id(count: int) -> None:
    """Short and long queues (long ones compare the submit times as an array first, and read ids
    only on ties) give what sorting by (submit time, id) says."""
    ids = [f"j{i:04d}" for i in range(count)]
    rising = [float(i) for i in range(count)]
    assert _in_submission_order(_jobs(rising, ids))
    assert _in_submission_order(_jobs(rising, ids[::-1]))  # strictly later times: ids never decide
    ties = [float(i // 2) for i in range(count)]
    assert _in_submission_order(_jobs(ties, ids))
    assert not _in_submission_order(_jobs(ties, [*ids[:2][::-1], *ids[2:]]))  # a tie out of id order
    assert not _in_submission_order(_jobs([*rising[:-2], rising[-1], rising[-2]], ids))
