"""Gavel's round mechanism on a heterogeneous cluster (sim.rounds), checked by hand-computed runs."""

from __future__ import annotations

import pytest

from loadmaster.errors import ModelError, SimulationError
from loadmaster.model.hetero import HeteroCluster, StepJob, ThroughputTable
from loadmaster.scheduling.plugins.gavel import FinishTimeFairness, MaxMinFairness
from loadmaster.sim.rounds import RoundOptions, simulate_rounds

TABLE = ThroughputTable(
    {
        ("steady", 1): {"v100": 1.0, "k80": 1.0},
        ("fast-on-v100", 1): {"v100": 2.0, "k80": 1.0},
        ("v100-only", 1): {"v100": 2.0, "k80": 0.0},
        ("pair", 2): {"v100": 1.0, "k80": 0.5},
        ("crawl", 1): {"v100": 0.001, "k80": 0.001},
    }
)


def job(job_id: int, kind: str, steps: int, arrival_s: float = 0.0, workers: int = 1) -> StepJob:
    return StepJob(job_id, kind, workers, steps, arrival_s)


def test_one_job_runs_in_whole_rounds_then_a_short_one() -> None:
    result = simulate_rounds([job(0, "steady", 1000)], HeteroCluster({"v100": 1}), TABLE, MaxMinFairness())
    # 360 + 360 + 280 steps at 1 step/s.
    assert result.jct_s == {0: pytest.approx(1000.0)} and result.makespan_s == pytest.approx(1000.0)
    assert result.rounds == 3


def test_two_jobs_on_one_gpu_take_turns_by_share_received() -> None:
    jobs = [job(0, "steady", 720), job(1, "steady", 720)]
    result = simulate_rounds(jobs, HeteroCluster({"v100": 1}), TABLE, MaxMinFairness())
    # Rounds: 0 (ties go to the lower id), 1 (it has had less), 0 (tie again, finishes at 1080), 1.
    assert result.jct_s == {0: pytest.approx(1080.0), 1: pytest.approx(1440.0)}
    assert result.avg_jct_s == pytest.approx(1260.0) and result.makespan_s == pytest.approx(1440.0)


def test_a_job_runs_at_the_speed_of_the_type_it_is_given() -> None:
    cluster = HeteroCluster({"v100": 1, "k80": 1})
    result = simulate_rounds([job(0, "fast-on-v100", 1440)], cluster, TABLE, MaxMinFairness())
    assert result.jct_s[0] == pytest.approx(720.0)  # 2 steps/s on the V100


def test_a_job_never_runs_where_it_has_no_throughput() -> None:
    cluster = HeteroCluster({"k80": 4, "v100": 1})
    jobs = [job(0, "v100-only", 1440), job(1, "v100-only", 1440)]
    result = simulate_rounds(jobs, cluster, TABLE, MaxMinFairness())
    assert result.makespan_s == pytest.approx(1440.0)  # one V100, 2 steps/s, 2880 steps in all


def test_arrivals_enter_at_the_next_round_end() -> None:
    jobs = [job(0, "steady", 1000), job(1, "steady", 100, arrival_s=100.0)]
    result = simulate_rounds(jobs, HeteroCluster({"v100": 2}), TABLE, MaxMinFairness())
    assert result.jct_s[1] == pytest.approx(360.0)  # joins at 360, runs 100 s, arrived at 100


def test_time_jumps_to_the_next_arrival_when_idle() -> None:
    jobs = [job(0, "steady", 100), job(1, "steady", 100, arrival_s=5000.0)]
    result = simulate_rounds(jobs, HeteroCluster({"v100": 1}), TABLE, MaxMinFairness())
    assert result.jct_s == {0: pytest.approx(100.0), 1: pytest.approx(100.0)}
    assert result.makespan_s == pytest.approx(5100.0)


def test_a_multi_gpu_job_holds_its_gpus_of_one_type_together() -> None:
    cluster = HeteroCluster({"v100": 1, "k80": 2})
    result = simulate_rounds([job(0, "pair", 360, workers=2)], cluster, TABLE, MaxMinFairness())
    assert result.jct_s[0] == pytest.approx(720.0)  # only the two K80s fit it: 0.5 steps/s


@pytest.mark.parametrize("policy", [MaxMinFairness, FinishTimeFairness])
def test_same_input_same_result(policy: type[MaxMinFairness] | type[FinishTimeFairness]) -> None:
    jobs = [
        job(i, kind, 500 + 130 * i, arrival_s=60.0 * i)
        for i, kind in enumerate(["steady", "fast-on-v100"] * 4)
    ]
    cluster = HeteroCluster({"v100": 2, "k80": 2})
    first = simulate_rounds(jobs, cluster, TABLE, policy())
    second = simulate_rounds(jobs, cluster, TABLE, policy())
    assert first == second and len(first.jct_s) == len(jobs)


def test_reports_progress_each_round() -> None:
    seen: list[tuple[int, int]] = []
    simulate_rounds(
        [job(0, "steady", 1000)],
        HeteroCluster({"v100": 1}),
        TABLE,
        MaxMinFairness(),
        options=RoundOptions(round_s=500.0),
        progress=lambda done, total: seen.append((done, total)),
    )
    assert seen == [(0, 1), (0, 1), (1, 1)]


@pytest.mark.parametrize(
    ("jobs", "message"),
    [
        ([job(0, "steady", 10, 50.0), job(1, "steady", 10, 0.0)], "arrival order"),
        ([job(0, "unknown", 10)], "no throughput for job type 'unknown'"),
        ([job(0, "v100-only", 10)], "runs on none of"),
        ([job(0, "crawl", 10)], "under one step per"),
    ],
)
def test_bad_input_is_refused_with_the_reason(jobs: list[StepJob], message: str) -> None:
    with pytest.raises((SimulationError, ModelError), match=message):
        simulate_rounds(jobs, HeteroCluster({"k80": 1}), TABLE, MaxMinFairness())


@pytest.mark.parametrize(
    ("spec", "message"),
    [("v100=8,p100", "not TYPE=COUNT"), ("v100=-1", "not TYPE=COUNT"), ("", "not TYPE=COUNT")],
)
def test_cluster_spec_errors_name_the_part(spec: str, message: str) -> None:
    with pytest.raises(ModelError, match=message):
        HeteroCluster.parse(spec)


def test_cluster_spec_keeps_the_listed_order_for_rounds() -> None:
    cluster = HeteroCluster.parse("v100=8,p100=16,k80=24")
    assert tuple(cluster.gpus) == ("v100", "p100", "k80") and cluster.types == ("k80", "p100", "v100")
