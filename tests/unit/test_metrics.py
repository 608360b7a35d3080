"""Outcome metrics, checked against hand-computed values on small built runs."""

from __future__ import annotations

import json
import math
from dataclasses import dataclass, replace

import numpy as np
import pytest

from loadmaster.errors import ModelError
from loadmaster.metrics import (
    bounded_slowdown,
    jain_index,
    slowdown,
    summarize,
    time_weighted_mean,
)
from loadmaster.model import JobTable, Timeline, size_class

NAN = float("nan")


@dataclass(frozen=True)
class JobRow:
    """Fluent builder for one JobTable row: ``a_job("j1").by("alice").ran(0, 10, 100)``."""

    job_id: str
    user: str = "u1"
    group: str = "g1"
    queue: str = "default"
    pool: str = "p0"
    tasks: int = 1
    gpus: float = 1.0
    submit_s: float = 0.0
    start_s: float = NAN
    end_s: float = NAN
    duration_s: float = 100.0
    time_limit_s: float = 3600.0
    held_idle_gpu_s: float = 0.0
    reason: str = ""
    preemptions: int = 0
    lost_gpu_s: float = 0.0

    def by(self, user: str, group: str = "g1") -> JobRow:
        return replace(self, user=user, group=group)

    def using(self, gpus: float) -> JobRow:
        return replace(self, gpus=gpus)

    def ran(self, submit_s: float, start_s: float, duration_s: float) -> JobRow:
        """Started at ``start_s`` and ran to completion."""
        return replace(
            self,
            submit_s=submit_s,
            start_s=start_s,
            end_s=start_s + duration_s,
            duration_s=duration_s,
        )

    def running(self, submit_s: float, start_s: float) -> JobRow:
        """Started but still running when the run ended."""
        return replace(self, submit_s=submit_s, start_s=start_s, reason="")

    def pending(self, submit_s: float, reason: str = "pending at end of run") -> JobRow:
        return replace(self, submit_s=submit_s, reason=reason)

    def rejected(self, submit_s: float = 0.0) -> JobRow:
        return replace(self, submit_s=submit_s, reason="rejected: asks for more GPUs than exist")

    def held_idle(self, gpu_s: float) -> JobRow:
        return replace(self, held_idle_gpu_s=gpu_s)

    def preempted(self, times: int, lost_gpu_s: float) -> JobRow:
        return replace(self, preemptions=times, lost_gpu_s=lost_gpu_s)


def a_job(job_id: str) -> JobRow:
    return JobRow(job_id)


def make_table(*rows: JobRow) -> JobTable:
    """A JobTable with one row per builder row."""

    def col(name: str, dtype: type) -> np.ndarray:
        return np.array([getattr(r, name) for r in rows], dtype=dtype)

    return JobTable(
        job_id=col("job_id", np.str_),
        user=col("user", np.str_),
        group=col("group", np.str_),
        queue=col("queue", np.str_),
        pool=col("pool", np.str_),
        size_class=np.array([size_class(r.gpus) for r in rows], dtype=np.str_),
        tasks=col("tasks", np.int64),
        gpus=col("gpus", np.float64),
        submit_s=col("submit_s", np.float64),
        start_s=col("start_s", np.float64),
        end_s=col("end_s", np.float64),
        duration_s=col("duration_s", np.float64),
        time_limit_s=col("time_limit_s", np.float64),
        nodes_used=np.array([0 if math.isnan(r.start_s) else 1 for r in rows], dtype=np.int64),
        node_names=np.array(["" if math.isnan(r.start_s) else "n0" for r in rows], dtype=np.str_),
        held_idle_gpu_s=col("held_idle_gpu_s", np.float64),
        reason=col("reason", np.str_),
        preemptions=col("preemptions", np.int64),
        lost_gpu_s=col("lost_gpu_s", np.float64),
        wait_reason=np.full(len(rows), "", dtype=np.str_),
        estimated_start_s=np.full(len(rows), np.nan),
    )


def make_timeline(
    time_s: list[float],
    allocated: list[list[float]],
    pool_gpus: tuple[int, ...] = (8,),
    queue: list[list[int]] | None = None,
    fragmented: list[list[float]] | None = None,
) -> Timeline:
    """A Timeline with (samples, pools) columns; free GPUs follow from the allocation."""
    alloc = np.array(allocated, dtype=np.float64).reshape(len(time_s), len(pool_gpus))
    shape = alloc.shape
    return Timeline(
        pools=tuple(f"p{i}" for i in range(len(pool_gpus))),
        pool_gpus=np.array(pool_gpus, dtype=np.int64),
        time_s=np.array(time_s, dtype=np.float64),
        allocated_gpus=alloc,
        queue_length=np.array(queue if queue is not None else np.zeros(shape), dtype=np.int64),
        fragmented_gpus=np.array(
            fragmented if fragmented is not None else np.zeros(shape), dtype=np.float64
        ).reshape(shape),
        free_gpus=np.array(pool_gpus, dtype=np.float64) - alloc,
    )


EMPTY_TIMELINE = make_timeline([], [])


@pytest.mark.parametrize(
    ("submit_s", "start_s", "duration_s", "wait_s", "bsld"),
    [
        pytest.param(0.0, 100.0, 1000.0, 100.0, 1.1, id="long-job"),
        pytest.param(0.0, 20.0, 5.0, 20.0, 2.5, id="short-job-uses-10s-bound"),
        pytest.param(0.0, 0.0, 5.0, 0.0, 1.0, id="short-no-wait-floored-at-1"),
        pytest.param(50.0, 50.0, 100.0, 0.0, 1.0, id="no-wait"),
        pytest.param(0.0, 300.0, 10.0, 300.0, 31.0, id="at-bound"),
    ],
)
def test_single_job_wait_and_bounded_slowdown(
    submit_s: float, start_s: float, duration_s: float, wait_s: float, bsld: float
) -> None:
    table = make_table(a_job("j").ran(submit_s, start_s, duration_s))
    s = summarize(table, EMPTY_TIMELINE)
    assert s.mean_wait_s == pytest.approx(wait_s)
    assert s.max_wait_s == pytest.approx(wait_s)
    assert s.mean_jct_s == pytest.approx(wait_s + duration_s)
    assert s.mean_bounded_slowdown == pytest.approx(bsld)
    assert s.mean_slowdown == pytest.approx((wait_s + duration_s) / duration_s)


@pytest.mark.parametrize(
    ("wait_s", "run_s", "bound_s", "expected"),
    [
        (100.0, 1000.0, 10.0, 1.1),
        (20.0, 5.0, 10.0, 2.5),
        (0.0, 5.0, 10.0, 1.0),
        (20.0, 5.0, 60.0, 1.0),
        (120.0, 5.0, 60.0, 125.0 / 60.0),
        (NAN, 5.0, 10.0, NAN),
    ],
)
def test_bounded_slowdown(wait_s: float, run_s: float, bound_s: float, expected: float) -> None:
    got = bounded_slowdown(np.array([wait_s]), np.array([run_s]), bound_s)
    np.testing.assert_allclose(got, [expected])


def test_bounded_slowdown_rejects_nonpositive_bound() -> None:
    with pytest.raises(ModelError, match="bound_s"):
        bounded_slowdown([1.0], [1.0], bound_s=0.0)


def test_slowdown_is_elementwise_and_zero_run_is_inf() -> None:
    got = slowdown([0.0, 10.0, 5.0], [10.0, 10.0, 0.0])
    np.testing.assert_allclose(got, [1.0, 2.0, np.inf])


@pytest.mark.parametrize(
    ("values", "expected"),
    [
        pytest.param([3.0, 3.0, 3.0, 3.0], 1.0, id="equal"),
        pytest.param([5.0, 0.0, 0.0, 0.0], 0.25, id="one-hot"),
        pytest.param([1.0, 0.0], 0.5, id="one-hot-2"),
        pytest.param([1.0, 2.0, 3.0], 36.0 / 42.0, id="hand"),
        pytest.param([0.0, 0.0], 1.0, id="all-zero-is-equal"),
        pytest.param([2.0, NAN, 2.0], 1.0, id="nan-ignored"),
    ],
)
def test_jain_index(values: list[float], expected: float) -> None:
    assert jain_index(values) == pytest.approx(expected)


def test_jain_index_of_nothing_is_nan() -> None:
    assert math.isnan(jain_index([]))


def test_time_weighted_allocation_three_samples() -> None:
    # 4 GPUs for 10 s, 8 for 20 s; the last sample holds for no time.
    timeline = make_timeline([0.0, 10.0, 30.0], [[4], [8], [0]], fragmented=[[2], [0], [8]])
    s = summarize(make_table(), timeline)
    assert s.allocation_mean == pytest.approx((4 * 10 + 8 * 20) / 30 / 8)
    assert s.fragmentation_mean == pytest.approx((2 * 10) / 30 / 8)


def test_time_weighted_allocation_sums_pools() -> None:
    timeline = make_timeline([0.0, 10.0, 30.0], [[2, 2], [4, 4], [0, 0]], pool_gpus=(4, 4))
    s = summarize(make_table(), timeline)
    assert s.allocation_mean == pytest.approx((4 * 10 + 8 * 20) / 30 / 8)


@pytest.mark.parametrize(
    ("time_s", "values", "expected"),
    [
        pytest.param([5.0], [3.0], 3.0, id="one-sample"),
        pytest.param([5.0, 5.0], [2.0, 4.0], 3.0, id="no-duration"),
        pytest.param([0.0, 1.0, 1.0, 3.0], [1.0, 9.0, 2.0, 7.0], (1 + 2 * 2) / 3, id="tie"),
    ],
)
def test_time_weighted_mean_edges(time_s: list[float], values: list[float], expected: float) -> None:
    assert time_weighted_mean(time_s, values) == pytest.approx(expected)


def test_time_weighted_mean_rejects_decreasing_time() -> None:
    with pytest.raises(ModelError, match="non-decreasing"):
        time_weighted_mean([0.0, 2.0, 1.0], [1.0, 1.0, 1.0])


def test_rejected_and_unfinished_counts() -> None:
    table = make_table(
        a_job("done").ran(0, 10, 100),
        a_job("refused").rejected(),
        a_job("refused-too").rejected(5),
        a_job("waiting").pending(0),
        a_job("never-said").pending(0, reason=""),
        a_job("running").running(0, 50),
    )
    s = summarize(table, EMPTY_TIMELINE)
    assert (s.jobs, s.jobs_ran, s.jobs_rejected, s.jobs_unfinished) == (6, 2, 2, 3)
    # The running job has a wait but no known run time, so no slowdown.
    assert s.mean_wait_s == pytest.approx(30.0)
    assert s.mean_bounded_slowdown == pytest.approx(110 / 100)


def test_wait_percentiles_match_numpy() -> None:
    waits = [0.0, 10.0, 20.0, 30.0, 1000.0]
    table = make_table(*(a_job(f"j{i}").ran(0, w, 50) for i, w in enumerate(waits)))
    s = summarize(table, EMPTY_TIMELINE)
    assert s.median_wait_s == pytest.approx(20.0)
    assert s.p95_wait_s == pytest.approx(np.percentile(waits, 95))
    assert s.p99_wait_s == pytest.approx(np.percentile(waits, 99))
    assert s.max_wait_s == 1000.0


def test_by_size_keys_follow_size_classes_order_and_by_group_is_sorted() -> None:
    table = make_table(
        a_job("a").using(8).by("u1", "zeta").ran(0, 100, 3600),
        a_job("b").using(1).by("u2", "alpha").ran(0, 0, 3600),
        a_job("c").using(0.5).by("u2", "alpha").ran(0, 0, 1800),
        a_job("d").using(64).by("u3", "mid").pending(0),
    )
    s = summarize(table, EMPTY_TIMELINE)
    assert list(s.by_size) == ["<1", "1", "8", "64+"]
    assert list(s.by_group) == ["alpha", "mid", "zeta"]
    zeta = s.by_group["zeta"]
    assert (zeta.count, zeta.mean_wait_s, zeta.p95_wait_s) == (1, 100.0, 100.0)
    assert zeta.gpu_hours == pytest.approx(8.0)
    assert zeta.mean_bounded_slowdown == pytest.approx(3700 / 3600)
    assert s.by_group["alpha"].gpu_hours == pytest.approx(1.0 + 0.25)
    never_ran = s.by_size["64+"]
    assert never_ran.count == 1
    assert math.isnan(never_ran.mean_wait_s)
    assert never_ran.gpu_hours == 0.0


def test_group_p95_matches_numpy_per_group() -> None:
    rng = np.random.default_rng(7)
    waits = rng.exponential(600.0, size=200).round()
    groups = rng.choice(["a", "b", "c"], size=200)
    rows = (
        a_job(f"j{i}").by("u", str(g)).ran(0, w, 60)
        for i, (w, g) in enumerate(zip(waits, groups, strict=True))
    )
    s = summarize(make_table(*rows), EMPTY_TIMELINE)
    for g in ("a", "b", "c"):
        assert s.by_group[g].p95_wait_s == pytest.approx(np.percentile(waits[groups == g], 95))
        assert s.by_group[g].mean_wait_s == pytest.approx(waits[groups == g].mean())


@pytest.mark.parametrize(
    ("rows", "expected"),
    [
        pytest.param(
            [a_job("x").by("alice").ran(0, 100, 100), a_job("y").by("bob").ran(0, 100, 100)],
            1.0,
            id="equal-users",
        ),
        pytest.param(
            # alice's bsld 1, bob's 3: (1+3)^2 / (2 * (1+9)) = 0.8
            [a_job("x").by("alice").ran(0, 0, 100), a_job("y").by("bob").ran(0, 200, 100)],
            0.8,
            id="unequal-users",
        ),
        pytest.param(
            # bob's mean over two jobs is (1+3)/2 = 2; alice 2: equal.
            [
                a_job("x").by("alice").ran(0, 100, 100),
                a_job("y").by("bob").ran(0, 0, 100),
                a_job("z").by("bob").ran(0, 200, 100),
            ],
            1.0,
            id="per-user-mean",
        ),
    ],
)
def test_jain_fairness_over_users(rows: list[JobRow], expected: float) -> None:
    assert summarize(make_table(*rows), EMPTY_TIMELINE).jain_fairness == pytest.approx(expected)


def test_makespan_starvation_and_held_idle() -> None:
    table = make_table(
        a_job("a").ran(100, 100, 1000).held_idle(1800),
        a_job("b").ran(200, 200 + 90_000, 10).held_idle(1800),
        a_job("c").pending(300),
        a_job("d").rejected(0),
    )
    timeline = make_timeline([0.0, 200_000.0], [[0], [0]])
    s = summarize(table, timeline, starvation_wait_s=86_400.0)
    assert s.makespan_s == pytest.approx(200 + 90_000 + 10 - 0)
    # b waited 90,000 s; c is still pending 199,700 s after submission at the horizon.
    assert s.starved_jobs == 2
    assert s.held_idle_gpu_hours == pytest.approx(1.0)


def test_empty_run_summarises_to_nan_and_zero() -> None:
    s = summarize(make_table(), EMPTY_TIMELINE)
    assert (s.jobs, s.jobs_ran, s.jobs_rejected, s.jobs_unfinished, s.starved_jobs) == (
        0,
        0,
        0,
        0,
        0,
    )
    for value in (
        s.mean_wait_s,
        s.p99_wait_s,
        s.mean_bounded_slowdown,
        s.makespan_s,
        s.allocation_mean,
        s.jain_fairness,
    ):
        assert math.isnan(value)
    assert s.held_idle_gpu_hours == 0.0
    assert dict(s.by_size) == {}
    assert dict(s.by_group) == {}


def test_to_dict_is_strict_json() -> None:
    table = make_table(a_job("a").ran(0, 10, 100), a_job("b").using(4).pending(0))
    d = summarize(table, EMPTY_TIMELINE).to_dict()
    text = json.dumps(d, allow_nan=False)
    back = json.loads(text)
    assert back["jobs"] == 2
    assert back["allocation_mean"] is None
    assert back["by_size"]["4"]["mean_wait_s"] is None
    assert back["by_group"]["g1"]["count"] == 2


def test_summary_is_deterministic() -> None:
    table = make_table(a_job("a").ran(0, 10, 100), a_job("b").by("v").ran(5, 50, 20))
    timeline = make_timeline([0.0, 10.0, 60.0], [[1], [2], [0]])
    assert summarize(table, timeline).to_dict() == summarize(table, timeline).to_dict()


def big_table(n: int, seed: int = 0) -> JobTable:
    """A random run of ``n`` jobs built column-wise (builders would be too slow here)."""
    rng = np.random.default_rng(seed)
    submit = np.sort(rng.uniform(0, 30 * 86400, n))
    started = rng.random(n) < 0.95
    start = np.where(started, submit + rng.exponential(3600, n), np.nan)
    duration = rng.exponential(7200, n) + 1
    ended = started & (rng.random(n) < 0.98)
    gpus = rng.choice([0.5, 1, 2, 4, 8, 16, 64], n).astype(np.float64)
    reason = np.where(started, "", np.where(rng.random(n) < 0.5, "rejected: quota", "pending"))
    return JobTable(
        job_id=np.array([f"j{i}" for i in range(n)]),
        user=rng.choice([f"u{i}" for i in range(200)], n),
        group=rng.choice([f"g{i}" for i in range(20)], n),
        queue=np.full(n, "default"),
        pool=np.full(n, "p0"),
        size_class=np.array([size_class(g) for g in gpus]),
        tasks=np.ones(n, dtype=np.int64),
        gpus=gpus,
        submit_s=submit,
        start_s=start,
        end_s=np.where(ended, start + duration, np.nan),
        duration_s=duration,
        time_limit_s=duration * 2,
        nodes_used=started.astype(np.int64),
        node_names=np.where(started, "n0", ""),
        held_idle_gpu_s=np.zeros(n),
        reason=reason,
        preemptions=np.zeros(n, dtype=np.int64),
        lost_gpu_s=np.zeros(n),
        wait_reason=np.full(n, ""),
        estimated_start_s=np.full(n, np.nan),
    )


def test_hundred_thousand_jobs_summarise() -> None:
    # Speed at this scale is measured by benchmarks/sim_throughput.py, not asserted here.
    table = big_table(100_000)
    t = np.linspace(0, 30 * 86400, 50_000)
    timeline = make_timeline(list(t), [[v] for v in np.linspace(0, 512, t.size)], (512,))
    s = summarize(table, timeline)
    assert s.jobs == 100_000
    assert len(s.by_group) == 20
