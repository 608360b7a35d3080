"""Contract tests of the synthetic research-lab workload generator."""

from __future__ import annotations

import dataclasses
import itertools
import math
import re
from collections import Counter, defaultdict
from collections.abc import Callable, Sequence
from functools import lru_cache
from typing import Any

import numpy as np
import pytest

from loadmaster.errors import ModelError
from loadmaster.model import Job, ResourceType, TraceJob
from loadmaster.workload import (
    GPU_SIZES,
    LabWorkloadParams,
    PoolTarget,
    heavy_user_ids,
    offered_load,
    sample_lab_workload,
)

A100 = ResourceType(
    name="a100-ib",
    gpu_model="A100-80GB",
    gpu_memory_mib=81_920,
    cpu_milli_per_gpu=12_000,
    memory_mib_per_gpu=120_000,
    interconnect="infiniband",
)
T4 = ResourceType(
    name="t4",
    gpu_model="T4",
    gpu_memory_mib=16_384,
    cpu_milli_per_gpu=4_000,
    memory_mib_per_gpu=30_000,
)


def make_pool(name: str = "train", **changes: Any) -> PoolTarget:
    """A 128-GPU A100 training pool of 8-GPU nodes, with ``changes`` applied."""
    base = PoolTarget(
        name=name,
        resource_type=A100,
        capacity_gpus=128,
        gpus_per_node=8,
        share=1.0,
        max_job_gpus=64,
    )
    return dataclasses.replace(base, **changes)


LAB_POOLS: tuple[PoolTarget, ...] = (
    make_pool("train", share=0.6),
    make_pool("small", capacity_gpus=32, gpus_per_node=4, max_job_gpus=8, share=0.25),
    make_pool("interactive", resource_type=T4, capacity_gpus=16, gpus_per_node=4, max_job_gpus=1,
              share=0.15),
)  # fmt: skip


@lru_cache(maxsize=16)
def lab_trace(
    n_jobs: int = 4000, load: float = 0.9, seed: int = 7, pools: tuple[PoolTarget, ...] = LAB_POOLS
) -> tuple[TraceJob, ...]:
    """One generated trace per argument set, shared by the tests that only read it."""
    jobs = sample_lab_workload(
        LabWorkloadParams(), pools, n_jobs=n_jobs, load=load, rng=np.random.default_rng(seed)
    )
    return tuple(jobs)


def pool_jobs(jobs: Sequence[TraceJob], pool: PoolTarget) -> list[TraceJob]:
    return [trace for trace in jobs if trace.job.pool == pool.name]


def pool_of(job: Job) -> PoolTarget:
    return next(pool for pool in LAB_POOLS if pool.name == job.pool)


# --- determinism -------------------------------------------------------------------------


def test_same_seed_gives_identical_trace() -> None:
    first = sample_lab_workload(
        LabWorkloadParams(), LAB_POOLS, n_jobs=1500, load=0.9, rng=np.random.default_rng(11)
    )
    second = sample_lab_workload(
        LabWorkloadParams(), LAB_POOLS, n_jobs=1500, load=0.9, rng=np.random.default_rng(11)
    )
    assert first == second


def test_different_seeds_give_different_traces() -> None:
    assert lab_trace(seed=1) != lab_trace(seed=2)


# --- load ratio ----------------------------------------------------------------------------


@pytest.mark.parametrize("load", [0.5, 0.9, 1.5])
def test_each_pool_offers_the_requested_load(load: float) -> None:
    jobs = lab_trace(n_jobs=3000, load=load)
    for pool in LAB_POOLS:
        measured = offered_load(pool_jobs(jobs, pool), pool.capacity_gpus)
        # Exact by construction; the contract only promises ~10%.
        assert measured == pytest.approx(load, rel=1e-9), pool.name


@pytest.mark.parametrize(("load", "seed"), [(0.5, 1), (0.9, 2), (1.5, 3)])
def test_single_pool_trace_offers_the_requested_load_on_its_capacity(load: float, seed: int) -> None:
    pool = make_pool()
    jobs = lab_trace(n_jobs=2000, load=load, seed=seed, pools=(pool,))
    assert abs(offered_load(jobs, pool.capacity_gpus) / load - 1.0) < 0.10


def test_higher_load_packs_the_same_jobs_into_less_time() -> None:
    low, high = lab_trace(load=0.5), lab_trace(load=1.5)
    assert high[-1].job.submit_s < low[-1].job.submit_s


def test_offered_load_is_gpu_seconds_over_capacity_times_span() -> None:
    pool = make_pool()
    jobs = lab_trace(n_jobs=50, pools=(pool,))
    span_s = jobs[-1].job.submit_s - jobs[0].job.submit_s
    gpu_s = sum(trace.job.gpus * trace.duration_s for trace in jobs)
    assert offered_load(jobs, 10) == pytest.approx(gpu_s / (10 * span_s))


# --- identity, order and shape -------------------------------------------------------------


def test_ids_users_groups_and_order() -> None:
    jobs = lab_trace()
    ids = [trace.job.id for trace in jobs]
    assert ids == [f"j{i:06d}" for i in range(1, len(jobs) + 1)]
    submits = [trace.job.submit_s for trace in jobs]
    assert submits == sorted(submits)
    assert 0.0 <= submits[0] < 2 * 3600
    for trace in jobs:
        job = trace.job
        assert re.fullmatch(r"u\d{3}", job.user)
        assert re.fullmatch(r"lab-[a-d]", job.group)
        assert job.queue == "default"
        assert job.resource_type == pool_of(job).resource_type.name
    assert len({trace.job.group for trace in jobs}) == LabWorkloadParams().groups


def test_each_user_stays_in_one_group() -> None:
    groups_of: dict[str, set[str]] = {}
    for trace in lab_trace():
        groups_of.setdefault(trace.job.user, set()).add(trace.job.group)
    assert all(len(groups) == 1 for groups in groups_of.values())


def test_jobs_go_to_pools_by_share() -> None:
    counts = Counter(trace.job.pool for trace in lab_trace())
    total = sum(pool.share for pool in LAB_POOLS)
    for pool in LAB_POOLS:
        assert counts[pool.name] / 4000 == pytest.approx(pool.share / total, abs=0.03)


def test_gpu_sizes_are_allowed_and_capped_by_pool() -> None:
    for trace in lab_trace():
        pool = pool_of(trace.job)
        gpus = trace.job.gpus
        assert gpus in GPU_SIZES
        assert gpus <= pool.max_job_gpus
        assert gpus <= pool.capacity_gpus


def test_interactive_pool_gets_only_single_gpu_jobs() -> None:
    interactive = LAB_POOLS[2]
    assert {trace.job.gpus for trace in pool_jobs(lab_trace(), interactive)} == {1.0}


def test_most_jobs_use_one_gpu_and_few_are_large() -> None:
    sizes = Counter(trace.job.gpus for trace in pool_jobs(lab_trace(), LAB_POOLS[0]))
    n = sum(sizes.values())
    assert sizes[1.0] / n > 0.5
    assert sum(count for gpus, count in sizes.items() if gpus >= 16) / n < 0.10
    assert sizes[64.0] > 0


@pytest.mark.parametrize("pool", LAB_POOLS, ids=lambda pool: pool.name)
def test_tasks_fit_one_node_and_multi_node_jobs_use_whole_nodes(pool: PoolTarget) -> None:
    for trace in pool_jobs(lab_trace(), pool):
        job = trace.job
        assert job.request.gpu_milli % 1000 == 0
        assert job.request.whole_gpus <= pool.gpus_per_node
        assert job.min_available == job.tasks
        if job.tasks > 1:
            assert job.request.whole_gpus == pool.gpus_per_node
        assert job.tasks * job.request.whole_gpus == job.gpus


@pytest.mark.parametrize("pool", LAB_POOLS, ids=lambda pool: pool.name)
def test_tasks_ask_for_their_gpus_bundle(pool: PoolTarget) -> None:
    kind = pool.resource_type
    for trace in pool_jobs(lab_trace(), pool):
        request = trace.job.request
        assert request.cpu_milli == request.whole_gpus * kind.cpu_milli_per_gpu
        assert request.memory_mib == request.whole_gpus * kind.memory_mib_per_gpu
        assert 0 < request.gpu_memory_mib <= kind.gpu_memory_mib


# --- durations and time limits -------------------------------------------------------------


def test_durations_are_clipped_to_a_minute_and_a_week() -> None:
    durations = np.array([trace.duration_s for trace in lab_trace(n_jobs=20_000)])
    assert durations.min() >= 60.0
    assert durations.max() <= 7 * 86_400.0


def test_larger_jobs_run_longer() -> None:
    jobs = lab_trace(n_jobs=20_000)
    single = [trace.duration_s for trace in jobs if trace.job.gpus == 1]
    large = [trace.duration_s for trace in jobs if trace.job.gpus >= 8]
    # 8 ** duration_size_exponent = 1.5 at the same workload mix.
    assert np.median(large) > 1.2 * np.median(single)


def test_time_limits_over_estimate_durations_like_users_do() -> None:
    jobs = lab_trace(n_jobs=20_000)
    limits = np.array([trace.job.time_limit_s for trace in jobs])
    durations = np.array([trace.duration_s for trace in jobs])
    assert np.all(limits >= durations)
    q10, q50, q90 = np.percentile(limits / durations, [10, 50, 90])
    assert q10 >= 1.2
    assert q90 <= 10.0
    assert 2.0 <= q50 <= 5.0
    long = limits >= 3600
    assert np.mean(limits[long] % 3600 == 0) > 0.5


# --- users and arrivals --------------------------------------------------------------------


def gpu_hours_by_user(jobs: Sequence[TraceJob]) -> dict[str, float]:
    hours: defaultdict[str, float] = defaultdict(float)
    for trace in jobs:
        hours[trace.job.user] += trace.job.gpus * trace.duration_s / 3600
    return hours


@pytest.mark.parametrize("seed", [1, 2, 3])
def test_a_few_heavy_users_hold_most_gpu_hours(seed: int) -> None:
    params = LabWorkloadParams()
    heavy = heavy_user_ids(params)
    assert len(heavy) <= 0.1 * params.users
    hours = gpu_hours_by_user(lab_trace(seed=seed))
    assert sum(hours[user] for user in heavy) / sum(hours.values()) > 0.5


def hour_rates(jobs: Sequence[TraceJob]) -> Callable[[int, int], float]:
    """Weekday arrivals per hour of day in [start, end)."""
    times = np.array([trace.job.submit_s for trace in jobs])
    weekday = (times // 86_400) % 7 < 5
    hours = (times[weekday] % 86_400) // 3600
    return lambda start, end: float(np.sum((hours >= start) & (hours < end))) / (end - start)


def test_daily_cycle_more_arrivals_in_working_hours() -> None:
    rate = hour_rates(lab_trace(n_jobs=20_000))
    assert rate(9, 18) > 2 * rate(0, 6)


def test_weekends_are_lighter() -> None:
    times = np.array([trace.job.submit_s for trace in lab_trace(n_jobs=20_000)])
    day = (times // 86_400) % 7
    weekday_rate = np.sum(day < 5) / 5
    weekend_rate = np.sum(day >= 5) / 2
    assert weekend_rate < 0.6 * weekday_rate


def test_flat_cycle_spreads_arrivals_evenly() -> None:
    params = LabWorkloadParams(daily_amplitude=0.0, weekend_factor=1.0)
    jobs = sample_lab_workload(params, (make_pool(),), n_jobs=20_000, load=0.9, rng=np.random.default_rng(5))
    rate = hour_rates(jobs)
    assert rate(9, 18) / rate(0, 6) == pytest.approx(1.0, abs=0.15)


# --- small and large runs ------------------------------------------------------------------


def test_one_job_and_tiny_shares_are_fine() -> None:
    jobs = sample_lab_workload(
        LabWorkloadParams(), LAB_POOLS, n_jobs=1, load=1.0, rng=np.random.default_rng(0)
    )
    assert len(jobs) == 1 and jobs[0].job.id == "j000001"


def test_hundred_thousand_jobs_have_unique_ordered_ids() -> None:
    # Speed at this scale is measured by benchmarks/sim_throughput.py, not asserted here.
    jobs = sample_lab_workload(
        LabWorkloadParams(), LAB_POOLS, n_jobs=100_000, load=0.9, rng=np.random.default_rng(3)
    )
    assert len({t.job.id for t in jobs}) == 100_000
    assert all(a.job.submit_s <= b.job.submit_s for a, b in itertools.pairwise(jobs))


# --- bad arguments -------------------------------------------------------------------------


def call_with(**changes: Any) -> None:
    kwargs: dict[str, Any] = {"pools": LAB_POOLS, "n_jobs": 10, "load": 0.9}
    kwargs.update(changes)
    sample_lab_workload(LabWorkloadParams(), rng=np.random.default_rng(0), **kwargs)


@pytest.mark.parametrize(
    ("build", "message"),
    [
        (lambda: call_with(n_jobs=0), r"n_jobs must be an integer >= 1, got 0"),
        (lambda: call_with(n_jobs=2.5), r"n_jobs must be an integer >= 1, got 2.5"),
        (lambda: call_with(load=0.0), r"load must be > 0 and finite, got 0.0"),
        (lambda: call_with(load=-1.0), r"load must be > 0"),
        (lambda: call_with(load=math.nan), r"load must be > 0"),
        (lambda: call_with(load=math.inf), r"load must be > 0"),
        (lambda: call_with(pools=()), r"pools must be at least one PoolTarget"),
        (lambda: call_with(pools=(make_pool(), make_pool())), r"pools must be uniquely named"),
        (lambda: make_pool(share=0.0), r"'train': share must be > 0"),
        (lambda: make_pool(share=-1.0), r"'train': share must be > 0"),
        (lambda: make_pool(capacity_gpus=0), r"capacity_gpus must be >= 1"),
        (lambda: make_pool(capacity_gpus=4), r"gpus_per_node must be between 1 and capacity"),
        (lambda: make_pool(max_job_gpus=0), r"max_job_gpus must be >= 1"),
        (lambda: make_pool(name=""), r"name must be a non-empty string"),
        (lambda: LabWorkloadParams(users=0), r"LabWorkloadParams.users must be >= 1"),
        (lambda: LabWorkloadParams(groups=27), r"groups must be between 1 and 26"),
        (
            lambda: LabWorkloadParams(heavy_user_fraction=0.0),
            r"heavy_user_fraction must be in \(0, 1\], got 0.0",
        ),
        (
            lambda: LabWorkloadParams(heavy_user_job_share=1.5),
            r"heavy_user_job_share must be in \[0, 1\], got 1.5",
        ),
        (lambda: LabWorkloadParams(gpu_weights=((3, 1.0),)), r"gpu_weights must be .* distinct"),
        (lambda: LabWorkloadParams(gpu_weights=((1, 0.0),)), r"gpu_weights must be finite"),
        (lambda: LabWorkloadParams(light_median_s=0.0), r"light_median_s must be > 0"),
        (lambda: LabWorkloadParams(max_duration_s=30.0), r"max_duration_s must be >= min"),
        (lambda: LabWorkloadParams(limit_factor_min=0.5), r"limit_factor_min must be >= 1"),
        (lambda: LabWorkloadParams(max_time_limit_s=3600.0), r"max_time_limit_s must be >="),
        (lambda: LabWorkloadParams(daily_amplitude=1.0), r"daily_amplitude must be in \[0, 1\)"),
        (lambda: LabWorkloadParams(weekend_factor=0.0), r"weekend_factor must be in \(0, 1\]"),
        (lambda: LabWorkloadParams(peak_hour=24.0), r"peak_hour must be in \[0, 24\)"),
        (lambda: offered_load(lab_trace(n_jobs=10), 0), r"capacity_gpus must be >= 1"),
        (lambda: offered_load([], 8), r"at least two jobs"),
        (lambda: offered_load(lab_trace(n_jobs=1), 8), r"span must be > 0"),
    ],
)
def test_bad_arguments_name_the_field_and_what_is_allowed(build: Callable[[], object], message: str) -> None:
    with pytest.raises(ModelError, match=message):
        build()


def test_pool_that_allows_no_weighted_size_is_named() -> None:
    params = LabWorkloadParams(gpu_weights=((64, 1.0),))
    pool = make_pool("notebooks", max_job_gpus=1)
    with pytest.raises(ModelError, match=r"pool 'notebooks'.*\[1\]"):
        sample_lab_workload(params, (pool,), n_jobs=10, load=1.0, rng=np.random.default_rng(0))
