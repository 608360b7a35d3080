"""What a trace holds, in numbers: the summary ``loadmaster trace inspect`` prints and plots.

Everything here is pure numpy over the canonical table. A statistic whose
columns the trace does not record is None (or an empty array), never a
made-up value, so that the terminal and the plots can say "not in this
trace" instead of drawing zeros.

Wall-clock statistics (hour of day, weekday) use ``origin_epoch_s`` from the
trace's metadata, or an SWF log's ``UnixStartTime``, and are in UTC. Without
either the clock is *relative*: hours are ``submit_s mod 86400`` and
weekdays count days from the trace's origin.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.model.job import SIZE_CLASSES
from loadmaster.traces.trace import Trace

FloatArray = npt.NDArray[np.float64]

PERCENTILES: tuple[int, ...] = (10, 50, 90, 99)
"""Duration percentiles the summary reports."""

HEAVY_USER_FRACTION = 0.10
"""The heaviest users whose share of GPU-hours the summary reports: the top 10% by GPU-hours."""

EPOCH_KEYS = ("origin_epoch_s", "UnixStartTime")
"""Metadata keys that give the wall-clock time of the trace's origin, in Unix seconds (first found wins)."""

WEEKDAYS = ("Mon", "Tue", "Wed", "Thu", "Fri", "Sat", "Sun")
_EPOCH_WEEKDAY = 3
"""1970-01-01, the Unix epoch, was a Thursday (Monday = 0)."""
_DAY_S = 86_400.0
_HOUR_S = 3_600.0


@dataclass(frozen=True, slots=True)
class SizeClassDemand:
    """Jobs and GPU-hours of one size class (total GPUs per job, as in :data:`SIZE_CLASSES`)."""

    label: str
    jobs: int
    gpu_hours: float


@dataclass(frozen=True, slots=True)
class TraceSummary:
    """A trace at a glance. Durations in s, GPU-hours from the actual run times.

    Fields that need a column the trace lacks are None: ``top_user_share``
    without users, ``duration_percentiles_s`` without run times,
    ``median_overestimate`` without both time limits and run times.
    """

    name: str
    jobs: int
    users: int
    """Distinct non-empty users; 0 when the format records none."""
    groups: int
    span_s: float
    """Last submission minus first (0 for fewer than two jobs)."""
    gpu_hours: float
    """Sum of GPUs x actual run time over the jobs whose run time is known."""
    jobs_with_duration: int
    size_classes: tuple[SizeClassDemand, ...]
    """Every size class with at least one job, in :data:`SIZE_CLASSES` order."""
    duration_percentiles_s: tuple[tuple[int, float], ...] | None
    mean_duration_s: float | None
    top_user_share: float | None
    """Share of GPU-hours of the heaviest :data:`HEAVY_USER_FRACTION` of users (at least one user)."""
    statuses: tuple[tuple[str, int], ...]
    """Final states and their job counts, most frequent first."""
    time_limit_fraction: float
    """Fraction of jobs with a requested time limit (> 0)."""
    median_overestimate: float | None
    """Median of time limit / actual run time over jobs with both (run time > 0)."""
    origin_epoch_s: float | None
    """Wall clock of the trace's origin, Unix s; None: relative clock."""

    @property
    def clock(self) -> str:
        """'UTC' when the origin's wall clock is known, else 'relative clock'."""
        return "UTC" if self.origin_epoch_s is not None else "relative clock"


def trace_name(trace: Trace) -> str:
    """The trace's source file name without its suffixes (``lublin_256`` for ``lublin_256.swf.gz``)."""
    source = trace.meta.get("source") or trace.report.source or "trace"
    base = source.replace("\\", "/").rsplit("/", 1)[-1]
    return base.split(".", 1)[0] or "trace"


def origin_epoch_s(meta: dict[str, str]) -> float | None:
    """The wall clock of the trace's origin from its metadata (:data:`EPOCH_KEYS`), or None."""
    for key in EPOCH_KEYS:
        try:
            value = float(meta[key])
        except (KeyError, ValueError):
            continue
        if math.isfinite(value) and value >= 0:
            return value
    return None


def gpu_hours_per_job(trace: Trace) -> FloatArray:
    """GPUs x actual run time in hours per job; NaN where the run time is unknown."""
    hours: FloatArray = trace.gpus_per_job() * trace.column("duration_s") / _HOUR_S
    return hours


def summarize_trace(trace: Trace) -> TraceSummary:
    """The :class:`TraceSummary` of ``trace``."""
    submit = trace.column("submit_s")
    duration = trace.column("duration_s")
    known = np.isfinite(duration)
    work = gpu_hours_per_job(trace)
    limits = trace.column("time_limit_s")
    has_limit = np.isfinite(limits) & (limits > 0)
    both = has_limit & known & (duration > 0)
    users = _nonempty(trace.column("user"))
    percentiles = None
    if np.any(known):
        values = np.percentile(duration[known], PERCENTILES)
        percentiles = tuple((p, float(v)) for p, v in zip(PERCENTILES, values, strict=True))
    return TraceSummary(
        name=trace_name(trace),
        jobs=len(trace),
        users=len(set(users)),
        groups=len(set(_nonempty(trace.column("group")))),
        span_s=float(submit.max() - submit.min()) if submit.size else 0.0,
        gpu_hours=float(np.nansum(work)),
        jobs_with_duration=int(known.sum()),
        size_classes=size_class_demand(trace),
        duration_percentiles_s=percentiles,
        mean_duration_s=float(duration[known].mean()) if np.any(known) else None,
        top_user_share=top_user_share(trace),
        statuses=tuple(Counter(str(s) for s in trace.column("status")).most_common()),
        time_limit_fraction=float(has_limit.mean()) if len(trace) else 0.0,
        median_overestimate=float(np.median(limits[both] / duration[both])) if np.any(both) else None,
        origin_epoch_s=origin_epoch_s(trace.meta),
    )


def _nonempty(values: npt.NDArray[np.object_]) -> list[str]:
    return [str(v) for v in values if v]


def size_class_demand(trace: Trace) -> tuple[SizeClassDemand, ...]:
    """Jobs and GPU-hours per size class, for the classes that have jobs."""
    gpus = trace.gpus_per_job()
    work = np.nan_to_num(gpu_hours_per_job(trace))
    rows = []
    for label, low, high in SIZE_CLASSES:
        inside = (gpus >= low) & (gpus < high)
        if np.any(inside):
            rows.append(SizeClassDemand(label, int(inside.sum()), float(work[inside].sum())))
    return tuple(rows)


def user_gpu_hours(trace: Trace) -> FloatArray:
    """GPU-hours of each non-empty user, heaviest first (empty when the trace has no users)."""
    users = trace.column("user")
    work = np.nan_to_num(gpu_hours_per_job(trace))
    named = np.array([bool(u) for u in users], dtype=bool)
    if not np.any(named):
        return np.zeros(0)
    _, inverse = np.unique(users[named].astype(str), return_inverse=True)
    totals = np.bincount(inverse, weights=work[named])
    return np.sort(totals)[::-1].astype(np.float64)


def top_user_share(trace: Trace, fraction: float = HEAVY_USER_FRACTION) -> float | None:
    """Share of all GPU-hours used by the heaviest ``fraction`` of users (at least one user).

    None when the trace has no users or no GPU-hours.
    """
    totals = user_gpu_hours(trace)
    if totals.size == 0 or totals.sum() <= 0:
        return None
    top = max(1, math.ceil(fraction * totals.size))
    return float(totals[:top].sum() / totals.sum())


def user_share_curve(trace: Trace) -> tuple[FloatArray, FloatArray]:
    """(fraction of users, heaviest first; their cumulative share of GPU-hours), both from 0 to 1.

    A Lorenz-like curve read from the heavy end: the point (0.1, 0.6) says the
    top 10% of users used 60% of the GPU-hours. Empty arrays when the trace
    has no users or no GPU-hours.
    """
    totals = user_gpu_hours(trace)
    if totals.size == 0 or totals.sum() <= 0:
        return np.zeros(0), np.zeros(0)
    x = np.arange(totals.size + 1, dtype=np.float64) / totals.size
    y = np.concatenate(([0.0], np.cumsum(totals) / totals.sum()))
    return x, y


def duration_cdf(trace: Trace) -> tuple[FloatArray, FloatArray]:
    """(sorted positive run times in s, fraction of those jobs at most that long); empty without run times."""
    duration = trace.column("duration_s")
    values = np.sort(duration[np.isfinite(duration) & (duration > 0)])
    return values, np.arange(1, values.size + 1, dtype=np.float64) / max(values.size, 1)


def arrivals_by_hour(trace: Trace) -> FloatArray:
    """Submissions per hour of day (24 counts), on the wall clock when known (UTC), else relative."""
    clock = trace.column("submit_s") + (origin_epoch_s(trace.meta) or 0.0)
    hours = np.floor(np.mod(clock, _DAY_S) / _HOUR_S).astype(np.int64)
    return np.bincount(np.clip(hours, 0, 23), minlength=24).astype(np.float64)


def arrivals_by_weekday(trace: Trace) -> FloatArray:
    """Submissions per weekday (7 counts, Monday first) when the wall clock is known; else per day
    of the week counted from the trace's origin (day 0 first)."""
    epoch = origin_epoch_s(trace.meta)
    days = np.floor((trace.column("submit_s") + (epoch or 0.0)) / _DAY_S).astype(np.int64)
    if epoch is not None:
        days = days + _EPOCH_WEEKDAY
    return np.bincount(np.mod(days, 7), minlength=7).astype(np.float64)


def requested_vs_actual(trace: Trace) -> tuple[FloatArray, FloatArray]:
    """(actual run time s, requested time limit s) of the jobs that have both, both > 0."""
    duration = trace.column("duration_s")
    limits = trace.column("time_limit_s")
    both = np.isfinite(duration) & np.isfinite(limits) & (duration > 0) & (limits > 0)
    return duration[both], limits[both]
