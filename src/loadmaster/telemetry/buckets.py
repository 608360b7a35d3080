"""Array helpers every store shares: the step grid of a range read, per-step mean and peak, counter resets.

A range read from ``start_s`` to ``end_s`` at ``step_s`` has one step per
``start_s + k * step_s`` that lies before ``end_s`` (at least one); step ``k``
holds the samples with ``start_s + k * step_s <= time_s < start_s + (k + 1) * step_s``.
"""

from __future__ import annotations

import math

import numpy as np
import numpy.typing as npt

from loadmaster.errors import TelemetryError

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


def step_times(start_s: float, end_s: float, step_s: float) -> FloatArray:
    """The start of every step of a range read; an error names a bad bound or step."""
    if not (math.isfinite(step_s) and step_s > 0):
        raise TelemetryError(f"range step_s must be a positive number of seconds, got {step_s!r}")
    if not (math.isfinite(start_s) and math.isfinite(end_s)) or end_s < start_s:
        raise TelemetryError(f"range needs finite start_s <= end_s, got start_s={start_s!r}, end_s={end_s!r}")
    count = max(1, math.ceil((end_s - start_s) / step_s - 1e-9))
    return start_s + step_s * np.arange(count, dtype=np.float64)


def bucket_stats(
    rows: IntArray,
    times_s: FloatArray,
    means: FloatArray,
    peaks: FloatArray,
    counts: FloatArray,
    *,
    n_rows: int,
    start_s: float,
    step_s: float,
    n_steps: int,
) -> tuple[FloatArray, FloatArray]:
    """Per (row, step): the count-weighted mean of ``means`` and the max of ``peaks``; NaN where empty.

    Raw samples pass ``means = peaks = value`` and ``counts = 1``; rollups pass
    their own mean, max and sample count, so reading a rollup at a coarser step
    gives the same mean as reading the raw samples would.
    """
    step = np.floor((times_s - start_s) / step_s).astype(np.int64)
    keep = (step >= 0) & (step < n_steps) & np.isfinite(means) & (counts > 0)
    flat = rows[keep] * n_steps + step[keep]
    size = n_rows * n_steps
    weight = np.bincount(flat, weights=counts[keep], minlength=size)
    total = np.bincount(flat, weights=means[keep] * counts[keep], minlength=size)
    peak = np.full(size, -np.inf)
    np.maximum.at(peak, flat, peaks[keep])
    empty = weight == 0
    with np.errstate(invalid="ignore", divide="ignore"):
        mean = np.where(empty, np.nan, total / np.where(empty, 1.0, weight))
    peak[empty] = np.nan
    return mean.reshape(n_rows, n_steps), peak.reshape(n_rows, n_steps)


def correct_resets(groups: IntArray, values: FloatArray) -> FloatArray:
    """A counter made monotonic within each group: after a drop (a device reset), add the value before it.

    ``groups`` (such as series ids) and ``values`` are sorted by group, then by
    time. NaN values are carried through and ignored when looking for drops.
    """
    out = values.copy()
    finite = np.flatnonzero(np.isfinite(values))
    if finite.size < 2:
        return out
    v = values[finite]
    g = groups[finite]
    same = g[1:] == g[:-1]
    drop = same & (v[1:] < v[:-1])
    added = np.concatenate(([0.0], np.where(drop, v[:-1], 0.0)))
    running = np.cumsum(added)
    starts = np.concatenate(([True], ~same))
    base = running[np.flatnonzero(starts)]
    group_index = np.cumsum(starts) - 1
    out[finite] = v + running - base[group_index]
    return out


def last_per_group(groups: IntArray) -> IntArray:
    """Index of the last element of each run of equal ``groups`` (sorted by group, then time)."""
    if groups.size == 0:
        return np.zeros(0, dtype=np.int64)
    ends = np.flatnonzero(groups[1:] != groups[:-1])
    return np.concatenate((ends, [groups.size - 1])).astype(np.int64)
