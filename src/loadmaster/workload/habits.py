"""Fitting users' habits: how much of a trace's run-time and over-asking variation is personal.

Real clusters repeat themselves: a user's jobs look like that user's past jobs
(Tsafrir, Etsion and Feitelson's run-time predictor, which the ``backfill``
plugin's ``estimate: history`` implements, rests on it). The lab generator
models this with ``LabWorkloadParams.user_habits``; this module measures, on
any trace that records who submitted each job, the three numbers it needs:

* the share of the variance of log run time that lies *between* users (the
  intraclass correlation of a one-way random-effects model), the rest lying
  within each user's own jobs;
* the spread of users' own within-user run-time sigmas;
* the same between-user share for the log over-asking factor, limit / run time.

The estimators are the textbook ANOVA ones for unbalanced groups (Searle,
Casella and McCulloch, *Variance Components*, ch. 3), computed with numpy only;
users with fewer than ``min_jobs`` jobs are left out because their means say
little about their habits.
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError
from loadmaster.model import ResourceType
from loadmaster.workload.fit import JobColumns
from loadmaster.workload.synthetic import LabWorkloadParams, PoolTarget, sample_lab_workload

FloatArray = npt.NDArray[np.float64]
ObjectArray = npt.NDArray[np.object_]

MIN_JOBS = 5
"""Fewest jobs a user needs to take part in a fit: the mean and spread of fewer are noise."""

MIN_RUN_S = 60.0
"""Shortest run time a fit counts, s: the lab generator's ``min_duration_s``. Shorter runs are
mostly jobs that failed at launch, which the generator does not model, and a handful of them
asking for an hour would otherwise dominate the spread of log over-asking."""


@dataclass(frozen=True, slots=True)
class VarianceSplit:
    """How a quantity (a log run time, a log factor) varies between and within users."""

    users: int
    """Users with at least ``min_jobs`` values, the ones the split is estimated from."""
    jobs: int
    """Values (jobs) of those users."""
    within_sigma: float
    """Pooled standard deviation of a value around its user's mean."""
    between_sigma: float
    """Standard deviation of the users' true means (sampling noise of the means removed)."""

    @property
    def share(self) -> float:
        """Between-user share of the total variance, in [0, 1]: the intraclass correlation."""
        total = self.within_sigma**2 + self.between_sigma**2
        return self.between_sigma**2 / total if total > 0.0 else 0.0


@dataclass(frozen=True, slots=True)
class UserHabitsFit:
    """Users' habits measured on one trace, and the generator parameters they give."""

    source: str
    """Trace file name."""
    min_jobs: int
    min_run_s: float
    run_time: VarianceSplit
    """Log run time (s) of jobs that ran at least ``min_run_s``."""
    run_time_sigma_spread: float
    """Standard deviation of log(a user's own run-time sigma / the pooled one), noise removed."""
    limit_factor: VarianceSplit
    """Log of time limit / run time, over jobs with both."""


def variance_split(values: FloatArray, users: ObjectArray, min_jobs: int = MIN_JOBS) -> VarianceSplit:
    """Split the variance of ``values`` into between- and within-user parts.

    One-way random-effects ANOVA: ``MSW`` (within mean square) estimates the
    within-user variance; ``(MSB - MSW) / n0`` the variance of the users' true
    means, with ``n0 = (N - sum n_u**2 / N) / (U - 1)`` the effective jobs per user
    of an unbalanced design; a negative estimate (means no more spread than
    noise explains) is 0. Raises ModelError with fewer than two users of
    ``min_jobs`` values.
    """
    groups = _groups(values, users, min_jobs)
    if len(groups) < 2:
        raise ModelError(
            f"habits need at least two users with >= {min_jobs} jobs each, got {len(groups)} "
            "(does the trace record who submitted each job?)"
        )
    counts = np.array([g.size for g in groups], dtype=np.float64)
    means = np.array([g.mean() for g in groups])
    n, u = float(counts.sum()), len(groups)
    grand = float((counts * means).sum() / n)
    within_ss = math.fsum(float(((g - g.mean()) ** 2).sum()) for g in groups)
    between_ms = float((counts * (means - grand) ** 2).sum()) / (u - 1)
    within_ms = within_ss / (n - u)
    n0 = (n - float((counts**2).sum()) / n) / (u - 1)
    between_var = max(0.0, (between_ms - within_ms) / n0)
    return VarianceSplit(u, int(n), math.sqrt(within_ms), math.sqrt(between_var))


def sigma_spread(values: FloatArray, users: ObjectArray, min_jobs: int = MIN_JOBS) -> float:
    """Standard deviation of log(user's own sigma / pooled sigma) over users, noise removed.

    The log of a sample standard deviation of n normal values has sampling
    variance about ``1 / (2 (n - 1))``; its mean over users is subtracted from
    the observed variance (0 if that leaves nothing). Users whose values are all
    equal (sigma 0: a fixed benchmark, jobs all killed at one limit) are left out.
    """
    groups = [g for g in _groups(values, users, min_jobs) if g.std(ddof=1) > 0.0]
    if len(groups) < 2:
        return 0.0
    log_sigma = np.log([g.std(ddof=1) for g in groups])
    noise = float(np.mean([1.0 / (2.0 * (g.size - 1)) for g in groups]))
    return math.sqrt(max(0.0, float(log_sigma.var(ddof=1)) - noise))


def fit_user_habits(
    columns: JobColumns, min_jobs: int = MIN_JOBS, min_run_s: float = MIN_RUN_S
) -> UserHabitsFit:
    """Measure users' habits on a trace (see the module docstring).

    Run times count for jobs that ran at least ``min_run_s`` (see
    :data:`MIN_RUN_S`); factors for those of them with a positive limit. Jobs
    without a user ('') are left out. Raises ModelError when ``min_jobs < 2``,
    ``min_run_s <= 0`` or fewer than two users qualify.
    """
    if min_jobs < 2:
        raise ModelError(f"min_jobs must be >= 2 (a spread needs two jobs), got {min_jobs}")
    if not 0.0 < min_run_s < math.inf:
        raise ModelError(f"min_run_s must be > 0 and finite (s), got {min_run_s}")
    users = np.asarray(columns.user, dtype=object)
    duration = np.asarray(columns.duration_s, dtype=np.float64)
    limit = np.asarray(columns.time_limit_s, dtype=np.float64)
    known_user = users != ""
    name = columns.source or "the trace"
    if not known_user.any():
        raise ModelError(f"{name} records no user for any job: habits need a trace with user ids")
    ran = known_user & np.isfinite(duration) & (duration >= min_run_s)
    log_run = np.log(duration[ran])
    with_limit = ran & np.isfinite(limit) & (limit > 0.0)
    if not with_limit.any():
        raise ModelError(
            f"{name}: no job of a known user ran >= {min_run_s:g} s with a time limit; habits need both"
        )
    log_factor = np.log(limit[with_limit] / duration[with_limit])
    return UserHabitsFit(
        source=columns.source,
        min_jobs=min_jobs,
        min_run_s=min_run_s,
        run_time=variance_split(log_run, users[ran], min_jobs),
        run_time_sigma_spread=sigma_spread(log_run, users[ran], min_jobs),
        limit_factor=variance_split(log_factor, users[with_limit], min_jobs),
    )


CALIBRATION_JOBS = 50_000
"""Jobs of a calibration sample. With :data:`JOBS_PER_USER` that is 1,000 users: the lab's 40 would
leave the between-user variance, estimated from 40 user means, about 20% noisy; 1,000 bring it
near 5%."""
JOBS_PER_USER = 50
"""Jobs per user of a calibration sample (heavy/light fractions kept): users' means well measured."""
CALIBRATION_STEPS = 12
"""Bisection steps: the share is then known to 1 / 2**12, finer than the 3 decimals written."""
_CALIBRATION_POOL = PoolTarget(
    name="calibration",
    resource_type=ResourceType("calibration", "any", 81_920, 8_000, 64_000),
    capacity_gpus=128,
    gpus_per_node=8,
    share=1.0,
    max_job_gpus=64,
)
"""One pool that takes every size the lab draws: the pools only restrict sizes, whose effect on
the split of run-time variance is small."""


@dataclass(frozen=True, slots=True)
class Calibrated:
    """Generator shares that reproduce a trace's between-user shares in the lab workload."""

    run_time_share: float
    limit_factor_share: float
    jobs: int
    """Jobs of the calibration samples."""


def lab_shares(params: LabWorkloadParams, seed: int = 0, jobs: int = CALIBRATION_JOBS) -> tuple[float, float]:
    """The between-user shares of log run time and of log(limit / run time) in a lab sample of
    ``params`` with ``jobs`` jobs and ``jobs / JOBS_PER_USER`` users (heavy/light fractions kept)."""
    wide = _replace(params, users=max(2, jobs // JOBS_PER_USER))
    drawn = sample_lab_workload(
        wide, (_CALIBRATION_POOL,), n_jobs=jobs, load=1.0, rng=np.random.default_rng(seed)
    )
    users = np.array([t.job.user for t in drawn], dtype=object)
    run = np.array([t.duration_s for t in drawn])
    limit = np.array([t.job.time_limit_s for t in drawn])
    return variance_split(np.log(run), users).share, variance_split(np.log(limit / run), users).share


def calibrate(
    fit: UserHabitsFit, params: LabWorkloadParams | None = None, seed: int = 0, jobs: int = CALIBRATION_JOBS
) -> Calibrated:
    """The ``user_run_time_share`` and ``user_limit_factor_share`` with which the lab generator's
    jobs split their variance between users as the trace's do.

    The generator's shares act on the class model's noise only, while the lab's heavy and light
    users already differ in what they run (a between-user part without habits), and its
    over-asking is clipped and rounded to whole hours (a within-user part no habit removes); so
    the fitted shares are not the generator's. Each generator share is found by bisection on
    common random numbers (one seed, only the share changes), against :func:`lab_shares`; a
    trace share the generator cannot reach gives the nearest end, 0 or 1.
    """
    base = _replace(
        params or LabWorkloadParams(), user_habits=True, user_run_time_sigma_spread=fit.run_time_sigma_spread
    )

    def run_share(share: float) -> float:
        return lab_shares(_replace(base, user_run_time_share=share), seed, jobs)[0]

    run = _bisect(run_share, fit.run_time.share)

    def factor_share(share: float) -> float:
        return lab_shares(_replace(base, user_run_time_share=run, user_limit_factor_share=share), seed, jobs)[
            1
        ]

    return Calibrated(run, _bisect(factor_share, fit.limit_factor.share), jobs)


def _bisect(measure: Callable[[float], float], target: float) -> float:
    """The generator share in [0, 1] whose measured share is ``target`` (measure increases with it)."""
    low, high = 0.0, 1.0
    for _ in range(CALIBRATION_STEPS):
        middle = (low + high) / 2.0
        if measure(middle) < target:
            low = middle
        else:
            high = middle
    return (low + high) / 2.0


def _replace(params: LabWorkloadParams, **changes: object) -> LabWorkloadParams:
    return dataclasses.replace(params, **changes)  # type: ignore[arg-type]


def _groups(values: FloatArray, users: ObjectArray, min_jobs: int) -> list[FloatArray]:
    """The values of each user with at least ``min_jobs`` of them, users in sorted order."""
    order = np.argsort(users, kind="stable")
    sorted_users, sorted_values = users[order], values[order]
    names, starts = np.unique(sorted_users, return_index=True)
    bounds = [*starts.tolist(), len(sorted_users)]
    groups = [sorted_values[bounds[i] : bounds[i + 1]] for i in range(len(names))]
    return [g for g in groups if g.size >= min_jobs]


def habits_params(fit: UserHabitsFit, calibrated: Calibrated) -> dict[str, float | bool]:
    """The ``LabWorkloadParams`` fields a fit sets, rounded to 3 decimals as they are written."""
    return {
        "user_habits": True,
        "user_run_time_share": round(calibrated.run_time_share, 3),
        "user_run_time_sigma_spread": round(fit.run_time_sigma_spread, 3),
        "user_limit_factor_share": round(calibrated.limit_factor_share, 3),
    }


def habits_yaml(fit: UserHabitsFit, calibrated: Calibrated, *, sha256: str, command: str) -> str:
    """The fitted ``params`` of a workload spec, headed by comments that say where they came from.

    Paste it into a ``kind: lab`` spec (``lab-habits`` ships one): the comments keep the
    provenance (trace, its checksum, the command, what was measured) beside the numbers.
    """
    run, factor = fit.run_time, fit.limit_factor
    lines = [
        f"# User habits fitted by: {command}",
        f"# trace: {fit.source} (sha256 {sha256})",
        f"# {run.jobs:,} jobs of {run.users} users with >= {fit.min_jobs} jobs"
        f" that ran >= {fit.min_run_s:g} s",
        f"# log run time: within-user sigma {run.within_sigma:.3f}, between-user sigma"
        f" {run.between_sigma:.3f}, share {run.share:.3f}; spread of users' own sigmas"
        f" {fit.run_time_sigma_spread:.3f}",
        f"# log(limit / run time): within-user sigma {factor.within_sigma:.3f},"
        f" between-user sigma {factor.between_sigma:.3f}, share {factor.share:.3f}",
        "# generator shares calibrated to reproduce both trace shares in a"
        f" {calibrated.jobs:,}-job lab sample of {calibrated.jobs // JOBS_PER_USER:,} users"
        " (loadmaster.workload.habits.calibrate)",
        "params:",
    ]
    for name, value in habits_params(fit, calibrated).items():
        text = "true" if value is True else f"{value:g}"
        lines.append(f"  {name}: {text}")
    return "\n".join(lines) + "\n"
