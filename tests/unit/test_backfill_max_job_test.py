"""A backfill walk that tries at most so many jobs (``max_job_test``, Slurm's ``bf_max_job_test``)."""

from __future__ import annotations

import numpy as np
import pytest

from builders import a_cluster, a_job, a_snapshot, assert_same_tables, profile
from loadmaster.config import load_cluster, load_profile_with_args, load_workload
from loadmaster.errors import ConfigError
from loadmaster.scheduling import Profile, Scheduler
from loadmaster.scheduling.decisions import Reserve
from loadmaster.scheduling.plugins.backfill import BackfillArgs
from loadmaster.sim import SimOptions, simulate


def _conservative(max_job_test: int | None) -> Profile:
    args = {"backfill": {"mode": "conservative", "depth": 16, "max_job_test": max_job_test}}
    return profile("fifo", "gang", "first-fit", "backfill", args=args)


def _blocked_queue(waiting: int) -> tuple[object, list[str]]:
    """One 8-GPU node held whole until 1,000 s, and ``waiting`` 8-GPU jobs behind it: none can start."""
    cluster = a_cluster().nodes(1, gpus=8).build()
    held = a_job("held").gpus(8).limit(1000.0).submitted(0.0).build()
    jobs = [a_job(f"w{i}").gpus(8).limit(100.0).submitted(1.0 + i).build() for i in range(waiting)]
    snapshot = a_snapshot(cluster).running(held, "n0", since=0.0).pending(*jobs).build()
    return snapshot, [job.id for job in jobs]


def test_a_walk_tries_only_its_first_jobs_and_says_so_of_the_others() -> None:
    snapshot, ids = _blocked_queue(5)
    result = Scheduler(_conservative(2)).cycle(snapshot, 10.0, np.random.default_rng(0))
    reserved = [d.job_id for d in result.decisions if isinstance(d, Reserve)]
    assert reserved == ["w0", "w1"]  # conservative: every tried job reserves; only two were tried
    for job_id in ids[:2]:
        status = result.status_of(job_id, "default")
        assert status is not None and status.estimated_start_s is not None
    for job_id in ids[2:]:
        status = result.status_of(job_id, "default")
        assert status is not None and status.estimated_start_s is None
        assert "not tried by this backfill pass, which tries the first 2 waiting jobs" in status.reason


def test_without_a_limit_every_job_is_tried() -> None:
    snapshot, ids = _blocked_queue(5)
    result = Scheduler(_conservative(None)).cycle(snapshot, 10.0, np.random.default_rng(0))
    assert [d.job_id for d in result.decisions if isinstance(d, Reserve)] == ids
    assert result.untested is None


def test_a_job_bound_in_the_cycle_has_no_status_even_when_others_went_untried() -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    held = a_job("held").gpus(4).limit(1000.0).submitted(0.0).build()
    fits = a_job("fits").gpus(4).limit(100.0).submitted(1.0).build()
    later = [a_job(f"w{i}").gpus(8).limit(100.0).submitted(2.0 + i).build() for i in range(3)]
    snapshot = a_snapshot(cluster).running(held, "n0", since=0.0).pending(fits, *later).build()
    result = Scheduler(_conservative(2)).cycle(snapshot, 10.0, np.random.default_rng(0))
    assert [b.job_id for b in result.binds] == ["fits"]
    assert result.status_of("fits", "default") is None
    assert result.status_of("w0", "default") is not None
    untried = result.status_of("w1", "default")
    assert untried is not None and "not tried" in untried.reason


def test_a_limit_above_the_queue_changes_nothing() -> None:
    cluster = load_cluster("lab")
    workload = load_workload("lab", cluster, jobs=400, load=1.1)
    reference = simulate(cluster.nodes, Scheduler(_slurm(None)), workload.jobs, SimOptions()).jobs
    limited = simulate(cluster.nodes, Scheduler(_slurm(100_000)), workload.jobs, SimOptions()).jobs
    assert_same_tables(limited, reference)


def test_a_small_limit_still_runs_every_job_and_keeps_the_walk_short() -> None:
    cluster = load_cluster("lab")
    workload = load_workload("lab", cluster, jobs=400, load=1.1)
    result = simulate(cluster.nodes, Scheduler(_slurm(5)), workload.jobs, SimOptions()).jobs
    assert not np.isnan(result.start_s).any()


def _slurm(max_job_test: int | None) -> Profile:
    return load_profile_with_args("slurm", {"backfill": {"max_job_test": max_job_test}})


@pytest.mark.parametrize("bad", [0, -3])
def test_a_limit_below_one_is_refused_naming_the_field(bad: int) -> None:
    with pytest.raises(ValueError, match="max_job_test must be >= 1"):
        BackfillArgs(max_job_test=bad)
    with pytest.raises(ConfigError, match="max_job_test"):
        load_profile_with_args("slurm", {"backfill": {"max_job_test": bad}})
