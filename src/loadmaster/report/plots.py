"""Charts comparing several policies' runs, as PNG files; plus the series both report formats draw.

The series functions (:func:`wait_cdf`, :func:`size_slowdowns`,
:func:`allocation_series`, :func:`queue_series`) are shared with the HTML
report so that the static and the interactive charts show the same numbers.
Figures are built as :class:`matplotlib.figure.Figure` objects, never through
pyplot, so that no global figure state leaks between calls or threads.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import numpy.typing as npt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from loadmaster.metrics import GroupStats, pool_total, summarize
from loadmaster.model.job import SIZE_CLASSES
from loadmaster.model.outcome import FloatArray, JobTable, Timeline

Runs = Mapping[str, tuple[JobTable, Timeline]]
"""Runs to compare, keyed by policy name, in the order they should be drawn."""

MAX_POINTS = 2000
"""Most points per drawn line: beyond this, a line adds file size but no visible detail."""

MIN_WAIT_S = 1.0
"""Waits below this are drawn at it, because a log axis cannot show a zero wait."""

PALETTE = (
    "#1f77b4",
    "#ff7f0e",
    "#2ca02c",
    "#d62728",
    "#9467bd",
    "#8c564b",
    "#e377c2",
    "#7f7f7f",
    "#bcbd22",
    "#17becf",
)
"""One colour per policy, in order, shared by the PNG and HTML charts."""

DPI = 110
_SECONDS_PER_HOUR = 3600.0


def policy_color(index: int) -> str:
    """The colour of the ``index``-th policy (the palette repeats after ten)."""
    return PALETTE[index % len(PALETTE)]


@dataclass(frozen=True, slots=True)
class StepSeries:
    """A step function ready to draw: each value holds from its time to the next.

    ``mean`` is the time-weighted mean over each drawn step and ``peak`` the
    largest value within it, so that a short spike lost in the mean still
    shows in the peak. Both equal the raw values when nothing was binned.
    """

    time_s: FloatArray
    mean: FloatArray
    peak: FloatArray


def _step_integral(t: FloatArray, v: FloatArray, x: FloatArray) -> FloatArray:
    """Integral of the step function (t, v) from ``t[0]`` to each ``x``."""
    cumulative = np.concatenate(([0.0], np.cumsum(v[:-1] * np.diff(t))))
    idx = np.clip(np.searchsorted(t, x, side="right") - 1, 0, t.size - 1)
    return np.asarray(cumulative[idx] + v[idx] * (x - t[idx]), dtype=np.float64)


def _bin_peaks(t: FloatArray, v: FloatArray, edges: FloatArray) -> FloatArray:
    """Largest value of the step function within each bin [edges[i], edges[i+1])."""
    starts = edges[:-1]
    in_force = v[np.clip(np.searchsorted(t, starts, side="right") - 1, 0, t.size - 1)]
    first = np.searchsorted(t, starts, side="left")
    end = np.searchsorted(t, edges[1:], side="left")
    nonempty = first < end
    peaks = in_force.copy()
    if np.any(nonempty):
        # Consecutive non-empty bins' first samples delimit exactly each bin's samples,
        # because the empty bins in between hold none.
        inside = np.maximum.reduceat(v, first[nonempty])
        peaks[nonempty] = np.maximum(in_force[nonempty], inside)
    return peaks


def downsample_step(time_s: npt.ArrayLike, values: npt.ArrayLike, max_points: int = MAX_POINTS) -> StepSeries:
    """Bin a step function into at most ``max_points`` equal-time steps (mean and peak each).

    Series short enough are returned unchanged. Times must be non-decreasing.
    """
    t = np.asarray(time_s, dtype=np.float64)
    v = np.asarray(values, dtype=np.float64)
    if t.size <= max_points:
        return StepSeries(t, v, v)
    if t[-1] <= t[0]:
        return StepSeries(t[:1], np.array([v.mean()]), np.array([v.max()]))
    edges = np.linspace(t[0], t[-1], max_points)
    mean = np.diff(_step_integral(t, v, edges)) / np.diff(edges)
    peaks = _bin_peaks(t, v, edges)
    # The last point closes the final step at the last sample's value.
    return StepSeries(edges, np.append(mean, v[-1]), np.append(peaks, v[-1]))


def wait_cdf(table: JobTable, max_points: int = MAX_POINTS) -> tuple[FloatArray, FloatArray]:
    """(wait in hours, fraction of all jobs that waited at most that long), ascending.

    Jobs that never started count in the denominator only, as if they waited
    forever, so the curve ends below 1 by their share. Waits are floored at
    :data:`MIN_WAIT_S` for log axes; long curves keep ``max_points`` evenly
    spaced ranks. Empty arrays when no job started.
    """
    waits = np.sort(np.asarray(table.wait_s, dtype=np.float64)[table.ran])
    if waits.size == 0:
        return np.zeros(0), np.zeros(0)
    ranks = np.arange(waits.size)
    if waits.size > max_points:
        ranks = np.unique(np.linspace(0, waits.size - 1, max_points).round().astype(np.int64))
    hours = np.maximum(waits[ranks], MIN_WAIT_S) / _SECONDS_PER_HOUR
    return hours, (ranks + 1.0) / len(table)


def order_size_labels(labels: Iterable[str]) -> list[str]:
    """Size-class labels in SIZE_CLASSES order; labels it does not know go last, sorted."""
    present = set(labels)
    known = [label for label, _, _ in SIZE_CLASSES if label in present]
    return known + sorted(present - set(known))


def size_slowdowns(
    by_size: Mapping[str, Mapping[str, GroupStats]],
) -> tuple[list[str], dict[str, list[float]]]:
    """Size classes present in any run, in order, and each policy's mean bounded slowdown
    per class (NaN where the policy has no ended job of that class).

    ``by_size`` maps policy name to its :attr:`RunSummary.by_size`.
    """
    labels = order_size_labels(label for stats in by_size.values() for label in stats)
    values = {
        policy: [stats[label].mean_bounded_slowdown if label in stats else float("nan") for label in labels]
        for policy, stats in by_size.items()
    }
    return labels, values


def slowdown_axis_top(values: Mapping[str, list[float]]) -> float:
    """Upper end of a bounded-slowdown axis starting at 1: above every bar, and at least 2."""
    finite = [v for heights in values.values() for v in heights if np.isfinite(v)]
    return max([2.0, *(1.3 * v for v in finite)])


def allocation_series(timeline: Timeline, max_points: int = MAX_POINTS) -> StepSeries:
    """Allocated GPUs as a percentage of all GPUs over time (0 if the cluster has none)."""
    samples = len(timeline.time_s)
    capacity = float(np.sum(timeline.pool_gpus))
    allocated = pool_total(timeline.allocated_gpus, samples)
    percent = allocated * (100.0 / capacity) if capacity > 0 else np.zeros(samples)
    return downsample_step(timeline.time_s, percent, max_points)


def queue_series(timeline: Timeline, max_points: int = MAX_POINTS) -> StepSeries:
    """Jobs waiting in all queues together over time."""
    total = pool_total(timeline.queue_length, len(timeline.time_s))
    return downsample_step(timeline.time_s, total, max_points)


PANEL_COLUMNS = 3
"""Panels per row of the small multiples (six policies: two rows of three)."""


def _new_axes(title: str, xlabel: str, ylabel: str) -> tuple[Figure, Axes]:
    # Fixed margins, with room on the right for the legend outside the axes.
    fig = Figure(figsize=(9.0, 4.8))
    fig.subplots_adjust(left=0.08, right=0.8, bottom=0.11, top=0.91)
    ax = fig.add_subplot()
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def _save(fig: Figure, ax: Axes, path: Path) -> Path:
    """Add a legend if anything was labelled (an empty one would warn), then write the PNG."""
    if ax.get_legend_handles_labels()[0]:
        # Outside the axes: inside, it hides bars and lines whatever corner it takes.
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.savefig(path, dpi=DPI)
    return path


def plot_wait_cdf(runs: Runs, path: Path) -> Path:
    """Wait-time CDF per policy on a log time axis."""
    fig, ax = _new_axes("Queue wait CDF", "Wait (hours, log scale)", "Fraction of all jobs")
    ax.set_xscale("log")
    ax.set_ylim(0.0, 1.02)
    for i, (policy, (table, _)) in enumerate(runs.items()):
        hours, fraction = wait_cdf(table)
        if hours.size:
            ax.step(hours, fraction, where="post", label=policy, color=policy_color(i))
    return _save(fig, ax, path)


def plot_size_slowdowns(runs: Runs, path: Path) -> Path:
    """Grouped bars: mean bounded slowdown per job size class and policy, log y."""
    fig, ax = _new_axes(
        "Mean bounded slowdown by job size",
        "Job size (GPUs)",
        "Mean bounded slowdown (log scale)",
    )
    labels, values = size_slowdowns(
        {policy: summarize(table, timeline).by_size for policy, (table, timeline) in runs.items()}
    )
    x = np.arange(len(labels), dtype=np.float64)
    width = 0.8 / max(len(values), 1)
    for i, (policy, heights) in enumerate(values.items()):
        h = np.asarray(heights, dtype=np.float64)
        shown = np.isfinite(h)
        if np.any(shown):
            offset = (i - (len(values) - 1) / 2.0) * width
            ax.bar(x[shown] + offset, h[shown], width, label=policy, color=policy_color(i))
    ax.set_xticks(x, labels)
    ax.set_yscale("log")
    # Bars start at 1 (no slowdown), so their lengths compare; the top is set explicitly
    # because an autoscaled axis over all-1 bars would collapse to a single value.
    ax.set_ylim(1.0, slowdown_axis_top(values))
    return _save(fig, ax, path)


def _plot_steps(ax: Axes, series: StepSeries, policy: str, color: str) -> None:
    """The binned mean as a line, with the band up to the bin peaks behind it."""
    hours = series.time_s / _SECONDS_PER_HOUR
    ax.fill_between(hours, series.mean, series.peak, step="post", color=color, alpha=0.2)
    ax.step(hours, series.mean, where="post", label=policy, color=color)


def last_arrival_h(table: JobTable) -> float | None:
    """When the last job was submitted, in hours: the end of the arrival window (None: no jobs)."""
    submit = np.asarray(table.submit_s, dtype=np.float64)
    return float(np.nanmax(submit)) / _SECONDS_PER_HOUR if submit.size else None


def _small_multiples(
    runs: Runs,
    series_of: Callable[[Timeline], StepSeries],
    title: str,
    ylabel: str,
    path: Path,
    *,
    integer: bool = False,
) -> Path:
    """A panel per policy, all on the same axes, so that six policies stay readable."""
    count = max(len(runs), 1)
    cols = min(PANEL_COLUMNS, count)
    rows = math.ceil(count / cols)
    fig = Figure(figsize=(3.6 * cols + 0.8, 2.4 * rows + 0.9))
    fig.subplots_adjust(
        left=0.1 if cols > 1 else 0.16,
        right=0.98,
        bottom=0.5 / (2.4 * rows + 0.9) + 0.08,
        top=1 - 0.55 / (2.4 * rows + 0.9),
        wspace=0.08,
        hspace=0.35,
    )
    grid = fig.subplots(rows, cols, sharex=True, sharey=True, squeeze=False)
    fig.suptitle(title)
    fig.supxlabel("Time (hours)")
    fig.supylabel(ylabel)
    panels = grid.ravel()
    for i, (policy, (table, timeline)) in enumerate(runs.items()):
        ax = panels[i]
        series = series_of(timeline)
        if series.time_s.size:
            _plot_steps(ax, series, policy, policy_color(i))
        last = last_arrival_h(table)
        if last is not None:
            ax.axvline(last, color="#555555", linestyle="--", linewidth=0.8)
            ax.text(
                last, 1.0, " last arrival", transform=ax.get_xaxis_transform(), va="top", fontsize="small"
            )
        else:
            ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
        ax.set_title(policy, fontsize="medium", color=policy_color(i))
        ax.grid(True, which="major", alpha=0.3)
        if integer:
            ax.yaxis.set_major_locator(MaxNLocator(integer=True))
    for ax in panels[len(runs) :]:
        ax.set_visible(False)
    if not runs:
        panels[0].set_visible(True)
        panels[0].text(0.5, 0.5, "no data", ha="center", va="center", transform=panels[0].transAxes)
    fig.savefig(path, dpi=DPI)
    return path


def plot_allocation(runs: Runs, path: Path) -> Path:
    """Allocated share of the cluster's GPUs over time, a panel per policy."""
    return _small_multiples(
        runs,
        allocation_series,
        "GPU allocation (dashed: the last arrival; after it, the drain)",
        "Allocated GPUs (% of cluster)",
        path,
    )


def plot_queue_length(runs: Runs, path: Path) -> Path:
    """Total number of waiting jobs over time, a panel per policy."""
    return _small_multiples(
        runs, queue_series, "Queue length", "Waiting jobs (all queues)", path, integer=True
    )


def write_plots(runs: Runs, out_dir: Path) -> list[Path]:
    """Write wait_cdf.png, bsld_by_size.png, allocation.png and queue_length.png.

    ``runs`` maps policy name to its (JobTable, Timeline); policies are drawn
    in mapping order with fixed colours. Creates ``out_dir`` if needed and
    returns the paths written. Long timelines are binned to at most
    :data:`MAX_POINTS` steps per line: the line is the mean, the shaded band
    reaches the peak, so short spikes stay visible.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    return [
        plot_wait_cdf(runs, out_dir / "wait_cdf.png"),
        plot_size_slowdowns(runs, out_dir / "bsld_by_size.png"),
        plot_allocation(runs, out_dir / "allocation.png"),
        plot_queue_length(runs, out_dir / "queue_length.png"),
    ]
