"""Fitting users' habits: how much of a trace's run-time and over-asking variation is personal.

Real clusters repeat themselves: a user's jobs look like that user's past jobs
(Tsafrir, Etsion and Feitelson's run-time predictor, which the ``backfill``
plugin's ``estimate: history`` implements, rests on it). The lab generator
models this with ``LabWorkloadParams.user_habits``; this module measures, on
any trace that records who submitted each job, the numbers it needs:

* the share of the variance of log run time that lies *between* users (the
  intraclass correlation of a one-way random-effects model), the rest lying
  within each user's own jobs;
* the *persistence* of the within-user part: the lag-1 correlation of a
  user's consecutive jobs around the user's mean (users submit runs of similar
  jobs);
* the spread of users' own within-user run-time sigmas;
* the same share and persistence for the log over-asking factor, limit / run time.

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


HISTORY_JOBS = 2
"""Run times the history prediction averages: the ``backfill`` plugin's ``history_jobs`` default."""


@dataclass(frozen=True, slots=True)
class RankSignal:
    """How well what a scheduler knows at submission ranks jobs by their true run time."""

    jobs: int
    """Jobs whose user had submitted at least one earlier job (the ones compared)."""
    limit_spearman: float
    """Rank correlation of the requested time limit with the run time."""
    history_spearman: float
    """Rank correlation of the history prediction (the mean of the user's last two run times in
    submission order, capped by the limit, as ``backfill``'s ``estimate: history``) with it."""
    corrected_spearman: float
    """Rank correlation of the limit corrected by the user's over-asking (the limit times the
    geometric mean of the user's last two run time / limit ratios) with it: what a predictor
    using both the limit and the user's history can see."""


def rank_signal(
    users: ObjectArray, submit_s: FloatArray, duration_s: FloatArray, limit_s: FloatArray
) -> RankSignal:
    """The rank correlations of :class:`RankSignal`, jobs taken in submission order.

    A scheduler sees a run time only once the job ends; taking the previous jobs in submission
    order instead is the predictor at its best, an upper bound on what history tells it.
    """
    runs: dict[object, list[float]] = {}
    ratios: dict[object, list[float]] = {}
    truth, limits, predicted, corrected = [], [], [], []
    for i in np.argsort(submit_s, kind="stable"):
        run, limit = float(duration_s[i]), float(limit_s[i])
        recent = runs.setdefault(users[i], [])[-HISTORY_JOBS:]
        if recent:
            truth.append(run)
            limits.append(limit)
            predicted.append(min(sum(recent) / len(recent), limit))
            log_ratio = np.mean(np.log(ratios[users[i]][-HISTORY_JOBS:]))
            corrected.append(min(limit * math.exp(log_ratio), limit))
        runs[users[i]].append(run)
        ratios.setdefault(users[i], []).append(run / limit)
    if len(truth) < 2:
        return RankSignal(len(truth), math.nan, math.nan, math.nan)
    return RankSignal(
        len(truth), _spearman(limits, truth), _spearman(predicted, truth), _spearman(corrected, truth)
    )


def _spearman(x: list[float], y: list[float]) -> float:
    """Rank correlation, ties ranked in order of appearance (whole-second run times tie often,
    but over thousands of jobs that moves the value in the third decimal at most)."""
    rx = np.argsort(np.argsort(np.asarray(x), kind="stable")).astype(np.float64)
    ry = np.argsort(np.argsort(np.asarray(y), kind="stable")).astype(np.float64)
    return float(np.corrcoef(rx, ry)[0, 1])


@dataclass(frozen=True, slots=True)
class UserHabitsFit:
    """Users' habits measured on one trace, and the generator parameters they give."""

    source: str
    """Trace file name."""
    min_jobs: int
    min_run_s: float
    run_time: VarianceSplit
    """Log run time (s) of jobs that ran at least ``min_run_s``."""
    run_time_persistence: float
    """Lag-1 correlation of consecutive jobs' log run times around their user's mean."""
    run_time_sigma_spread: float
    """Standard deviation of log(a user's own run-time sigma / the pooled one), noise removed."""
    limit_factor: VarianceSplit
    """Log of time limit / run time, over jobs with both."""
    limit_factor_persistence: float
    """Lag-1 correlation of consecutive jobs' log factors around their user's mean."""
    signal: RankSignal
    """How well the limit and the user's history rank those jobs by run time."""


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


def persistence(values: FloatArray, users: ObjectArray, min_jobs: int = MIN_JOBS) -> float:
    """Lag-1 correlation of consecutive values of the same user around that user's mean.

    ``values`` are in submission order; per user with at least ``min_jobs`` values the
    residuals ``r`` from the user's mean give ``sum r_k r_(k-1) / sum r_k**2``, pooled over
    users (so heavy users weigh by their jobs). Removing the mean biases it down by about
    1 / jobs per user, the same on a trace and on a calibration sample of as many jobs per user.
    """
    numerator = denominator = 0.0
    for group in _groups(values, users, min_jobs):
        residual = group - group.mean()
        numerator += float((residual[1:] * residual[:-1]).sum())
        denominator += float((residual * residual).sum())
    return numerator / denominator if denominator > 0.0 else 0.0


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
    order = np.argsort(np.asarray(columns.submit_s, dtype=np.float64), kind="stable")
    users = np.asarray(columns.user, dtype=object)[order]
    duration = np.asarray(columns.duration_s, dtype=np.float64)[order]
    limit = np.asarray(columns.time_limit_s, dtype=np.float64)[order]
    submit = np.asarray(columns.submit_s, dtype=np.float64)[order]
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
        run_time_persistence=persistence(log_run, users[ran], min_jobs),
        run_time_sigma_spread=sigma_spread(log_run, users[ran], min_jobs),
        limit_factor=variance_split(log_factor, users[with_limit], min_jobs),
        limit_factor_persistence=persistence(log_factor, users[with_limit], min_jobs),
        signal=rank_signal(users[with_limit], submit[with_limit], duration[with_limit], limit[with_limit]),
    )


CALIBRATION_JOBS = 50_000
"""Jobs of a calibration sample. With :data:`JOBS_PER_USER` that is 1,000 users: the lab's 40 would
leave the between-user variance, estimated from 40 user means, about 20% noisy; 1,000 bring it
near 5%."""
JOBS_PER_USER = 50
"""Jobs per user of a calibration sample (heavy/light fractions kept): users' means well measured."""
CALIBRATION_STEPS = 10
"""Bisection steps per parameter and round: a value is then known to 1 / 2**10, about the 3
decimals written."""
CALIBRATION_ROUNDS = 2
"""Rounds over the four parameters: each moves the others' measurements a little (a persistent
chain spreads users' means too), so a second round settles them."""
_CALIBRATION_POOL = PoolTarget(
    name="calibration",
    resource_type=ResourceType("calibration", "any", 81_920, 8_000, 64_000),
    capacity_gpus=128,
    gpus_per_node=8,
    share=1.0,
    max_job_gpus=64,
)
"""One pool that takes every size the lab draws, so that draw order is submission order: the
pools only restrict sizes, whose effect on the split of run-time variance is small."""
_TUNED = (
    ("user_run_time_share", "run_time_share", 1.0),
    ("user_run_time_persistence", "run_time_persistence", 0.99),
    ("user_limit_factor_share", "limit_factor_share", 1.0),
    ("user_limit_factor_persistence", "limit_factor_persistence", 0.99),
)
"""(generator field, measured statistic, upper end of its search)."""


@dataclass(frozen=True, slots=True)
class HabitStats:
    """What calibration matches: the shares and persistences of log run time and log factor."""

    run_time_share: float
    run_time_persistence: float
    limit_factor_share: float
    limit_factor_persistence: float

    @classmethod
    def of(cls, fit: UserHabitsFit) -> HabitStats:
        return cls(
            fit.run_time.share, fit.run_time_persistence, fit.limit_factor.share, fit.limit_factor_persistence
        )


@dataclass(frozen=True, slots=True)
class Calibrated:
    """Generator parameters with which lab jobs show a trace's :class:`HabitStats`."""

    params: LabWorkloadParams
    """``user_habits`` on, the four calibrated fields and the fitted sigma spread set."""
    measured: HabitStats
    """What a calibration sample of ``params`` shows."""
    jobs: int
    """Jobs of the calibration samples."""


def lab_stats(params: LabWorkloadParams, seed: int = 0, jobs: int = CALIBRATION_JOBS) -> HabitStats:
    """The :class:`HabitStats` of a lab sample of ``params`` with ``jobs`` jobs and
    ``jobs / JOBS_PER_USER`` users (heavy/light fractions kept), measured as on a trace."""
    wide = _replace(params, users=max(2, jobs // JOBS_PER_USER))
    drawn = sample_lab_workload(
        wide, (_CALIBRATION_POOL,), n_jobs=jobs, load=1.0, rng=np.random.default_rng(seed)
    )
    users = np.array([t.job.user for t in drawn], dtype=object)
    log_run = np.log([t.duration_s for t in drawn])
    log_factor = np.log([t.job.time_limit_s / t.duration_s for t in drawn])
    return HabitStats(
        variance_split(log_run, users).share,
        persistence(log_run, users),
        variance_split(log_factor, users).share,
        persistence(log_factor, users),
    )


def calibrate(
    fit: UserHabitsFit, params: LabWorkloadParams | None = None, seed: int = 0, jobs: int = CALIBRATION_JOBS
) -> Calibrated:
    """The generator's shares and persistences with which lab jobs show the trace's statistics.

    The generator's parameters act on the class model's noise only, while the lab's heavy and
    light users already differ in what they run (a between-user part without habits), each job
    draws its class afresh (within-user noise no chain carries), and over-asking is clipped and
    rounded to whole hours; so the trace's statistics are not the generator's parameters. Each
    parameter in turn is found by bisection on common random numbers (one seed, only that
    parameter changes) against :func:`lab_stats`, for :data:`CALIBRATION_ROUNDS` rounds; a
    statistic the generator cannot reach gives the nearest end of the search.
    """
    target = HabitStats.of(fit)
    current = _replace(
        params or LabWorkloadParams(),
        user_habits=True,
        user_run_time_sigma_spread=fit.run_time_sigma_spread,
        **{field: min(getattr(target, stat), high) for field, stat, high in _TUNED},
    )
    for _ in range(CALIBRATION_ROUNDS):
        for field, stat, high in _TUNED:

            def measure(
                value: float, field: str = field, stat: str = stat, base: LabWorkloadParams = current
            ) -> float:
                measured: float = getattr(lab_stats(_replace(base, **{field: value}), seed, jobs), stat)
                return measured

            current = _replace(current, **{field: _bisect(measure, getattr(target, stat), high)})
    return Calibrated(current, lab_stats(current, seed, jobs), jobs)


def _bisect(measure: Callable[[float], float], target: float, high: float) -> float:
    """The value in [0, high] whose measurement is ``target`` (the measure increases with it)."""
    low = 0.0
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


def habits_params(calibrated: Calibrated) -> dict[str, float | bool]:
    """The ``LabWorkloadParams`` fields a calibration sets, rounded to 3 decimals as written."""
    params = calibrated.params
    out: dict[str, float | bool] = {"user_habits": True}
    for field in ("user_run_time_share", "user_run_time_persistence", "user_run_time_sigma_spread"):
        out[field] = round(getattr(params, field), 3)
    for field in ("user_limit_factor_share", "user_limit_factor_persistence"):
        out[field] = round(getattr(params, field), 3)
    return out


def habits_yaml(fit: UserHabitsFit, calibrated: Calibrated, *, sha256: str, command: str) -> str:
    """The fitted ``params`` of a workload spec, headed by comments that say where they came from.

    Paste it into a ``kind: lab`` spec (``lab-habits`` ships one): the comments keep the
    provenance (trace, its checksum, the command, what was measured) beside the numbers.
    """
    run, factor, lab = fit.run_time, fit.limit_factor, calibrated.measured
    lines = [
        f"# User habits fitted by: {command}",
        f"# trace: {fit.source} (sha256 {sha256})",
        f"# {run.jobs:,} jobs of {run.users} users with >= {fit.min_jobs} jobs"
        f" that ran >= {fit.min_run_s:g} s",
        f"# log run time: within-user sigma {run.within_sigma:.3f},"
        f" between-user sigma {run.between_sigma:.3f},",
        f"#   share {run.share:.3f}, persistence {fit.run_time_persistence:.3f},"
        f" spread of users' own sigmas {fit.run_time_sigma_spread:.3f}",
        f"# log(limit / run time): within-user sigma {factor.within_sigma:.3f},"
        f" between-user sigma {factor.between_sigma:.3f},",
        f"#   share {factor.share:.3f}, persistence {fit.limit_factor_persistence:.3f}",
        f"# rank correlation with run time over {fit.signal.jobs:,} jobs:"
        f" limit {fit.signal.limit_spearman:.3f},",
        f"#   user history {fit.signal.history_spearman:.3f},"
        f" limit x user's recent run/limit {fit.signal.corrected_spearman:.3f}",
        f"# calibrated on {calibrated.jobs:,}-job lab samples of {calibrated.jobs // JOBS_PER_USER:,} users"
        " (loadmaster.workload.habits.calibrate), which show",
        f"#   shares {lab.run_time_share:.3f} / {lab.limit_factor_share:.3f},"
        f" persistences {lab.run_time_persistence:.3f} / {lab.limit_factor_persistence:.3f}",
        "params:",
    ]
    for name, value in habits_params(calibrated).items():
        text = "true" if value is True else f"{value:g}"
        lines.append(f"  {name}: {text}")
    return "\n".join(lines) + "\n"
