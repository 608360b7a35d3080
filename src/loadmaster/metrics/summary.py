"""Outcome metrics of one run: waits, slowdowns, utilisation, fairness and breakdowns.

Everything is computed from a :class:`JobTable` and a :class:`Timeline` with
vectorised numpy (no Python loop over jobs), so that 100,000 jobs summarise in
tens of milliseconds.

Conventions used throughout:

* wait statistics cover the jobs that started (``start_s`` not NaN);
* JCT and slowdowns cover the jobs that started *and* ended; their run time is
  ``duration_s``. A job that started but has no end has no known run time, so
  it is left out of slowdowns rather than guessed;
* a statistic over an empty set is NaN, a count or a sum over one is 0, so an
  empty run summarises without raising.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, fields

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError
from loadmaster.model.job import SIZE_CLASSES
from loadmaster.model.outcome import FloatArray, IntArray, JobTable, StrArray, Timeline

BoolArray = npt.NDArray[np.bool_]

_SECONDS_PER_HOUR = 3600.0
_NAN = float("nan")


def _json_number(value: float) -> float | int | None:
    """A number JSON can carry: NaN and infinities become None (JSON has neither)."""
    if isinstance(value, float) and not math.isfinite(value):
        return None
    return value


@dataclass(frozen=True, slots=True)
class GroupStats:
    """Outcome of one slice of the jobs (one size class, or one group).

    ``count`` counts every job of the slice, whether it ran or not. Waits cover
    the jobs that started, the bounded slowdown those that ended, and
    ``gpu_hours`` the GPUs held from start to end by jobs that ended. A mean or
    percentile over no job is NaN; ``gpu_hours`` is then 0.
    """

    count: int
    mean_wait_s: float
    p95_wait_s: float
    mean_bounded_slowdown: float
    gpu_hours: float

    def to_dict(self) -> dict[str, object]:
        """JSON-ready copy: NaN becomes None."""
        return {f.name: _json_number(getattr(self, f.name)) for f in fields(self)}


@dataclass(frozen=True, slots=True)
class RunSummary:
    """The headline numbers of one run, with breakdowns by job size and by group.

    Counts: ``jobs`` = ``jobs_ran`` (started) + ``jobs_rejected`` (refused at
    arrival) + the never-started part of ``jobs_unfinished``; a job that
    started but never ended is both ran and unfinished. Times are seconds.
    ``allocation_mean`` and ``fragmentation_mean`` are fractions of all GPUs
    (0..1), time-weighted over the timeline, which runs until the last job
    ends: a long drain after the last arrival lowers them.
    ``allocation_arrivals`` is the allocation over the arrival window only
    (first to last submission), the period the offered load refers to. ``jain_fairness`` is Jain's index
    over the per-user mean bounded slowdown (1 = every user slowed down
    equally, 1/n = one user bears it all; NaN with fewer than two users). ``by_size`` is ordered as
    :data:`SIZE_CLASSES` (labels that do not occur are left out), ``by_group``
    by group name.
    """

    jobs: int
    jobs_ran: int
    jobs_rejected: int
    jobs_unfinished: int
    mean_wait_s: float
    median_wait_s: float
    p95_wait_s: float
    p99_wait_s: float
    max_wait_s: float
    mean_jct_s: float
    mean_slowdown: float
    mean_bounded_slowdown: float
    p99_bounded_slowdown: float
    makespan_s: float
    allocation_mean: float
    fragmentation_mean: float
    allocation_arrivals: float
    """Allocation over the arrival window (first to last submission), a fraction of all GPUs."""
    jain_fairness: float
    starved_jobs: int
    held_idle_gpu_hours: float
    preempted_jobs: int
    """Jobs evicted at least once."""
    lost_gpu_hours: float
    """GPU-hours of work thrown away by preemption."""
    wasted_gpu_hours: float
    """Held idle by partial gangs plus lost to preemption."""
    by_size: Mapping[str, GroupStats]
    by_group: Mapping[str, GroupStats]

    def to_dict(self) -> dict[str, object]:
        """JSON-ready nested copy: breakdowns become dicts, NaN becomes None."""
        out: dict[str, object] = {}
        for f in fields(self):
            value = getattr(self, f.name)
            if isinstance(value, Mapping):
                out[f.name] = {key: stats.to_dict() for key, stats in value.items()}
            else:
                out[f.name] = _json_number(value)
        return out


def slowdown(wait_s: npt.ArrayLike, run_s: npt.ArrayLike) -> FloatArray:
    """Slowdown ``(wait + run) / run``, elementwise.

    A run time of 0 gives inf (NaN if the wait is 0 too); NaN in gives NaN out.
    """
    wait = np.asarray(wait_s, dtype=np.float64)
    run = np.asarray(run_s, dtype=np.float64)
    # Zero run times are legal input; their inf/NaN result is the documented answer.
    with np.errstate(divide="ignore", invalid="ignore"):
        return np.asarray((wait + run) / run, dtype=np.float64)


def bounded_slowdown(wait_s: npt.ArrayLike, run_s: npt.ArrayLike, bound_s: float = 10.0) -> FloatArray:
    """Bounded slowdown ``max(1, (wait + run) / max(run, bound_s))``, elementwise.

    The bound keeps jobs shorter than ``bound_s`` from dominating the mean with
    huge ratios. NaN in gives NaN out. Raises :class:`ModelError` unless
    ``bound_s`` > 0.
    """
    if not bound_s > 0:
        raise ModelError(f"bound_s must be > 0 seconds, got {bound_s}")
    wait = np.asarray(wait_s, dtype=np.float64)
    run = np.asarray(run_s, dtype=np.float64)
    return np.asarray(np.maximum(1.0, (wait + run) / np.maximum(run, bound_s)), dtype=np.float64)


def jain_index(values: npt.ArrayLike) -> float:
    """Jain's fairness index ``(sum x)^2 / (n * sum x^2)`` of non-negative values.

    1 when all values are equal (all zero included), 1/n when one value holds
    everything. Non-finite values are ignored; NaN when none is left.
    """
    x = np.asarray(values, dtype=np.float64).ravel()
    x = x[np.isfinite(x)]
    if x.size == 0:
        return _NAN
    squares = float(np.dot(x, x))
    if squares == 0.0:
        return 1.0
    return float(np.sum(x) ** 2 / (x.size * squares))


def time_weighted_mean(time_s: npt.ArrayLike, values: npt.ArrayLike) -> float:
    """Mean of a step function: each sample holds from its time until the next sample's.

    The last sample has no successor and so no weight. With one sample (or all
    at the same time) the plain mean of the samples; NaN with none. Raises
    :class:`ModelError` if the times decrease.
    """
    t = np.asarray(time_s, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if t.size == 0:
        return _NAN
    dt = np.diff(t)
    if np.any(dt < 0):
        raise ModelError("timeline time_s must be non-decreasing")
    total = float(dt.sum())
    if total <= 0.0:
        return float(np.mean(v))
    return float(np.dot(v[:-1], dt) / total)


def pool_total(values: npt.ArrayLike, samples: int) -> FloatArray:
    """Sum a per-pool timeline column of shape (samples, pools) across pools.

    A column that is already one value per sample is returned as floats.
    """
    array = np.asarray(values, dtype=np.float64)
    if samples == 0:
        return np.zeros(0, dtype=np.float64)
    return np.asarray(array.reshape(samples, -1).sum(axis=1), dtype=np.float64)


def completed_mask(table: JobTable) -> BoolArray:
    """Jobs that started and ended: the ones with a known run time."""
    return np.asarray(table.ran & ~np.isnan(np.asarray(table.end_s, dtype=np.float64)))


def rejected_mask(table: JobTable) -> BoolArray:
    """Jobs refused at arrival: never started, and ``reason`` starts with "rejected"."""
    reason = np.asarray(table.reason, dtype=np.str_)
    return np.asarray(~table.ran & np.char.startswith(reason, "rejected"))


def job_bounded_slowdown(table: JobTable, bound_s: float = 10.0) -> FloatArray:
    """Per-job bounded slowdown with run time ``duration_s``; NaN for jobs that did not end."""
    wait = np.asarray(table.wait_s, dtype=np.float64)
    run = np.asarray(table.duration_s, dtype=np.float64)
    return np.where(completed_mask(table), bounded_slowdown(wait, run, bound_s), _NAN)


@dataclass(frozen=True, slots=True)
class _Derived:
    """Per-job columns every metric starts from; NaN where a value is not defined."""

    ran: BoolArray
    completed: BoolArray
    rejected: BoolArray
    wait_s: FloatArray
    jct_s: FloatArray
    slowdown: FloatArray
    bsld: FloatArray
    gpu_s: FloatArray

    @classmethod
    def of(cls, table: JobTable, bound_s: float) -> _Derived:
        completed = completed_mask(table)
        wait = np.asarray(table.wait_s, dtype=np.float64)
        run = np.asarray(table.duration_s, dtype=np.float64)
        held_s = np.asarray(table.end_s, dtype=np.float64) - np.asarray(table.start_s)
        return cls(
            ran=np.asarray(table.ran),
            completed=completed,
            rejected=rejected_mask(table),
            wait_s=wait,
            jct_s=np.where(completed, np.asarray(table.jct_s, dtype=np.float64), _NAN),
            slowdown=np.where(completed, slowdown(wait, run), _NAN),
            bsld=np.where(completed, bounded_slowdown(wait, run, bound_s), _NAN),
            gpu_s=np.where(completed, np.asarray(table.gpus, dtype=np.float64) * held_s, 0.0),
        )


def _finite(values: FloatArray) -> FloatArray:
    return values[np.isfinite(values)]


def _mean(values: FloatArray) -> float:
    """Mean of the finite values, NaN if none (np.nanmean would warn instead)."""
    kept = _finite(values)
    return float(kept.mean()) if kept.size else _NAN


def _percentiles(values: FloatArray, qs: Sequence[float]) -> list[float]:
    """Linear-interpolated percentiles of the non-NaN values, NaN each if none."""
    kept = values[~np.isnan(values)]
    if kept.size == 0:
        return [_NAN] * len(qs)
    return [float(p) for p in np.percentile(kept, qs)]


def _max(*columns: npt.ArrayLike) -> float:
    """Largest finite value over all columns, NaN if none."""
    joined = np.concatenate([np.asarray(c, dtype=np.float64).ravel() for c in columns])
    kept = _finite(joined)
    return float(kept.max()) if kept.size else _NAN


def _makespan_s(table: JobTable) -> float:
    """First submit to last end; NaN if no job ended."""
    submits = _finite(np.asarray(table.submit_s, dtype=np.float64))
    last_end = _max(table.end_s)
    if submits.size == 0 or math.isnan(last_end):
        return _NAN
    return last_end - float(submits.min())


def _starved_jobs(table: JobTable, timeline: Timeline, d: _Derived, limit_s: float) -> int:
    """Jobs that waited longer than ``limit_s``.

    A job still pending at the end counts too: its wait runs to the run's
    horizon (last timeline sample or last event), because a job that never
    started is the most starved of all, not an exception to leave out.
    """
    horizon = _max(timeline.time_s, table.end_s, table.start_s, table.submit_s)
    pending = ~d.ran & ~d.rejected
    pending_wait = horizon - np.asarray(table.submit_s, dtype=np.float64)
    waited = np.where(pending, pending_wait, d.wait_s)
    return int(np.count_nonzero(waited > limit_s))


def _user_fairness(table: JobTable, d: _Derived) -> float:
    """Jain's index over each user's mean bounded slowdown (users with ended jobs only).

    NaN (undefined) with fewer than two users: a trace without users replays every job under
    one name, and an index of 1.0 there would claim an equality nobody measured.
    """
    users = np.asarray(table.user, dtype=np.str_)[d.completed]
    if users.size == 0:
        return _NAN
    names, inverse = np.unique(users, return_inverse=True)
    if names.size < 2:  # fairness compares at least two users
        return _NAN
    inverse = inverse.ravel()
    sums = np.bincount(inverse, weights=d.bsld[d.completed])
    counts = np.bincount(inverse)
    return jain_index(sums / counts)


def _group_mean(inverse: IntArray, values: FloatArray, n: int) -> FloatArray:
    """Per-group mean of the non-NaN values; NaN for a group with none."""
    valid = ~np.isnan(values)
    sums = np.bincount(inverse[valid], weights=values[valid], minlength=n)
    counts = np.bincount(inverse[valid], minlength=n)
    out = np.full(n, _NAN)
    np.divide(sums, counts, out=out, where=counts > 0)
    return out


def _group_percentile(inverse: IntArray, values: FloatArray, n: int, q: float) -> FloatArray:
    """Per-group percentile (numpy's "linear" method) of the non-NaN values, in one sort."""
    valid = ~np.isnan(values)
    groups, kept = inverse[valid], values[valid]
    order = np.lexsort((kept, groups))
    groups, kept = groups[order], kept[order]
    starts = np.searchsorted(groups, np.arange(n), side="left")
    counts = np.searchsorted(groups, np.arange(n), side="right") - starts
    out = np.full(n, _NAN)
    has = counts > 0
    pos = starts[has] + (q / 100.0) * (counts[has] - 1)
    low = np.floor(pos).astype(np.int64)
    high = np.ceil(pos).astype(np.int64)
    out[has] = kept[low] + (kept[high] - kept[low]) * (pos - low)
    return out


def _group_stats(labels: StrArray, d: _Derived) -> dict[str, GroupStats]:
    """GroupStats per distinct label, keyed by label in sorted order."""
    keys, inverse = np.unique(np.asarray(labels, dtype=np.str_), return_inverse=True)
    inverse = inverse.ravel()
    n = keys.size
    counts = np.bincount(inverse, minlength=n)
    wait = np.where(d.ran, d.wait_s, _NAN)
    mean_wait = _group_mean(inverse, wait, n)
    p95_wait = _group_percentile(inverse, wait, n, 95.0)
    mean_bsld = _group_mean(inverse, d.bsld, n)
    gpu_hours = np.bincount(inverse, weights=d.gpu_s, minlength=n) / _SECONDS_PER_HOUR
    return {
        str(key): GroupStats(
            count=int(counts[i]),
            mean_wait_s=float(mean_wait[i]),
            p95_wait_s=float(p95_wait[i]),
            mean_bounded_slowdown=float(mean_bsld[i]),
            gpu_hours=float(gpu_hours[i]),
        )
        for i, key in enumerate(keys)
    }


def _size_order(stats: Mapping[str, GroupStats]) -> dict[str, GroupStats]:
    """Size classes in SIZE_CLASSES order; labels it does not know go last, sorted."""
    known = [label for label, _, _ in SIZE_CLASSES if label in stats]
    unknown = sorted(set(stats) - set(known))
    return {label: stats[label] for label in known + unknown}


def _timeline_means(timeline: Timeline) -> tuple[float, float]:
    """Time-weighted (allocation, fragmentation) as fractions of all GPUs; NaN without GPUs."""
    capacity = float(np.sum(timeline.pool_gpus))
    t = np.asarray(timeline.time_s, dtype=np.float64)
    if capacity <= 0.0 or t.size == 0:
        return _NAN, _NAN
    allocated = time_weighted_mean(t, pool_total(timeline.allocated_gpus, t.size))
    fragmented = time_weighted_mean(t, pool_total(timeline.fragmented_gpus, t.size))
    return allocated / capacity, fragmented / capacity


def window_mean(time_s: npt.ArrayLike, values: npt.ArrayLike, start_s: float, end_s: float) -> float:
    """Mean of a step function (as :func:`time_weighted_mean`) over [start_s, end_s] only.

    The window is clipped to the samples' span; NaN when nothing of it is left.
    """
    t = np.asarray(time_s, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if t.size < 2:  # a step needs two samples to have a length
        return _NAN
    start, end = max(start_s, float(t[0])), min(end_s, float(t[-1]))
    if not end > start:
        return _NAN
    cumulative = np.concatenate(([0.0], np.cumsum(v[:-1] * np.diff(t))))

    def integral(x: float) -> float:
        i = int(np.clip(np.searchsorted(t, x, side="right") - 1, 0, t.size - 1))
        return float(cumulative[i] + v[i] * (x - t[i]))

    return (integral(end) - integral(start)) / (end - start)


def _arrival_allocation(table: JobTable, timeline: Timeline) -> float:
    """Allocation over the arrival window (first to last submission), a fraction of all GPUs."""
    capacity = float(np.sum(timeline.pool_gpus))
    submit = np.asarray(table.submit_s, dtype=np.float64)
    t = np.asarray(timeline.time_s, dtype=np.float64)
    if capacity <= 0.0 or submit.size == 0 or t.size == 0:
        return _NAN
    allocated = pool_total(timeline.allocated_gpus, t.size)
    return window_mean(t, allocated, float(np.nanmin(submit)), float(np.nanmax(submit))) / capacity


def summarize(
    table: JobTable,
    timeline: Timeline,
    *,
    bound_s: float = 10.0,
    starvation_wait_s: float = 86400.0,
) -> RunSummary:
    """Summarise one run; see the module docstring for which jobs each metric covers.

    ``bound_s`` is the bounded-slowdown threshold and ``starvation_wait_s`` the
    wait beyond which a job counts as starved. Never raises on empty input.
    """
    d = _Derived.of(table, bound_s)
    ran_wait = d.wait_s[d.ran]
    median, p95, p99 = _percentiles(ran_wait, (50.0, 95.0, 99.0))
    allocation, fragmentation = _timeline_means(timeline)
    return RunSummary(
        jobs=len(table),
        jobs_ran=int(np.count_nonzero(d.ran)),
        jobs_rejected=int(np.count_nonzero(d.rejected)),
        jobs_unfinished=int(np.count_nonzero(~d.rejected & ~d.completed)),
        mean_wait_s=_mean(ran_wait),
        median_wait_s=median,
        p95_wait_s=p95,
        p99_wait_s=p99,
        max_wait_s=_max(ran_wait),
        mean_jct_s=_mean(d.jct_s),
        mean_slowdown=_mean(d.slowdown),
        mean_bounded_slowdown=_mean(d.bsld),
        p99_bounded_slowdown=_percentiles(d.bsld, (99.0,))[0],
        makespan_s=_makespan_s(table),
        allocation_mean=allocation,
        fragmentation_mean=fragmentation,
        allocation_arrivals=_arrival_allocation(table, timeline),
        jain_fairness=_user_fairness(table, d),
        starved_jobs=_starved_jobs(table, timeline, d, starvation_wait_s),
        held_idle_gpu_hours=float(np.nansum(table.held_idle_gpu_s)) / _SECONDS_PER_HOUR,
        preempted_jobs=int(np.count_nonzero(table.preemptions)),
        lost_gpu_hours=float(np.nansum(table.lost_gpu_s)) / _SECONDS_PER_HOUR,
        wasted_gpu_hours=float(np.nansum(table.held_idle_gpu_s) + np.nansum(table.lost_gpu_s))
        / _SECONDS_PER_HOUR,
        by_size=_size_order(_group_stats(table.size_class, d)),
        by_group=_group_stats(table.group, d),
    )
