"""The four charts comparing policies, each defined once: what is drawn, not how.

A :class:`Chart` holds the series, titles, axes and panels of one chart.
:func:`report_charts` builds the four of a report; :mod:`loadmaster.report.plots`
renders a chart as a PNG (matplotlib) and :mod:`loadmaster.report.html` as an
interactive plotly figure. Neither renderer chooses data, labels or scales, so
the static and the interactive charts cannot drift apart.

Why two renderers and not plotly with exported images: exporting plotly
figures (kaleido 1.5.1) drives a headless Chromium, which every ``loadmaster
simulate`` (it writes the PNGs) and every test running it would then need,
for no clear gain in time. A one-off measurement (not a benchmark of the
repository: kaleido is no dependency) wrote four figures of six 2,000-step
lines each on the 2-core development machine under a load of about 10:
17.6 s through kaleido and the system Chromium; 14.1 s with matplotlib, plus
7 s for importing matplotlib, which the kaleido path would not need.
"""

from __future__ import annotations

from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from loadmaster.metrics import GroupStats, pool_total
from loadmaster.model.job import SIZE_CLASSES
from loadmaster.model.outcome import FloatArray, JobTable, Timeline

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

HOUR_S = 3600.0


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
    hours = np.maximum(waits[ranks], MIN_WAIT_S) / HOUR_S
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


def last_arrival_h(table: JobTable) -> float | None:
    """When the last job was submitted, in hours: the end of the arrival window (None: no jobs)."""
    submit = np.asarray(table.submit_s, dtype=np.float64)
    return float(np.nanmax(submit)) / HOUR_S if submit.size else None


@dataclass(frozen=True, slots=True)
class Trace:
    """One policy's series: a step line (``x`` against ``y``) or bars (``y`` per category).

    ``peak``, for binned step lines, is the top of a shaded band above the line
    (see :class:`StepSeries`); bars have NaN where the policy has no value.
    """

    name: str
    color: str
    x: FloatArray
    y: FloatArray
    peak: FloatArray | None = None


@dataclass(frozen=True, slots=True)
class Panel:
    """One policy's panel of small multiples; ``marker_x`` is its last arrival (None: no jobs)."""

    title: str
    color: str
    trace: Trace
    marker_x: float | None


ChartKind = Literal["steps", "bars", "panels"]


@dataclass(frozen=True, slots=True)
class Chart:
    """Everything one chart shows; the renderers only decide how.

    ``steps``: ``traces`` overlaid on one axes. ``bars``: ``traces`` grouped per
    entry of ``categories``. ``panels``: one panel per policy, all sharing both
    axes so heights compare. ``y_range`` is in data units (also on a log axis).
    """

    name: str
    """File stem of the PNG (``wait_cdf`` -> wait_cdf.png)."""
    kind: ChartKind
    title: str
    x_title: str
    y_title: str
    traces: tuple[Trace, ...] = ()
    categories: tuple[str, ...] = ()
    panels: tuple[Panel, ...] = ()
    x_log: bool = False
    y_log: bool = False
    y_range: tuple[float, float] | None = None
    y_integer: bool = False
    marker_label: str = "last arrival"


def wait_cdf_chart(tables: Mapping[str, JobTable]) -> Chart:
    """Wait-time CDF per policy, log time axis; never-started jobs keep the curve below 1."""
    traces = []
    for i, (policy, table) in enumerate(tables.items()):
        hours, fraction = wait_cdf(table)
        if hours.size:
            traces.append(Trace(policy, policy_color(i), hours, fraction))
    return Chart(
        "wait_cdf",
        "steps",
        "Queue wait CDF",
        "Wait (hours, log scale)",
        "Fraction of all jobs",
        traces=tuple(traces),
        x_log=True,
        y_range=(0.0, 1.02),
    )


def size_slowdown_chart(by_size: Mapping[str, Mapping[str, GroupStats]]) -> Chart:
    """Grouped bars of mean bounded slowdown per size class and policy, log y starting at 1.

    Bars start at 1 (no slowdown), so their lengths compare; the top is set
    explicitly because an autoscaled axis over all-1 bars would collapse.
    """
    labels, values = size_slowdowns(by_size)
    traces = tuple(
        Trace(
            policy, policy_color(i), np.arange(len(labels), dtype=np.float64), np.asarray(h, dtype=np.float64)
        )
        for i, (policy, h) in enumerate(values.items())
    )
    return Chart(
        "bsld_by_size",
        "bars",
        "Mean bounded slowdown by job size",
        "Job size (GPUs)",
        "Mean bounded slowdown (log scale)",
        traces=traces,
        categories=tuple(labels),
        y_log=True,
        y_range=(1.0, slowdown_axis_top(values)),
    )


def timeline_chart(
    name: str,
    runs: Mapping[str, tuple[JobTable, Timeline]],
    series_of: Callable[[Timeline], StepSeries],
    title: str,
    y_title: str,
    *,
    integer: bool = False,
) -> Chart:
    """Small multiples: a panel per policy of ``series_of(timeline)`` against time in hours,
    with a dashed line at the policy's last arrival (what follows is the drain)."""
    panels = []
    for i, (policy, (table, timeline)) in enumerate(runs.items()):
        series = series_of(timeline)
        trace = Trace(policy, policy_color(i), series.time_s / HOUR_S, series.mean, series.peak)
        panels.append(Panel(policy, policy_color(i), trace, last_arrival_h(table)))
    return Chart(name, "panels", title, "Time (hours)", y_title, panels=tuple(panels), y_integer=integer)


def report_charts(
    runs: Mapping[str, tuple[JobTable, Timeline]], by_size: Mapping[str, Mapping[str, GroupStats]]
) -> tuple[Chart, ...]:
    """The report's four charts, in order: wait CDF, slowdown by size, allocation, queue length.

    ``runs`` maps policy name to its (JobTable, Timeline) in drawing order, and
    ``by_size`` to its :attr:`RunSummary.by_size`.
    """
    return (
        wait_cdf_chart({policy: table for policy, (table, _) in runs.items()}),
        size_slowdown_chart(by_size),
        timeline_chart(
            "allocation",
            runs,
            allocation_series,
            "GPU allocation (dashed: the last arrival; after it, the drain)",
            "Allocated GPUs (% of cluster)",
        ),
        timeline_chart(
            "queue_length", runs, queue_series, "Queue length", "Waiting jobs (all queues)", integer=True
        ),
    )


def sample_charts() -> tuple[Chart, ...]:
    """One tiny chart of each kind and axis style the report draws (log x steps, log y bars,
    integer panels), for a renderer to draw once ahead of the real charts.

    Why: both renderers do much work only the first time (matplotlib's font and tick machinery,
    plotly's validators are imported on first use), about a tenth to a fifth of a second each.
    ``loadmaster simulate``'s output helpers draw these while the simulation runs, so that this
    first-use work is off the path from the simulation's end to the command's.
    """
    x = np.array([0.1, 1.0, 10.0])
    y = np.array([0.2, 0.6, 1.0])
    line = Trace("sample", PALETTE[0], x, y, y + 0.1)
    bars = Trace("sample", PALETTE[0], np.arange(2, dtype=np.float64), np.array([1.5, 2.0]))
    return (
        Chart("sample_steps", "steps", "steps", "x", "y", traces=(line,), x_log=True, y_range=(0.0, 1.02)),
        Chart(
            "sample_bars",
            "bars",
            "bars",
            "x",
            "y",
            traces=(bars,),
            categories=("1", "2"),
            y_log=True,
            y_range=(1.0, 3.0),
        ),
        Chart(
            "sample_panels",
            "panels",
            "panels",
            "x",
            "y",
            panels=(Panel("sample", PALETTE[0], line, 1.0),),
            y_integer=True,
        ),
    )
