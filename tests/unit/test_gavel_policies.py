"""Gavel's max-min and finish-time fairness as HiGHS linear programs (scheduling.plugins.gavel)."""

from __future__ import annotations

import numpy as np
import pytest

from loadmaster.scheduling.plugins.gavel import (
    ROUND_POLICIES,
    AllocationInput,
    Fifo,
    FinishTimeFairness,
    MaxMinFairness,
    isolated_throughputs,
)

FACES = ("interior", "vertex", "spread")


def make_state(
    throughputs: list[list[float]],
    workers: list[float],
    *,
    scale: list[float] | None = None,
    weights: list[float] | None = None,
    remaining: list[float] | None = None,
    since: list[float] | None = None,
) -> AllocationInput:
    m = len(throughputs)
    return AllocationInput(
        job_ids=tuple(range(m)),
        throughputs=np.array(throughputs, dtype=np.float64),
        scale_factors=np.array(scale or [1.0] * m),
        priority_weights=np.array(weights or [1.0] * m),
        workers=np.array(workers, dtype=np.float64),
        steps_remaining=np.array(remaining or [1000.0] * m),
        since_arrival_s=np.array(since or [0.0] * m),
    )


def assert_fits(state: AllocationInput, x: np.ndarray) -> None:
    """Gavel's base constraints: 0 <= X <= 1, rows <= 1, worker-weighted columns <= GPUs."""
    assert x.shape == state.throughputs.shape
    assert (x >= -1e-7).all() and (x <= 1 + 1e-7).all()
    assert (x.sum(axis=1) <= 1 + 1e-6).all()
    assert (state.scale_factors @ x <= state.workers + 1e-6).all()


def normalised_min(state: AllocationInput, x: np.ndarray) -> float:
    share = state.workers / state.workers.sum()
    proportional = state.throughputs @ share
    value = (state.throughputs * x).sum(axis=1) * state.scale_factors / proportional / state.priority_weights
    return float(value.min())


@pytest.mark.parametrize("face", FACES)
def test_max_min_equal_jobs_share_one_gpu_equally(face: str) -> None:
    state = make_state([[2.0], [2.0]], [1.0])
    x = MaxMinFairness(face=face).allocate(state)  # type: ignore[arg-type]
    assert_fits(state, x)
    assert x[:, 0] == pytest.approx([0.5, 0.5], abs=1e-5)


@pytest.mark.parametrize("face", FACES)
def test_max_min_gives_each_job_the_type_it_gains_most_on(face: str) -> None:
    # Job 0 is 4x faster on the V100 (column 1), job 1 equally fast on both. Job 1 cannot
    # beat its equal-split speed by more than 1x (it runs one GPU at a time), so the optimum
    # is 1.0 with job 1 always running; job 0 gains most on the V100.
    state = make_state([[1.0, 4.0], [2.0, 2.0]], [1.0, 1.0])
    x = MaxMinFairness(face=face).allocate(state)  # type: ignore[arg-type]
    assert_fits(state, x)
    assert normalised_min(state, x) == pytest.approx(1.0, rel=1e-5)
    assert x[1].sum() == pytest.approx(1.0, abs=1e-4)
    if face == "spread":  # no idle capacity: job 0 gets the V100 job 1 leaves it
        assert x[0, 1] == pytest.approx(1.0, abs=1e-4) and x[1, 0] == pytest.approx(1.0, abs=1e-4)


def test_max_min_priority_weight_doubles_the_share() -> None:
    state = make_state([[3.0], [3.0]], [1.0], weights=[1.0, 2.0])
    x = MaxMinFairness().allocate(state)
    assert x[:, 0] == pytest.approx([1 / 3, 2 / 3], abs=1e-5)


def test_max_min_counts_a_multi_gpu_job_by_its_gpus() -> None:
    # A 2-worker job needs both GPUs at once; equal normalised throughput means equal time.
    state = make_state([[1.0], [2.0]], [2.0], scale=[1.0, 2.0])
    x = MaxMinFairness().allocate(state)
    assert_fits(state, x)
    value = x[:, 0] * state.scale_factors * state.throughputs[:, 0] / (state.throughputs[:, 0])
    assert value[0] == pytest.approx(value[1], rel=1e-4)


def test_agnostic_max_min_ignores_speed() -> None:
    state = make_state([[1.0, 4.0], [2.0, 2.0]], [1.0, 1.0])
    x = ROUND_POLICIES["max-min-fairness-agnostic"]().allocate(state)
    assert_fits(state, x)
    assert x.sum(axis=1) == pytest.approx([1.0, 1.0], abs=1e-4)


@pytest.mark.parametrize("face", FACES)
def test_all_faces_reach_the_same_optimum_on_a_larger_instance(face: str) -> None:
    rng = np.random.default_rng(7)
    rates = rng.uniform(0.5, 5.0, size=(30, 3))
    state = make_state(rates.tolist(), [4.0, 8.0, 12.0], scale=rng.choice([1.0, 2.0, 4.0], size=30).tolist())
    x = MaxMinFairness(face=face).allocate(state)  # type: ignore[arg-type]
    assert_fits(state, x)
    reference = normalised_min(state, MaxMinFairness(face="vertex").allocate(state))
    assert normalised_min(state, x) == pytest.approx(reference, rel=1e-4)


def test_isolated_throughput_is_an_equal_split() -> None:
    state = make_state([[2.0, 6.0], [2.0, 6.0]], [2.0, 2.0], scale=[1.0, 2.0])
    # Job 0: 1/1 of each type's half -> rows scaled to sum 1 -> 0.5*2 + 0.5*6 = 4.
    # Job 1: (1/2, 1/2) per type already sums to 1 -> 0.5*2 + 0.5*6 = 4.
    assert isolated_throughputs(state) == pytest.approx([4.0, 4.0])


@pytest.mark.parametrize("face", FACES)
def test_finish_time_fairness_splits_equal_new_jobs_evenly(face: str) -> None:
    state = make_state([[1.0], [1.0]], [1.0], remaining=[100.0, 100.0])
    x = FinishTimeFairness(face=face).allocate(state)  # type: ignore[arg-type]
    assert_fits(state, x)
    assert x[:, 0] == pytest.approx([0.5, 0.5], abs=1e-3)


def test_finish_time_fairness_favours_the_job_that_waited() -> None:
    # Same work left, job 1 has waited 100 s: its rho is worse at an even split, so it gets more.
    state = make_state([[1.0], [1.0]], [1.0], remaining=[100.0, 100.0], since=[0.0, 100.0])
    x = FinishTimeFairness().allocate(state)
    assert_fits(state, x)
    assert x[1, 0] > x[0, 0] + 0.05


def test_finish_time_fairness_equalises_rho_when_it_can() -> None:
    state = make_state([[1.0], [1.0]], [1.0], remaining=[100.0, 300.0])
    x = FinishTimeFairness(face="vertex").allocate(state)
    alone = state.steps_remaining / isolated_throughputs(state)
    rho = (state.since_arrival_s + state.steps_remaining / (state.throughputs[:, 0] * x[:, 0])) / alone
    assert rho[0] == pytest.approx(rho[1], rel=1e-3)


def test_finish_time_fairness_counts_time_at_isolated_speed_across_calls() -> None:
    policy = FinishTimeFairness()
    policy.allocate(make_state([[1.0], [1.0]], [1.0], remaining=[100.0, 100.0]))
    # Job 0 made 40 steps at its isolated speed of 0.5 steps/s: 80 s of isolated time.
    policy.allocate(make_state([[1.0], [1.0]], [1.0], remaining=[60.0, 100.0], since=[80.0, 80.0]))
    assert policy._isolated_s == {0: pytest.approx(80.0), 1: pytest.approx(0.0)}


def test_fifo_gives_each_job_in_order_its_fastest_type_with_room() -> None:
    # Types in name order: k80, v100. Job 0 takes the V100; job 1 then takes the K80.
    state = make_state([[1.0, 4.0], [1.0, 2.0], [1.0, 3.0]], [1.0, 1.0])
    x = Fifo().allocate(state)
    assert x.tolist() == [[0.0, 1.0], [1.0, 0.0], [0.0, 0.0]]


def test_fifo_stops_at_the_first_job_that_fits_nowhere() -> None:
    # Job 0 takes 1 of 2 GPUs; job 1 needs 2 and blocks job 2, which would fit.
    state = make_state([[1.0], [1.0], [1.0]], [2.0], scale=[1.0, 2.0, 1.0])
    assert Fifo().allocate(state)[:, 0].tolist() == [1.0, 0.0, 0.0]


def test_fifo_skips_a_job_whose_best_type_with_room_cannot_run_it() -> None:
    # Job 0 takes the only V100; job 1 runs on V100s only, so it is skipped; job 2 takes the K80.
    state = make_state([[0.5, 2.0], [0.0, 2.0], [1.0, 1.0]], [1.0, 1.0])
    assert Fifo().allocate(state).tolist() == [[0.0, 1.0], [0.0, 0.0], [1.0, 0.0]]
