"""Periodic backfill (``backfill`` ``interval_s``, Slurm's ``bf_interval``): walks, cycles between, wakes."""

from __future__ import annotations

import math

import numpy as np
import pytest

from builders import a_cluster, a_job, a_snapshot, assert_same_tables, by_id, profile, trace
from loadmaster.config import load_cluster, load_profile_with_args, load_profiles, load_workload
from loadmaster.errors import ConfigError
from loadmaster.model import TraceJob
from loadmaster.scheduling import Profile, Scheduler
from loadmaster.scheduling.actions import backfill as backfill_action
from loadmaster.scheduling.plugins.backfill import Backfill
from loadmaster.sim import SimOptions, simulate


def _easy(interval_s: float | None) -> Profile:
    return profile("fifo", "gang", "first-fit", "backfill", args={"backfill": {"interval_s": interval_s}})


def _jobs() -> list[TraceJob]:
    # One 8-GPU node. "r" holds 4 GPUs until 1,000 s; "wide" (8 GPUs) arrives at 1 s and can
    # start only then; "small" (2 GPUs, 100 s) arrives at 5 s and can pass it without delaying it.
    return [
        trace(a_job("r").gpus(4).limit(1000.0).submitted(0.0), 1000.0),
        trace(a_job("wide").gpus(8).limit(500.0).submitted(1.0), 500.0),
        trace(a_job("small").gpus(2).limit(100.0).submitted(5.0), 100.0),
    ]


def test_a_job_that_passes_a_blocked_head_waits_for_the_next_walk() -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    every_cycle = simulate(cluster, Scheduler(_easy(None)), _jobs(), SimOptions()).jobs
    periodic = simulate(cluster, Scheduler(_easy(30.0)), _jobs(), SimOptions()).jobs
    assert by_id(every_cycle, "start_s") == {"r": 0.0, "wide": 1000.0, "small": 5.0}
    # The walk at 0 s is due 30 s later; the cycles at 1 s and 5 s only start jobs in queue order
    # ("wide" blocks), and owe a walk: the simulator wakes at 30 s for it, with no event then.
    assert by_id(periodic, "start_s") == {"r": 0.0, "wide": 1000.0, "small": 30.0}


def test_jobs_ahead_of_any_blocked_job_start_between_walks() -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    jobs = [
        trace(a_job("a").gpus(4).limit(100.0).submitted(0.0), 100.0),
        trace(a_job("b").gpus(2).limit(100.0).submitted(10.0), 100.0),
    ]
    started = by_id(simulate(cluster, Scheduler(_easy(30.0)), jobs, SimOptions()).jobs, "start_s")
    assert started == {"a": 0.0, "b": 10.0}


def test_a_cycle_between_walks_says_why_later_jobs_wait_and_when_it_wants_a_cycle() -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    r, wide, small = (t.job for t in _jobs())
    scheduler = Scheduler(_easy(30.0))
    rng = np.random.default_rng(0)
    first = a_snapshot(cluster).running(r, "n0", since=0.0).pending(wide).build()
    walked = scheduler.cycle(first, 1.0, rng)
    assert "backfill pass" not in walked.statuses["wide"].reason
    assert scheduler.wake_s(first, 1.0) == math.inf  # the walk ran: nothing owed
    second = a_snapshot(cluster).running(r, "n0", since=0.0).pending(wide, small).build()
    between = scheduler.cycle(second, 5.0, rng)
    assert not between.decisions
    waits = between.status_of("small", "default")
    assert waits is not None and "until the next backfill pass (every 30 s)" in waits.reason
    assert scheduler.wake_s(second, 5.0) == 31.0
    again = scheduler.cycle(second, 31.0, rng)
    assert [b.job_id for b in again.binds] == ["small"]


def test_a_cycle_between_walks_walks_strictly_and_leaves_the_session_as_the_profile_says() -> None:
    """Between walks even a non-strict profile's lane stops at its first job that cannot start; the
    session's own ``strict`` (the profile's) is not changed for it."""
    cluster = a_cluster().nodes(1, gpus=8).build()
    r, wide, small = (t.job for t in _jobs())
    periodic = {"backfill": {"interval_s": 30.0}}
    scheduler = Scheduler(profile("fifo", "gang", "first-fit", "backfill", strict=False, args=periodic))
    snapshot = a_snapshot(cluster).running(r, "n0", since=0.0).pending(wide, small).build()
    session = scheduler._session(snapshot, 5.0, np.random.default_rng(0), snapshot.pending, snapshot.queues())
    session.queue = list(snapshot.pending)
    session.backfill_walk = False
    backfill_action.run(session)
    assert session.strict is False
    assert not session.decisions
    assert "until the next backfill pass (every 30 s)" in session.blocked["default"].reason


@pytest.mark.parametrize("name", ["sds", "slurm", "nsml"])
def test_an_interval_shorter_than_any_gap_between_cycles_changes_nothing(name: str) -> None:
    """Every cycle is then a walk: the job table is the reference one, job for job."""
    shipped = load_profiles()[name]
    assert shipped.reserve[0].pass_interval_s is None
    changed = load_profile_with_args(name, {"backfill": {"interval_s": 1e-9}})
    assert changed.reserve[0].pass_interval_s == 1e-9
    cluster = load_cluster("lab")
    jobs = load_workload("lab", cluster, jobs=300, load=1.1).jobs
    reference = simulate(cluster.nodes, Scheduler(shipped), jobs, SimOptions()).jobs
    tiny = simulate(cluster.nodes, Scheduler(changed), jobs, SimOptions()).jobs
    assert_same_tables(tiny, reference)


def test_slurm_periodic_is_slurm_with_bf_interval_30() -> None:
    """Slurm's default bf_interval; its bf_max_job_test (``max_job_test``) is left out: see
    docs/plugins/backfill.md, "Bounded walks"."""
    profiles = load_profiles()
    assert profiles["slurm-periodic"].reserve[0].pass_interval_s == 30.0
    assert profiles["slurm-periodic"].reserve[0].max_jobs_per_walk is None
    assert profiles["slurm"].reserve[0].pass_interval_s is None
    assert profiles["slurm"].reserve[0].max_jobs_per_walk is None


def test_a_profile_built_with_an_interval_agrees_in_every_view() -> None:
    """The plugin's settings and what it hands the scheduler come from the same arguments; the
    shipped profile keeps its own."""
    changed = load_profile_with_args("slurm", {"backfill": {"interval_s": 30}})
    backfill = changed.reserve[0]
    assert isinstance(backfill, Backfill)
    assert backfill.settings.interval_s == backfill.pass_interval_s == 30.0
    assert backfill.settings.mode == "conservative" and backfill.settings.depth == 8  # the file's own
    shipped = load_profiles()["slurm"].reserve[0]
    assert isinstance(shipped, Backfill) and shipped.settings.interval_s is None


def test_changed_arguments_are_checked_as_a_file_s_are() -> None:
    with pytest.raises(ConfigError, match="interval_s"):
        load_profile_with_args("slurm", {"backfill": {"interval_s": -1}})
    with pytest.raises(ConfigError, match="no plugin 'backfill'"):
        load_profile_with_args("fifo", {"backfill": {"interval_s": 30}})
    with pytest.raises(ConfigError, match="unknown profile"):
        load_profile_with_args("no-such-profile", {})


@pytest.mark.parametrize("bad", [0, -5, math.inf])
def test_a_bad_interval_names_the_field(bad: float) -> None:
    with pytest.raises(ConfigError, match="interval_s"):
        _easy(bad)
