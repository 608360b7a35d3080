"""Allocation over the arrival window beside the whole run; Jain undefined with fewer than two users."""

from __future__ import annotations

import math

import pytest
from test_metrics import a_job, make_table, make_timeline

from loadmaster.metrics import summarize
from loadmaster.metrics.summary import window_mean


def test_allocation_over_the_arrival_window_leaves_the_drain_out() -> None:
    # 4 GPUs for 10 s, 8 for 20 s, then a drain of 70 s at 2: jobs arrive at 0 and at 30.
    timeline = make_timeline([0.0, 10.0, 30.0, 100.0], [[4], [8], [2], [0]])
    table = make_table(a_job("a").ran(0, 0, 100), a_job("b").ran(30, 30, 70))
    s = summarize(table, timeline)
    assert s.allocation_arrivals == pytest.approx((4 * 10 + 8 * 20) / 30 / 8)
    assert s.allocation_mean == pytest.approx((4 * 10 + 8 * 20 + 2 * 70) / 100 / 8)


@pytest.mark.parametrize(
    ("start", "end", "expected"),
    [
        pytest.param(0.0, 30.0, (4 * 10 + 8 * 20) / 30, id="whole-steps"),
        pytest.param(5.0, 15.0, (4 * 5 + 8 * 5) / 10, id="inside-steps"),
        pytest.param(-10.0, 10.0, 4.0, id="clipped-to-the-samples"),
        pytest.param(20.0, 20.0, math.nan, id="empty-window"),
    ],
)
def test_window_mean(start: float, end: float, expected: float) -> None:
    value = window_mean([0.0, 10.0, 30.0], [4.0, 8.0, 0.0], start, end)
    assert value == pytest.approx(expected, nan_ok=True)


def test_jain_is_undefined_for_one_user() -> None:
    table = make_table(a_job("a").ran(0, 0, 100), a_job("b").ran(0, 50, 100))
    assert math.isnan(summarize(table, make_timeline([0.0, 1.0], [[1], [0]])).jain_fairness)
