"""The report's four charts as PNG files, drawn with matplotlib from :mod:`loadmaster.report.charts`.

What each chart shows (series, titles, axes, panels) is defined once, in
:mod:`loadmaster.report.charts`; this module only renders a :class:`Chart`.
Figures are built as :class:`matplotlib.figure.Figure` objects, never through
pyplot, so that no global figure state leaks between calls or threads.
"""

from __future__ import annotations

import io
import math
from collections.abc import Mapping
from pathlib import Path
from typing import BinaryIO

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import MaxNLocator

from loadmaster.metrics import GroupStats, summarize
from loadmaster.model.outcome import JobTable, Timeline
from loadmaster.report.charts import Chart, Panel, report_charts, sample_charts

Target = Path | BinaryIO
"""Where a PNG goes: a file, or a binary file object (the warm-up draws into memory)."""

Runs = Mapping[str, tuple[JobTable, Timeline]]
"""Runs to compare, keyed by policy name, in the order they should be drawn."""

DPI = 110

PANEL_COLUMNS = 3
"""Panels per row of the small multiples (six policies: two rows of three)."""


def _new_axes(chart: Chart) -> tuple[Figure, Axes]:
    # Fixed margins, with room on the right for the legend outside the axes.
    fig = Figure(figsize=(9.0, 4.8))
    fig.subplots_adjust(left=0.08, right=0.8, bottom=0.11, top=0.91)
    ax = fig.add_subplot()
    ax.set_title(chart.title, y=1.0)
    ax.set_xlabel(chart.x_title)
    ax.set_ylabel(chart.y_title)
    ax.grid(True, which="major", alpha=0.3)
    return fig, ax


def _save(fig: Figure, ax: Axes, path: Target) -> None:
    """Add a legend if anything was labelled (an empty one would warn), then write the PNG."""
    if ax.get_legend_handles_labels()[0]:
        # Outside the axes: inside, it hides bars and lines whatever corner it takes.
        ax.legend(loc="upper left", bbox_to_anchor=(1.01, 1.0), borderaxespad=0.0)
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    fig.savefig(path, dpi=DPI)


def _axes_scales(ax: Axes, chart: Chart) -> None:
    if chart.x_log:
        ax.set_xscale("log")
    if chart.y_log:
        ax.set_yscale("log")
    if chart.y_range is not None:
        ax.set_ylim(*chart.y_range)


def _draw_steps(chart: Chart, path: Target) -> None:
    fig, ax = _new_axes(chart)
    _axes_scales(ax, chart)
    for trace in chart.traces:
        ax.step(trace.x, trace.y, where="post", label=trace.name, color=trace.color)
    _save(fig, ax, path)


def _draw_bars(chart: Chart, path: Target) -> None:
    fig, ax = _new_axes(chart)
    x = np.arange(len(chart.categories), dtype=np.float64)
    width = 0.8 / max(len(chart.traces), 1)
    for i, trace in enumerate(chart.traces):
        shown = np.isfinite(trace.y)
        if np.any(shown):
            offset = (i - (len(chart.traces) - 1) / 2.0) * width
            ax.bar(x[shown] + offset, trace.y[shown], width, label=trace.name, color=trace.color)
    ax.set_xticks(x, list(chart.categories))
    _axes_scales(ax, chart)
    _save(fig, ax, path)


def _draw_panel(ax: Axes, panel: Panel, chart: Chart) -> None:
    """The binned mean as a line, the band up to the bin peaks behind it, the last arrival dashed."""
    trace = panel.trace
    if trace.x.size:
        if trace.peak is not None:
            ax.fill_between(trace.x, trace.y, trace.peak, step="post", color=trace.color, alpha=0.2)
        ax.step(trace.x, trace.y, where="post", label=trace.name, color=trace.color)
    if panel.marker_x is not None:
        ax.axvline(panel.marker_x, color="#555555", linestyle="--", linewidth=0.8)
        ax.text(
            panel.marker_x,
            1.0,
            f" {chart.marker_label}",
            transform=ax.get_xaxis_transform(),
            va="top",
            fontsize="small",
        )
    else:
        ax.text(0.5, 0.5, "no data", ha="center", va="center", transform=ax.transAxes)
    ax.set_title(panel.title, fontsize="medium", color=panel.color, y=1.0)
    ax.grid(True, which="major", alpha=0.3)
    if chart.y_integer:
        ax.yaxis.set_major_locator(MaxNLocator(integer=True))


def _draw_panels(chart: Chart, path: Target) -> None:
    """A panel per policy, all on the same axes, so that six policies stay readable."""
    count = max(len(chart.panels), 1)
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
    fig.suptitle(chart.title)
    fig.supxlabel(chart.x_title)
    fig.supylabel(chart.y_title)
    axes = grid.ravel()
    for ax, panel in zip(axes, chart.panels, strict=False):
        _draw_panel(ax, panel, chart)
    for ax in axes[len(chart.panels) :]:
        ax.set_visible(False)
    if not chart.panels:
        axes[0].set_visible(True)
        axes[0].text(0.5, 0.5, "no data", ha="center", va="center", transform=axes[0].transAxes)
    fig.savefig(path, dpi=DPI)


def draw_png(chart: Chart, path: Path) -> Path:
    """Render ``chart`` as a PNG at ``path``; return the path."""
    _draw(chart, path)
    return path


def _draw(chart: Chart, target: Target) -> None:
    {"steps": _draw_steps, "bars": _draw_bars, "panels": _draw_panels}[chart.kind](chart, target)


def warm_up() -> None:
    """Draw :func:`~loadmaster.report.charts.sample_charts` into memory: matplotlib's first-use
    work (fonts, tick and text layout machinery) then happens here, not in the first real chart."""
    for chart in sample_charts():
        _draw(chart, io.BytesIO())


def write_plots(
    runs: Runs, out_dir: Path, by_size: Mapping[str, Mapping[str, GroupStats]] | None = None
) -> list[Path]:
    """Write wait_cdf.png, bsld_by_size.png, allocation.png and queue_length.png.

    ``runs`` maps policy name to its (JobTable, Timeline); policies are drawn
    in mapping order with fixed colours. Creates ``out_dir`` if needed and
    returns the paths written. Long timelines are binned to at most
    :data:`loadmaster.report.charts.MAX_POINTS` steps per line: the line is the mean, the shaded band
    reaches the peak, so short spikes stay visible. ``by_size`` is each run's
    :attr:`RunSummary.by_size <loadmaster.metrics.RunSummary.by_size>` where the caller has its
    summaries (computed from the tables otherwise).
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    if by_size is None:
        by_size = {policy: summarize(table, timeline).by_size for policy, (table, timeline) in runs.items()}
    return [draw_png(chart, out_dir / f"{chart.name}.png") for chart in report_charts(runs, by_size)]
