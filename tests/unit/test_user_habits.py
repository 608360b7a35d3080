"""Users with habits in the lab generator, and fitting those habits on a trace with user ids."""

from __future__ import annotations

import dataclasses
import hashlib
import math
from collections.abc import Sequence
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.config import BUILTIN_WORKLOADS, load_cluster, load_workload
from loadmaster.errors import ConfigError, ModelError
from loadmaster.model import ResourceType, TraceJob
from loadmaster.workload import LabWorkloadParams, PoolTarget, sample_lab_workload
from loadmaster.workload.fit import JobColumns
from loadmaster.workload.habits import (
    fit_user_habits,
    lab_stats,
    persistence,
    rank_signal,
    sigma_spread,
    variance_split,
)

A100 = ResourceType(
    name="a100", gpu_model="A100", gpu_memory_mib=81_920, cpu_milli_per_gpu=12_000, memory_mib_per_gpu=120_000
)
POOLS = (PoolTarget("train", A100, 64, 8, 0.7, 64), PoolTarget("interactive", A100, 8, 4, 0.3, 1))
HABITS = LabWorkloadParams(user_habits=True)


def sample(params: LabWorkloadParams, seed: int = 2024, n_jobs: int = 500) -> list[TraceJob]:
    return sample_lab_workload(params, POOLS, n_jobs=n_jobs, load=0.9, rng=np.random.default_rng(seed))


def digest(jobs: Sequence[TraceJob]) -> str:
    """Every drawn quantity of every job, hashed (floats by repr: exact)."""
    text = "\n".join(
        f"{t.job.id} {t.job.user} {t.job.pool} {t.job.gpus} {t.job.submit_s!r} {t.duration_s!r} "
        f"{t.job.time_limit_s!r} {t.job.request.gpu_memory_mib}"
        for t in jobs
    )
    return hashlib.sha256(text.encode()).hexdigest()


def log_columns(jobs: Sequence[TraceJob]) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    users = np.array([t.job.user for t in jobs], dtype=object)
    run = np.array([t.duration_s for t in jobs])
    limit = np.array([t.job.time_limit_s for t in jobs])
    return users, np.log(run), np.log(limit / run)


# --- the generator ---------------------------------------------------------------------------------


def test_without_habits_the_generator_draws_what_it_drew_before_habits_existed() -> None:
    # The digest of this sample on the generator before user habits were added.
    assert (
        digest(sample(LabWorkloadParams()))
        == "8850e3ffe6e22aa537cd08bbae7c56d41987698d4229aec37621e261814638a8"
    )


def test_habit_fields_are_ignored_while_habits_are_off() -> None:
    tuned = LabWorkloadParams(
        user_run_time_share=0.1, user_limit_factor_share=0.9, user_run_time_sigma_spread=2.0
    )
    assert sample(tuned) == sample(LabWorkloadParams())


def test_habits_are_deterministic_with_a_seed() -> None:
    assert sample(HABITS, seed=5) == sample(HABITS, seed=5)
    assert sample(HABITS, seed=5) != sample(HABITS, seed=6)
    assert sample(HABITS, seed=5) != sample(LabWorkloadParams(), seed=5)


def test_each_user_keeps_habits_of_their_own() -> None:
    # Light jobs of one size only: the class model adds nothing between users, so what is
    # between users is the habits' doing.
    light = LabWorkloadParams(
        heavy_workload_prob_heavy_user=0.0, heavy_workload_prob_light_user=0.0, gpu_weights=((1, 1.0),)
    )
    on = dataclasses.replace(light, user_habits=True, user_run_time_share=0.8)
    users, run, _ = log_columns(sample(on, n_jobs=4000))
    split = variance_split(run, users)
    assert split.within_sigma < split.between_sigma
    assert split.share == pytest.approx(0.8, abs=0.2)  # 40 users: the between part is that noisy
    users_off, run_off, _ = log_columns(sample(light, n_jobs=4000))
    assert variance_split(run_off, users_off).share < 0.05


def test_habits_keep_the_marginals() -> None:
    # Many users, so that their offsets average out; no sigma spread, so the split is exact.
    off = sample(LabWorkloadParams(users=2000), n_jobs=40_000)
    on = sample(
        LabWorkloadParams(users=2000, user_habits=True, user_run_time_sigma_spread=0.0), n_jobs=40_000
    )
    _, run_off, factor_off = log_columns(off)
    _, run_on, factor_on = log_columns(on)
    assert np.median(run_on) == pytest.approx(np.median(run_off), abs=0.1)
    assert run_on.std() == pytest.approx(run_off.std(), rel=0.05)
    assert np.median(factor_on) == pytest.approx(np.median(factor_off), abs=0.05)
    for jobs in (on, off):  # repeating a user's previous job keeps the shares of pools and sizes
        pools = np.mean([t.job.pool == "train" for t in jobs])
        single = np.mean([t.job.gpus == 1 for t in jobs])
        assert pools == pytest.approx(0.7, abs=0.02)
        assert single == pytest.approx(np.mean([t.job.gpus == 1 for t in off]), abs=0.02)


def same_size_as_previous(jobs: Sequence[TraceJob]) -> float:
    """Share of jobs with as many GPUs as their user's previous job (in submission order)."""
    previous: dict[str, int] = {}
    same = []
    for t in jobs:
        if t.job.user in previous:
            same.append(previous[t.job.user] == t.job.gpus)
        previous[t.job.user] = t.job.gpus
    return float(np.mean(same))


@pytest.mark.parametrize("seed", [1, 2])
def test_persistent_users_repeat_their_previous_job(seed: int) -> None:
    chained = sample(LabWorkloadParams(user_habits=True, user_run_time_persistence=0.9), seed, 4000)
    fresh = sample(LabWorkloadParams(user_habits=True, user_run_time_persistence=0.0), seed, 4000)
    assert same_size_as_previous(chained) > 0.8
    assert same_size_as_previous(fresh) < 0.6
    users, run, _ = log_columns(chained)
    assert persistence(run, users) > 0.6  # two pools: draw order is submission order up to noise
    users_fresh, run_fresh, _ = log_columns(fresh)
    assert abs(persistence(run_fresh, users_fresh)) < 0.1


def test_default_habits_reproduce_the_fitted_trace_statistics() -> None:
    # lab-habits' parameters were calibrated so that lab jobs show the COARE Saliksik log's
    # between-user shares and persistences (docs/workload-fitting.md).
    stats = lab_stats(HABITS)
    assert stats.run_time_share == pytest.approx(0.346, abs=0.02)
    assert stats.run_time_persistence == pytest.approx(0.500, abs=0.02)
    assert stats.limit_factor_share == pytest.approx(0.241, abs=0.02)
    assert stats.limit_factor_persistence == pytest.approx(0.417, abs=0.02)
    off = lab_stats(LabWorkloadParams())
    assert off.run_time_share < 0.15 and off.limit_factor_share < 0.02
    assert abs(off.run_time_persistence) < 0.02 and abs(off.limit_factor_persistence) < 0.02


@pytest.mark.parametrize(
    ("changes", "message"),
    [
        ({"user_habits": "yes"}, r"LabWorkloadParams.user_habits must be true or false, got 'yes'"),
        ({"user_run_time_share": 1.5}, r"LabWorkloadParams.user_run_time_share must be in \[0, 1\], got 1.5"),
        ({"user_run_time_share": -0.1}, r"user_run_time_share must be in \[0, 1\]"),
        ({"user_limit_factor_share": math.nan}, r"user_limit_factor_share must be in \[0, 1\], got nan"),
        (
            {"user_run_time_sigma_spread": -1.0},
            r"user_run_time_sigma_spread must be >= 0 and finite, got -1.0",
        ),
        ({"user_run_time_sigma_spread": math.inf}, r"user_run_time_sigma_spread must be >= 0 and finite"),
        ({"user_run_time_persistence": 1.0}, r"user_run_time_persistence must be in \[0, 1\), got 1.0"),
        ({"user_limit_factor_persistence": -0.5}, r"user_limit_factor_persistence must be in \[0, 1\)"),
    ],
)
def test_bad_habit_params_name_the_field_and_what_is_allowed(
    changes: dict[str, object], message: str
) -> None:
    with pytest.raises(ModelError, match=message):
        LabWorkloadParams(**changes)  # type: ignore[arg-type]


def test_bad_habit_params_in_a_workload_file_name_the_file_and_field(tmp_path: Path) -> None:
    path = tmp_path / "w.yaml"
    path.write_text(
        "jobs: 10\nload: 1\npools: {training: {share: 1}}\n"
        "params: {user_habits: true, user_run_time_share: 2}\n"
    )
    with pytest.raises(ConfigError) as caught:
        load_workload(str(path), load_cluster("lab"))
    assert str(caught.value).startswith(str(path))
    assert "user_run_time_share must be in [0, 1], got 2" in str(caught.value)


def test_lab_habits_is_a_builtin_workload_with_habits() -> None:
    assert "lab-habits" in BUILTIN_WORKLOADS
    cluster = load_cluster("lab")
    habits = load_workload("lab-habits", cluster, jobs=2000)
    plain = load_workload("lab", cluster, jobs=2000)
    assert habits.name == "lab-habits" and len(habits.jobs) == 2000
    users_on, run_on, _ = log_columns(habits.jobs)
    users_off, run_off, _ = log_columns(plain.jobs)
    assert variance_split(run_on, users_on).share > variance_split(run_off, users_off).share


# --- fitting ---------------------------------------------------------------------------------------


def normal_groups(
    between: float, within: float, users: int, per_user: int, seed: int = 0
) -> tuple[np.ndarray, np.ndarray]:
    rng = np.random.default_rng(seed)
    names = np.repeat(np.array([f"u{i}" for i in range(users)], dtype=object), per_user)
    values = np.repeat(rng.normal(0.0, between, users), per_user) + rng.normal(0.0, within, users * per_user)
    return values, names


def test_variance_split_recovers_known_spreads() -> None:
    values, names = normal_groups(between=1.0, within=2.0, users=400, per_user=30)
    split = variance_split(values, names)
    assert split.users == 400 and split.jobs == 12_000
    assert split.within_sigma == pytest.approx(2.0, rel=0.03)
    assert split.between_sigma == pytest.approx(1.0, rel=0.1)
    assert split.share == pytest.approx(0.2, abs=0.04)


def test_variance_split_removes_the_noise_of_user_means() -> None:
    # No user differs from another: the means spread only by noise, and the split says so.
    values, names = normal_groups(between=0.0, within=1.0, users=200, per_user=6)
    assert variance_split(values, names).share < 0.03


def test_users_with_too_few_jobs_are_left_out() -> None:
    values, names = normal_groups(between=1.0, within=1.0, users=3, per_user=4)
    with pytest.raises(ModelError, match=r"at least two users with >= 5 jobs each, got 0"):
        variance_split(values, names)
    assert variance_split(values, names, min_jobs=4).users == 3


def test_persistence_recovers_a_users_chain() -> None:
    rng = np.random.default_rng(2)
    chains = []
    for _ in range(200):
        e = np.empty(60)
        e[0] = rng.normal()
        for k in range(1, 60):
            e[k] = 0.6 * e[k - 1] + math.sqrt(1 - 0.36) * rng.normal()
        chains.append(rng.normal(0.0, 2.0) + e)
    names = np.repeat(np.array([f"u{i}" for i in range(200)], dtype=object), 60)
    # Removing each user's mean biases it down by about 1 / 60 per user... and a bit more.
    assert persistence(np.concatenate(chains), names) == pytest.approx(0.6, abs=0.06)
    shuffled = np.concatenate([rng.permutation(c) for c in chains])
    assert abs(persistence(shuffled, names)) < 0.05


def test_sigma_spread_sees_users_of_different_erratic_habits() -> None:
    rng = np.random.default_rng(1)
    sigmas = np.exp(rng.normal(0.0, 0.5, 300))
    values = np.concatenate([rng.normal(0.0, s, 40) for s in sigmas])
    names = np.repeat(np.array([f"u{i}" for i in range(300)], dtype=object), 40)
    assert sigma_spread(values, names) == pytest.approx(0.5, abs=0.07)
    same, same_names = normal_groups(between=0.0, within=1.0, users=300, per_user=40)
    assert sigma_spread(same, same_names) < 0.07


def columns(jobs: Sequence[TraceJob], users: Sequence[str] | None = None) -> JobColumns:
    n = len(jobs)
    return JobColumns(
        user=np.array(users if users is not None else [t.job.user for t in jobs], dtype=object),
        submit_s=np.array([t.job.submit_s for t in jobs]),
        duration_s=np.array([t.duration_s for t in jobs]),
        time_limit_s=np.array([t.job.time_limit_s for t in jobs]),
        tasks=np.ones(n),
        gpu_milli_per_task=np.full(n, 1000.0),
        gpu_memory_mib=np.full(n, np.nan),
        source="lab.swf",
    )


def test_fit_sees_habits_only_where_there_are_some() -> None:
    on = fit_user_habits(columns(sample(HABITS, n_jobs=4000)))
    off = fit_user_habits(columns(sample(LabWorkloadParams(), n_jobs=4000)))
    assert on.run_time.share > off.run_time.share
    assert on.limit_factor.share > off.limit_factor.share + 0.1
    assert on.run_time.users == 40 and on.source == "lab.swf"


def test_fit_needs_users_and_limits() -> None:
    jobs = sample(HABITS, n_jobs=200)
    with pytest.raises(
        ModelError, match=r"lab.swf records no user for any job: habits need a trace with user"
    ):
        fit_user_habits(columns(jobs, users=[""] * len(jobs)))
    with pytest.raises(ModelError, match=r"no job of a known user ran >= 1e\+07 s with a time limit"):
        fit_user_habits(columns(jobs), min_run_s=1e7)
    with pytest.raises(ModelError, match=r"does the trace record who submitted each job"):
        fit_user_habits(columns(jobs, users=["u1"] + [""] * (len(jobs) - 1)))
    with pytest.raises(ModelError, match=r"min_jobs must be >= 2"):
        fit_user_habits(columns(jobs), min_jobs=1)
    with pytest.raises(ModelError, match=r"min_run_s must be > 0"):
        fit_user_habits(columns(jobs), min_run_s=0.0)


def write_swf(jobs: Sequence[TraceJob], path: Path) -> None:
    """The jobs as an SWF log: run time (field 4), requested time (9) and user id (12) are what counts."""
    lines = ["; MaxProcs: 64"]
    for i, t in enumerate(jobs):
        user = int(t.job.user[1:])
        fields = [i + 1, round(t.job.submit_s), 0, round(t.duration_s), t.job.gpus, -1, -1, t.job.gpus,
                  round(t.job.time_limit_s), -1, 1, user, 1, -1, -1, -1, -1, -1]  # fmt: skip
        lines.append(" ".join(str(f) for f in fields))
    path.write_text("\n".join(lines) + "\n")


def test_habits_command_writes_params_with_their_provenance(tmp_path: Path) -> None:
    trace = tmp_path / "habits.swf"
    write_swf(sample(HABITS, n_jobs=1500), trace)
    out = tmp_path / "params.yaml"
    args = ["workload", "habits", str(trace), "-o", str(out), "--calibration-jobs", "1000"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    text = out.read_text()
    assert "# User habits fitted by: loadmaster workload habits habits.swf --calibration-jobs 1000\n" in text
    assert "# calibrated on 1,000-job lab samples of 20 users" in text
    assert f"(sha256 {hashlib.sha256(trace.read_bytes()).hexdigest()})" in text
    assert "params:\n  user_habits: true\n  user_run_time_share: " in text
    assert "between share" in result.output


def test_rank_signal_compares_limit_and_history_in_submission_order() -> None:
    # Each user always runs the same length; limits are noise around it.
    rng = np.random.default_rng(3)
    users = np.array([f"u{i % 20}" for i in range(600)], dtype=object)
    run = np.array([600.0 * 1.2 ** (i % 20) for i in range(600)])
    limit = run * np.exp(rng.uniform(0.0, 3.0, 600))
    submit = rng.permutation(600).astype(float)
    signal = rank_signal(users, submit, run, limit)
    assert signal.jobs == 580  # every job but each user's first
    assert signal.history_spearman > 0.99
    assert signal.limit_spearman < 0.8


def test_habits_make_history_say_more_about_run_time() -> None:
    with_habits = fit_user_habits(columns(sample(HABITS, n_jobs=4000))).signal
    without = fit_user_habits(columns(sample(LabWorkloadParams(), n_jobs=4000))).signal
    assert with_habits.history_spearman > without.history_spearman + 0.05
