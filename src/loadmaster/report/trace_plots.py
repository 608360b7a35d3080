"""Charts of one trace, as ``loadmaster trace inspect`` writes them: one PNG each, plus an overview.

Each chart is a function that draws on a given axes, so the single PNGs and
the overview grid show the same thing. A chart whose columns the trace lacks
says "not in this trace" instead of drawing an empty frame. Figures are
built without pyplot, as in :mod:`loadmaster.report.plots`.
"""

from __future__ import annotations

import math
from collections.abc import Callable
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from loadmaster.report.charts import policy_color
from loadmaster.report.plots import DPI
from loadmaster.traces import Trace
from loadmaster.traces.inspect import (
    HEAVY_USER_FRACTION,
    WEEKDAYS,
    TraceSummary,
    arrivals_by_hour,
    arrivals_by_weekday,
    duration_cdf,
    requested_vs_actual,
    summarize_trace,
    user_share_curve,
)

Draw = Callable[[Axes, Trace, TraceSummary], None]

MAX_SCATTER = 20_000
"""Most points in the requested-vs-actual scatter: beyond it, an even subsample (same every time)."""

_BLUE = policy_color(0)
_ORANGE = policy_color(1)


def _absent(ax: Axes, what: str) -> None:
    ax.text(0.5, 0.5, f"{what}: not in this trace", ha="center", va="center", transform=ax.transAxes)


def _frame(ax: Axes, title: str, xlabel: str, ylabel: str) -> None:
    ax.set_title(title)
    ax.set_xlabel(xlabel)
    ax.set_ylabel(ylabel)
    ax.grid(True, which="major", alpha=0.3)


def draw_demand(ax: Axes, trace: Trace, summary: TraceSummary) -> None:
    """Share of jobs and share of GPU-hours per size class, side by side."""
    _frame(ax, "GPU demand by job size", "Job size (GPUs)", "% of all")
    labels = [c.label for c in summary.size_classes]
    x = np.arange(len(labels), dtype=np.float64)
    jobs = [100.0 * c.jobs / max(summary.jobs, 1) for c in summary.size_classes]
    ax.bar(x - 0.2, jobs, 0.4, color=_BLUE, label="jobs")
    if summary.gpu_hours > 0:
        hours = [100.0 * c.gpu_hours / summary.gpu_hours for c in summary.size_classes]
        ax.bar(x + 0.2, hours, 0.4, color=_ORANGE, label="GPU-hours")
    ax.set_xticks(x, labels)
    if labels:
        ax.legend(loc="upper left")
    else:
        _absent(ax, "jobs")


def draw_duration_cdf(ax: Axes, trace: Trace, summary: TraceSummary) -> None:
    """CDF of the actual run times on a log time axis."""
    _frame(ax, "Run time CDF", "Run time (s, log scale)", "Fraction of jobs with a run time")
    values, fraction = duration_cdf(trace)
    if values.size == 0:
        _absent(ax, "run times")
        return
    ax.set_xscale("log")
    ax.set_ylim(0.0, 1.02)
    ax.step(values, fraction, where="post", color=_BLUE)


def draw_hours(ax: Axes, trace: Trace, summary: TraceSummary) -> None:
    """Submissions per hour of day."""
    _frame(ax, f"Arrivals by hour of day ({summary.clock})", "Hour of day", "Jobs submitted")
    ax.bar(np.arange(24), arrivals_by_hour(trace), color=_BLUE)
    ax.set_xticks(range(0, 24, 3))


def draw_weekdays(ax: Axes, trace: Trace, summary: TraceSummary) -> None:
    """Submissions per weekday (or per day from the origin on a relative clock)."""
    known = summary.origin_epoch_s is not None
    labels = list(WEEKDAYS) if known else [f"day {d}" for d in range(7)]
    title = "Arrivals by weekday (UTC)" if known else "Arrivals by day mod 7 (relative clock)"
    _frame(ax, title, "Day", "Jobs submitted")
    ax.bar(np.arange(7), arrivals_by_weekday(trace), color=_BLUE)
    ax.set_xticks(range(7), labels)


def draw_user_share(ax: Axes, trace: Trace, summary: TraceSummary) -> None:
    """Cumulative share of GPU-hours against the fraction of users, heaviest first."""
    _frame(ax, "Heavy users' share of GPU-hours", "Fraction of users (heaviest first)", "Share of GPU-hours")
    x, y = user_share_curve(trace)
    if x.size == 0:
        _absent(ax, "users")
        return
    ax.plot(x, y, color=_BLUE, label="trace")
    ax.plot([0.0, 1.0], [0.0, 1.0], color="grey", linestyle="--", label="equal use")
    if summary.top_user_share is not None:
        users = x.size - 1
        top = max(1, math.ceil(HEAVY_USER_FRACTION * users))
        ax.plot([top / users], [summary.top_user_share], "o", color=_ORANGE)
        share = summary.top_user_share
        text = f"top {HEAVY_USER_FRACTION:.0%} of users ({top} of {users}): {share:.0%} of GPU-hours"
        ax.annotate(text, (top / users, summary.top_user_share), xytext=(10, -18), textcoords="offset points")
    ax.set_xlim(0.0, 1.0)
    ax.set_ylim(0.0, 1.02)
    ax.legend(loc="lower right")


def draw_estimates(ax: Axes, trace: Trace, summary: TraceSummary) -> None:
    """Requested time limit against actual run time, log-log, with the perfect-estimate diagonal."""
    _frame(ax, "Requested vs actual run time", "Actual run time (s)", "Requested time limit (s)")
    actual, requested = requested_vs_actual(trace)
    if actual.size == 0:
        _absent(ax, "time limits with run times")
        return
    if actual.size > MAX_SCATTER:
        keep = np.linspace(0, actual.size - 1, MAX_SCATTER).round().astype(np.int64)
        actual, requested = actual[keep], requested[keep]
    ax.set_xscale("log")
    ax.set_yscale("log")
    crowded = actual.size > 1000
    ax.scatter(
        actual, requested, s=4 if crowded else 14, alpha=0.3 if crowded else 0.8, color=_BLUE, linewidths=0
    )
    low = float(min(actual.min(), requested.min()))
    high = float(max(actual.max(), requested.max()))
    ax.plot([low, high], [low, high], color="grey", linestyle="--", label="perfect estimate")
    ax.legend(loc="upper left")


CHARTS: tuple[tuple[str, Draw], ...] = (
    ("gpu_demand.png", draw_demand),
    ("duration_cdf.png", draw_duration_cdf),
    ("arrivals_hour.png", draw_hours),
    ("arrivals_weekday.png", draw_weekdays),
    ("user_share.png", draw_user_share),
    ("requested_vs_actual.png", draw_estimates),
)
"""Every chart of a trace: its file name and how it is drawn, in overview order."""


def write_trace_plots(trace: Trace, out_dir: Path, summary: TraceSummary | None = None) -> list[Path]:
    """Write every chart of :data:`CHARTS` and ``overview.png`` (all of them on one page) to ``out_dir``.

    Creates ``out_dir`` if needed and returns the paths written, the overview last.
    """
    summary = summary or summarize_trace(trace)
    out_dir.mkdir(parents=True, exist_ok=True)
    paths = []
    for name, draw in CHARTS:
        fig = Figure(figsize=(9.0, 4.8), layout="constrained")
        draw(fig.add_subplot(), trace, summary)
        fig.savefig(out_dir / name, dpi=DPI)
        paths.append(out_dir / name)
    overview = Figure(figsize=(18.0, 13.0), layout="constrained")
    overview.suptitle(f"{summary.name}: {summary.jobs:,} jobs, {summary.gpu_hours:,.0f} GPU-hours")
    for axes, (_, draw) in zip(overview.subplots(3, 2).flat, CHARTS, strict=True):
        draw(axes, trace, summary)
    overview.savefig(out_dir / "overview.png", dpi=DPI)
    paths.append(out_dir / "overview.png")
    return paths
