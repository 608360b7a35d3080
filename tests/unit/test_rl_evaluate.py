"""The evaluation harness's clairvoyant reference: limits replaced by true run times, for named rows only."""

from __future__ import annotations

import dataclasses
from collections.abc import Sequence

from loadmaster.config import Cluster, load_cluster, load_workload
from loadmaster.metrics import summarize
from loadmaster.model import TraceJob
from loadmaster.rl.evaluate import HEURISTICS, evaluate, exact_limits, learned_profile
from loadmaster.scheduling import Profile, Scheduler, build_profile
from loadmaster.scheduling.plugins.backfill import Backfill, BackfillArgs
from loadmaster.sim import SimOptions, simulate


def test_exact_limits_change_only_the_limit() -> None:
    jobs = load_workload("lab", load_cluster("lab"), jobs=50, load=0.9, seed=3).jobs
    exact = exact_limits(jobs)

    assert [t.job.time_limit_s for t in exact] == [t.duration_s for t in jobs]
    assert any(t.job.time_limit_s > t.duration_s for t in jobs)  # the workload over-asks
    assert [dataclasses.replace(t.job, time_limit_s=0.5) for t in exact] == [
        dataclasses.replace(t.job, time_limit_s=0.5) for t in jobs
    ]
    assert [t.duration_s for t in exact] == [t.duration_s for t in jobs]


def test_only_the_named_rows_see_true_run_times() -> None:
    cluster = load_cluster("lab")
    actions, plugins = HEURISTICS["sjf-backfill"]
    sjf = build_profile("sjf-backfill", list(actions), list(plugins), source="test")
    profiles = {"plain": sjf, "seer": dataclasses.replace(sjf, name="seer")}
    rows = evaluate(cluster, profiles, loads=(1.1,), seeds=(5,), jobs=160, clairvoyant=("seer",))

    jobs = load_workload("lab", cluster, jobs=160, load=1.1, seed=5).jobs
    by_jobs = {"plain": bsld(cluster, sjf, jobs, 5), "seer": bsld(cluster, sjf, exact_limits(jobs), 5)}
    measured = {r.profile: r.mean_bounded_slowdown for r in rows}
    assert measured == by_jobs
    assert measured["plain"] != measured["seer"]


def bsld(cluster: Cluster, profile: Profile, jobs: Sequence[TraceJob], seed: int) -> float:
    result = simulate(cluster.nodes, Scheduler(profile), jobs, SimOptions(seed=seed))
    return summarize(result.jobs, result.timeline).mean_bounded_slowdown


def test_learned_profile_passes_early_ends_to_backfill() -> None:
    plain = learned_profile("a", "lab", 6 * 3600.0)
    early = learned_profile("b", "lab", 6 * 3600.0, early_ends=2.0)

    def settings(profile: Profile) -> BackfillArgs:
        (backfill,) = (p for p in profile.plugins if isinstance(p, Backfill))
        return backfill.settings

    assert (settings(plain).early_ends, settings(early).early_ends) == (None, 2.0)
    assert settings(early).starvation_s == 6 * 3600.0
