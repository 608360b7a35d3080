"""Fitting a :class:`~loadmaster.workload.fitted.WorkloadModel` to the columns of a job trace.

The input is :class:`JobColumns`, plain numpy columns (the trace layer builds
them from the canonical job table), so the fitting math knows no file format.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError
from loadmaster.workload.fitted import (
    DAY_S,
    HOUR_S,
    HOURS_PER_WEEK,
    MIN_MULTIPLIER,
    ArrivalModel,
    Atom,
    Clock,
    FittedOn,
    JobShape,
    PositiveDistribution,
    Quantiles,
    UserClass,
    WorkloadModel,
)
from loadmaster.workload.mixture import (
    MAX_COMPONENTS,
    MIN_SIGMA,
    LogNormalComponent,
    LogNormalMixture,
    select_lognormal_mixture,
)

FloatArray = npt.NDArray[np.float64]
ObjectArray = npt.NDArray[np.object_]

ATOM_MIN_SHARE = 0.05
"""A value that at least this share of a trace's values equal exactly becomes a point mass (atom):
a continuous mixture would smear it out and the KS distance would show it."""

MAX_ATOMS = 5
"""Most atoms per quantity; beyond a few, the data are discrete and the mixture should carry them."""

_EPOCH_HOUR_OF_WEEK = 72.0
"""1970-01-01 00:00 UTC was a Thursday: 72 hours after Monday 00:00."""


@dataclass(frozen=True, eq=False)
class JobColumns:
    """The trace columns a fit reads, one row per job (NaN where the trace has no value)."""

    user: ObjectArray
    """Who submitted each job (strings; '' when unknown)."""
    submit_s: FloatArray
    duration_s: FloatArray
    time_limit_s: FloatArray
    tasks: FloatArray
    gpu_milli_per_task: FloatArray
    gpu_memory_mib: FloatArray
    source: str = ""
    """Trace file name, kept in the model."""
    origin_epoch_s: float | None = None
    """Unix time of the trace's time 0, when the trace recorded the wall clock."""
    capacity_gpus: int | None = None
    """GPUs of the traced cluster, when known."""

    def __post_init__(self) -> None:
        sizes = {name: np.asarray(getattr(self, name)).size for name in _ROW_COLUMNS}
        if len(set(sizes.values())) != 1:
            raise ModelError(f"JobColumns: every column must have one value per job, got sizes {sizes}")

    def __len__(self) -> int:
        return int(np.asarray(self.submit_s).size)

    @property
    def gpus(self) -> FloatArray:
        """Total GPUs per job."""
        return np.asarray(self.tasks * self.gpu_milli_per_task / 1000.0, dtype=np.float64)


_ROW_COLUMNS = (
    "user",
    "submit_s",
    "duration_s",
    "time_limit_s",
    "tasks",
    "gpu_milli_per_task",
    "gpu_memory_mib",
)


@dataclass(frozen=True, slots=True)
class FitOptions:
    """Choices of a fit, with the reason for each default."""

    heavy_gpu_hour_share: float = 0.8
    """Heavy users are the fewest top users (by GPU-hours) that hold at least this share of them:
    the Pareto-like 80% that a handful of people use in lab clusters."""
    max_components: int = MAX_COMPONENTS
    """Most log-normal components of a mixture; the BIC picks the number up to this."""
    quantile_points: int = 101
    """Quantiles kept for empirical distributions (time-limit ratio, GPU memory): every percentile."""
    min_cycle_days: float = 2.0
    """The daily cycle is fitted only when the trace spans at least this many days; shorter traces
    would turn noise into multipliers."""
    min_week_cycle_days: float = 14.0
    """The weekly cycle (wall clock only) needs at least two weeks for the same reason."""

    def __post_init__(self) -> None:
        if not 0.0 < self.heavy_gpu_hour_share <= 1.0:
            raise ModelError(f"heavy_gpu_hour_share must be in (0, 1], got {self.heavy_gpu_hour_share}")
        if not 1 <= self.max_components <= MAX_COMPONENTS:
            raise ModelError(
                f"max_components must be between 1 and {MAX_COMPONENTS}, got {self.max_components}"
            )
        if self.quantile_points < 2:
            raise ModelError(f"quantile_points must be >= 2, got {self.quantile_points}")


def fit_workload(columns: JobColumns, options: FitOptions | None = None) -> WorkloadModel:
    """Fit the workload model to a trace's columns.

    Arrivals are fitted on every job, classes and shapes on every job with a
    size, GPU-hours, run times and time limits on the jobs whose run time is
    known and >= 0 (a class without any such job is dropped). Raises
    ModelError when fewer than two jobs have a run time or the submissions do
    not span a positive time.
    """
    opts = options or FitOptions()
    known = np.isfinite(columns.duration_s) & (columns.duration_s >= 0.0) & np.isfinite(columns.gpus)
    if int(known.sum()) < 2:
        raise ModelError(f"fitting needs at least two jobs with a known run time, got {int(known.sum())}")
    submit = np.sort(columns.submit_s[np.isfinite(columns.submit_s)])
    span_s = float(submit[-1] - submit[0]) if submit.size else 0.0
    if span_s <= 0.0:
        raise ModelError(f"fitting needs submissions at two or more distinct times, got a span of {span_s} s")
    heavy = _heavy_mask(columns, known, opts.heavy_gpu_hour_share)
    sized = np.isfinite(columns.gpus)
    classes = tuple(
        _fit_class(name, columns, sized & mask, known, opts)
        for name, mask in (("heavy", heavy), ("light", ~heavy))
        if np.any(known & mask)
    )
    gpu_s = float(np.sum(columns.gpus[known] * columns.duration_s[known]))
    capacity = columns.capacity_gpus
    fitted_on = FittedOn(
        source=columns.source,
        jobs=len(columns),
        span_s=span_s,
        capacity_gpus=capacity,
        offered_load=gpu_s / (capacity * span_s) if capacity else None,
        heavy_gpu_hour_share=opts.heavy_gpu_hour_share,
    )
    return WorkloadModel(fitted_on, _balanced(classes), fit_arrivals(submit, columns.origin_epoch_s, opts))


def _balanced(classes: tuple[UserClass, ...]) -> tuple[UserClass, ...]:
    """The classes with job shares that sum to exactly 1."""
    total = math.fsum(c.job_share for c in classes)
    return tuple(
        UserClass(
            c.name,
            c.users,
            c.job_share / total,
            c.gpu_hour_share,
            c.shapes,
            c.duration_s,
            c.time_limit_ratio,
            c.gpu_memory_mib,
        )
        for c in classes
    )


def _heavy_mask(columns: JobColumns, known: npt.NDArray[np.bool_], share: float) -> npt.NDArray[np.bool_]:
    """Jobs of the heavy users: the fewest top users by GPU-hours holding ``share`` of them.

    A trace whose jobs use no GPU time ranks users by job count instead.
    """
    users = np.asarray(columns.user, dtype=object)
    names, index = np.unique(users[known].astype(str), return_inverse=True)
    usage = np.bincount(index, weights=columns.gpus[known] * columns.duration_s[known], minlength=names.size)
    if usage.sum() <= 0.0:
        usage = np.bincount(index, minlength=names.size).astype(np.float64)
    order = np.argsort(-usage, kind="stable")
    cumulative = np.cumsum(usage[order]) / usage.sum()
    count = int(np.searchsorted(cumulative, share - 1e-12) + 1)
    heavy_names = set(names[order[:count]].tolist())
    return np.array([str(u) in heavy_names for u in users], dtype=bool)


def _fit_class(
    name: str,
    columns: JobColumns,
    mask: npt.NDArray[np.bool_],
    known: npt.NDArray[np.bool_],
    opts: FitOptions,
) -> UserClass:
    """One class from its jobs (``mask``); run-time quantities from those with a known run time."""
    gpu_s = np.where(known, columns.gpus * columns.duration_s, 0.0)
    total_gpu_s = float(gpu_s.sum())
    duration = columns.duration_s[mask & known]
    return UserClass(
        name=name,
        users=int(np.unique(np.asarray(columns.user, dtype=object)[mask].astype(str)).size),
        job_share=float(mask.sum() / np.isfinite(columns.gpus).sum()),
        gpu_hour_share=float(gpu_s[mask].sum() / total_gpu_s) if total_gpu_s > 0.0 else 0.0,
        shapes=_shapes(columns.tasks[mask], columns.gpu_milli_per_task[mask]),
        duration_s=fit_positive(duration, opts.max_components),
        time_limit_ratio=_ratio(columns.time_limit_s[mask & known], duration, opts.quantile_points),
        gpu_memory_mib=_quantiles(columns.gpu_memory_mib[mask], opts.quantile_points),
    )


def _shapes(tasks: FloatArray, milli: FloatArray) -> tuple[JobShape, ...]:
    """The empirical distribution of (tasks, milli-GPU per task), smallest jobs first."""
    pairs = np.stack([tasks, milli], axis=1).astype(np.int64)
    unique, counts = np.unique(pairs, axis=0, return_counts=True)
    order = np.lexsort((unique[:, 0], unique[:, 0] * unique[:, 1]))
    shares = counts / counts.sum()
    return tuple(JobShape(int(unique[i, 0]), int(unique[i, 1]), float(shares[i])) for i in order)


def fit_positive(
    values: FloatArray, max_components: int = MAX_COMPONENTS, *, atoms_anywhere: bool = True
) -> PositiveDistribution:
    """Atoms plus a log-normal mixture (k by BIC) for the other values; NaNs ignored.

    Zero is always an atom when it occurs (a log-normal cannot draw it). With
    ``atoms_anywhere``, so is any value that at least :data:`ATOM_MIN_SHARE` of
    the values equal exactly (at most :data:`MAX_ATOMS` of them, the most
    frequent). Whole-number data keep a resolution of 1, so draws come out whole.
    """
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        raise ModelError("fit_positive: needs at least one finite value, got none")
    unique, counts = np.unique(finite, return_counts=True)
    share = counts / finite.size
    is_atom = (unique == 0.0) | ((share >= ATOM_MIN_SHARE) if atoms_anywhere else False)
    # Zero first (it must be an atom), then the most frequent values.
    order = np.lexsort((-share, unique != 0.0))
    chosen = [int(i) for i in order if is_atom[i]][:MAX_ATOMS]
    if len(chosen) == unique.size and unique.size > 1:  # all atoms: the rarest goes to the mixture
        chosen = chosen[:-1]
    atoms = tuple(Atom(float(unique[i]), float(share[i])) for i in sorted(chosen))
    rest = finite[~np.isin(finite, [a.value for a in atoms]) & (finite > 0.0)]
    if len(atoms) == 1 and rest.size == 0:  # only zeros: a zero can only be an atom
        atoms = (Atom(0.0, 1.0 - 1.0 / (finite.size + 1)),)
    return PositiveDistribution(atoms, _mixture(rest, max_components), _resolution(finite))


def _mixture(positive: FloatArray, max_components: int) -> LogNormalMixture:
    """The best-BIC mixture; a narrow single component when too few values allow a fit."""
    if positive.size < 2 or np.ptp(positive) == 0.0:
        centre = float(np.log(positive[0])) if positive.size else 0.0
        return LogNormalMixture((LogNormalComponent(1.0, centre, MIN_SIGMA),))
    return select_lognormal_mixture(positive, max_components)[0].mixture


def _resolution(values: FloatArray) -> float:
    """1.0 when every value is a whole number (a trace in whole seconds or MiB), else 0 (continuous)."""
    return 1.0 if bool(np.all(values == np.round(values))) else 0.0


def _quantiles(values: FloatArray, points: int) -> Quantiles | None:
    """The empirical quantiles of the finite values, or None when there are none."""
    finite = values[np.isfinite(values)]
    if finite.size == 0:
        return None
    probabilities = np.linspace(0.0, 1.0, points)
    q = np.quantile(finite, probabilities, method="inverted_cdf")
    return Quantiles(tuple(float(v) for v in np.maximum.accumulate(q)), _resolution(finite))


def _ratio(limit_s: FloatArray, duration_s: FloatArray, points: int) -> Quantiles | None:
    """Quantiles of requested limit / run time over jobs with both > 0; None when no job has both."""
    ok = np.isfinite(limit_s) & np.isfinite(duration_s) & (limit_s > 0.0) & (duration_s > 0.0)
    if not np.any(ok):
        return None
    ratio = np.quantile(limit_s[ok] / duration_s[ok], np.linspace(0.0, 1.0, points), method="inverted_cdf")
    return Quantiles(tuple(float(v) for v in ratio))


def fit_arrivals(submit_s: FloatArray, origin_epoch_s: float | None, opts: FitOptions) -> ArrivalModel:
    """The cyclic rate and the operational-time gap distribution of sorted submission times."""
    clock: Clock = "wall" if origin_epoch_s is not None else "relative"
    origin_hour = (origin_epoch_s / HOUR_S + _EPOCH_HOUR_OF_WEEK) if origin_epoch_s is not None else 0.0
    # Hours since a Monday 00:00 (any Monday on a wall clock; time 0 on a relative one).
    hours = submit_s / HOUR_S + origin_hour % HOURS_PER_WEEK
    span_days = float(submit_s[-1] - submit_s[0]) / DAY_S
    hour_of_day = _multipliers(hours, 1.0, 24) if span_days >= opts.min_cycle_days else np.ones(24)
    weekly = clock == "wall" and span_days >= opts.min_week_cycle_days
    day_of_week = _multipliers(hours, 24.0, 7) if weekly else np.ones(7)
    start = float(hours[0] % HOURS_PER_WEEK)
    cycle = ArrivalModel(
        clock=clock,
        start_hour_of_week=start,
        hour_of_day=tuple(float(v) for v in hour_of_day),
        day_of_week=tuple(float(v) for v in day_of_week),
        gap_s=PositiveDistribution((), LogNormalMixture((LogNormalComponent(1.0, 0.0, 1.0),))),
        submit_resolution_s=_resolution(submit_s),
    )
    operational = cycle.to_operational(hours * HOUR_S)
    gaps = np.diff(operational)
    gaps[np.diff(submit_s) == 0.0] = 0.0
    return ArrivalModel(
        cycle.clock,
        start,
        cycle.hour_of_day,
        cycle.day_of_week,
        _gap_distribution(gaps, opts.max_components),
        cycle.submit_resolution_s,
    )


def _gap_distribution(gaps: FloatArray, max_components: int) -> PositiveDistribution:
    fitted = fit_positive(gaps, max_components, atoms_anywhere=False)
    return PositiveDistribution(fitted.atoms, fitted.mixture, 0.0)


def _multipliers(hours: FloatArray, bin_hours: float, bins: int) -> FloatArray:
    """Rate multipliers (mean 1) per bin of ``bin_hours`` hours, cycling every ``bins`` bins.

    Each bin's rate is its submissions divided by the time the trace's window
    spent in it, so a trace that covers five Mondays and four Sundays is not
    biased towards Mondays.
    """
    index = (np.floor(hours / bin_hours) % bins).astype(np.int64)
    counts = np.bincount(index, minlength=bins).astype(np.float64)
    exposure = _exposure(float(hours[0]) / bin_hours, float(hours[-1]) / bin_hours, bins)
    rate = np.where(exposure > 0.0, counts / np.maximum(exposure, 1e-12), 0.0)
    rate = rate / rate.mean() if rate.mean() > 0.0 else np.ones(bins)
    rate = np.maximum(rate, MIN_MULTIPLIER)
    return np.asarray(rate / rate.mean(), dtype=np.float64)


def _exposure(first: float, last: float, bins: int) -> FloatArray:
    """Time (in bins) the window [first, last] spends in each of ``bins`` cyclic bins."""
    whole = math.floor((last - first) / bins)
    exposure = np.full(bins, float(whole))
    start = first + whole * bins
    edges = np.floor(start) + np.arange(bins + 2)
    lows = np.clip(edges[:-1], start, last)
    highs = np.clip(edges[1:], start, last)
    np.add.at(exposure, (np.floor(edges[:-1]) % bins).astype(np.int64), highs - lows)
    return exposure
