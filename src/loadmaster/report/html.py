"""A single self-contained HTML report comparing policies: tables and interactive charts.

The file embeds plotly.js once (from the installed plotly package), so it
opens offline, with no CDN or other network access.
"""

from __future__ import annotations

import html
import math
from collections.abc import Callable, Iterable, Mapping
from dataclasses import dataclass
from pathlib import Path
from typing import Literal

import numpy as np
import plotly.graph_objects as go
import plotly.io as pio

from loadmaster.metrics import GroupStats, RunSummary
from loadmaster.model.outcome import JobTable, Timeline
from loadmaster.report.plots import (
    StepSeries,
    allocation_series,
    order_size_labels,
    policy_color,
    queue_series,
    size_slowdowns,
    slowdown_axis_top,
    wait_cdf,
)

HtmlRuns = Mapping[str, tuple[JobTable, Timeline, RunSummary]]
"""Runs to compare, keyed by policy name, in the order they should appear."""

Better = Literal["lower", "higher"] | None

_HOUR = 3600.0


@dataclass(frozen=True, slots=True)
class _Metric:
    """One row of the comparison table: a RunSummary attribute shown as ``value * scale``."""

    label: str
    attr: str
    better: Better
    scale: float = 1.0


_METRICS: tuple[_Metric, ...] = (
    _Metric("Jobs submitted", "jobs", None),
    _Metric("Jobs started", "jobs_ran", "higher"),
    _Metric("Jobs rejected", "jobs_rejected", "lower"),
    _Metric("Jobs unfinished", "jobs_unfinished", "lower"),
    _Metric("Mean wait (h)", "mean_wait_s", "lower", 1 / _HOUR),
    _Metric("Median wait (h)", "median_wait_s", "lower", 1 / _HOUR),
    _Metric("P95 wait (h)", "p95_wait_s", "lower", 1 / _HOUR),
    _Metric("P99 wait (h)", "p99_wait_s", "lower", 1 / _HOUR),
    _Metric("Max wait (h)", "max_wait_s", "lower", 1 / _HOUR),
    _Metric("Mean JCT (h)", "mean_jct_s", "lower", 1 / _HOUR),
    _Metric("Mean slowdown", "mean_slowdown", "lower"),
    _Metric("Mean bounded slowdown", "mean_bounded_slowdown", "lower"),
    _Metric("P99 bounded slowdown", "p99_bounded_slowdown", "lower"),
    _Metric("Makespan (h)", "makespan_s", "lower", 1 / _HOUR),
    _Metric("GPU allocation (%)", "allocation_mean", "higher", 100.0),
    _Metric("Fragmented GPUs (%)", "fragmentation_mean", "lower", 100.0),
    _Metric("Jain fairness (per-user bounded slowdown)", "jain_fairness", "higher"),
    _Metric("Starved jobs", "starved_jobs", "lower"),
    _Metric("Held-idle GPU hours", "held_idle_gpu_hours", "lower"),
    _Metric("Preempted jobs", "preempted_jobs", "lower"),
    _Metric("GPU hours lost to preemption", "lost_gpu_hours", "lower"),
)
"""The comparison table's rows, in order; ``better`` None means no direction (not highlighted)."""

_ARROWS: Mapping[Better, str] = {"lower": "↓ lower", "higher": "↑ higher", None: ""}

_CSS = """
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; color: #222; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
th, td { border: 1px solid #ccc; padding: 0.25em 0.6em; }
td.num { text-align: right; font-variant-numeric: tabular-nums; }
td.best { background: #d4f4d4; font-weight: bold; }
th { background: #f0f0f0; }
.note { color: #555; font-size: 0.9em; }
"""


def _fmt(value: float) -> str:
    """Compact number text; NaN (undefined) shows as a dash."""
    if isinstance(value, int):
        return f"{value:,}"
    if not math.isfinite(value):
        return "–"
    if abs(value) >= 1000:
        return f"{value:,.0f}"
    return f"{value:.3g}"


def _best(values: list[float], better: Better) -> float | None:
    """The best finite value of a row, or None if the row has no direction or no value."""
    finite = [v for v in values if math.isfinite(v)]
    if better is None or not finite:
        return None
    return min(finite) if better == "lower" else max(finite)


def _metric_row(metric: _Metric, summaries: Iterable[RunSummary]) -> str:
    values = [getattr(s, metric.attr) * metric.scale for s in summaries]
    best = _best(values, metric.better)
    cells = []
    for value in values:
        is_best = best is not None and math.isclose(value, best, rel_tol=1e-9, abs_tol=1e-12)
        css = "num best" if is_best else "num"
        cells.append(f'<td class="{css}">{_fmt(value)}</td>')
    head = f"<th>{html.escape(metric.label)}</th><td>{_ARROWS[metric.better]}</td>"
    return f"<tr>{head}{''.join(cells)}</tr>"


def metrics_table(summaries: Mapping[str, RunSummary]) -> str:
    """The comparison table: one row per key metric, one column per policy, best highlighted."""
    heads = "".join(f"<th>{html.escape(policy)}</th>" for policy in summaries)
    rows = "\n".join(_metric_row(m, summaries.values()) for m in _METRICS)
    return f'<table class="metrics">\n<tr><th>Metric</th><th>Better</th>{heads}</tr>\n{rows}\n</table>'


def context_table(context: Mapping[str, str]) -> str:
    """Two-column table of what was run (cluster, workload, seed, ...), in the given order."""
    rows = "".join(
        f"<tr><th>{html.escape(key)}</th><td>{html.escape(value)}</td></tr>" for key, value in context.items()
    )
    return f'<table class="context">{rows}</table>'


_GROUP_COLUMNS = ("Jobs", "Mean wait (h)", "P95 wait (h)", "Mean BSLD", "GPU hours")


def _group_cells(stats: GroupStats | None) -> str:
    if stats is None:
        return '<td class="num">–</td>' * len(_GROUP_COLUMNS)
    values: list[float] = [
        stats.count,
        stats.mean_wait_s / _HOUR,
        stats.p95_wait_s / _HOUR,
        stats.mean_bounded_slowdown,
        stats.gpu_hours,
    ]
    return "".join(f'<td class="num">{_fmt(v)}</td>' for v in values)


def breakdown_table(
    breakdowns: Mapping[str, Mapping[str, GroupStats]],
    key_title: str,
    order: Callable[[Iterable[str]], list[str]],
) -> str:
    """Rows = slices (sizes or groups) in ``order``; a block of columns per policy."""
    keys = order({key for stats in breakdowns.values() for key in stats})
    policies = "".join(f'<th colspan="{len(_GROUP_COLUMNS)}">{html.escape(p)}</th>' for p in breakdowns)
    subheads = "".join(f"<th>{c}</th>" for c in _GROUP_COLUMNS) * len(breakdowns)
    rows = "".join(
        f"<tr><th>{html.escape(key)}</th>"
        + "".join(_group_cells(stats.get(key)) for stats in breakdowns.values())
        + "</tr>\n"
        for key in keys
    )
    return (
        f'<table class="breakdown">\n<tr><th rowspan="2">{html.escape(key_title)}</th>'
        f"{policies}</tr>\n<tr>{subheads}</tr>\n{rows}</table>"
    )


def _layout(fig: go.Figure, title: str, xtitle: str, ytitle: str) -> go.Figure:
    fig.update_layout(
        title=title,
        xaxis_title=xtitle,
        yaxis_title=ytitle,
        template="plotly_white",
        height=440,
        legend_title_text="Policy",
    )
    return fig


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def wait_cdf_figure(tables: Mapping[str, JobTable]) -> go.Figure:
    """Wait-time CDF per policy, log time axis; never-started jobs keep the curve below 1."""
    fig = go.Figure()
    for i, (policy, table) in enumerate(tables.items()):
        hours, fraction = wait_cdf(table)
        fig.add_trace(
            go.Scatter(
                x=hours,
                y=fraction,
                mode="lines",
                line_shape="hv",
                name=policy,
                line_color=policy_color(i),
            )
        )
    fig.update_xaxes(type="log")
    fig.update_yaxes(range=[0, 1.02])
    return _layout(fig, "Queue wait CDF", "Wait (hours, log scale)", "Fraction of all jobs")


def size_slowdown_figure(summaries: Mapping[str, RunSummary]) -> go.Figure:
    """Grouped bars of mean bounded slowdown per size class and policy, log y."""
    labels, values = size_slowdowns({p: s.by_size for p, s in summaries.items()})
    fig = go.Figure()
    for i, (policy, heights) in enumerate(values.items()):
        # None, not NaN: a missing bar is null in JSON.
        shown = [h if math.isfinite(h) else None for h in heights]
        fig.add_trace(go.Bar(x=labels, y=shown, name=policy, marker_color=policy_color(i)))
    fig.update_layout(barmode="group")
    # Log axes take their range as powers of ten; bars start at 1, i.e. no slowdown.
    fig.update_yaxes(type="log", range=[0.0, math.log10(slowdown_axis_top(values))])
    return _layout(fig, "Mean bounded slowdown by job size", "Job size (GPUs)", "Mean bounded slowdown")


def _step_traces(fig: go.Figure, series: StepSeries, policy: str, color: str) -> None:
    """The binned mean as a line; where binning hid spikes, a shaded band up to the peaks."""
    hours = series.time_s / _HOUR
    fig.add_trace(
        go.Scatter(
            x=hours,
            y=series.mean,
            mode="lines",
            line_shape="hv",
            name=policy,
            legendgroup=policy,
            line_color=color,
        )
    )
    if not np.array_equal(series.mean, series.peak):
        fig.add_trace(
            go.Scatter(
                x=hours,
                y=series.peak,
                mode="lines",
                line_shape="hv",
                name=f"{policy} (peak)",
                legendgroup=policy,
                showlegend=False,
                line_width=0,
                fill="tonexty",
                fillcolor=_rgba(color, 0.2),
            )
        )


def timeline_figure(
    timelines: Mapping[str, Timeline],
    series_of: Callable[[Timeline], StepSeries],
    title: str,
    ytitle: str,
) -> go.Figure:
    """One step line per policy of ``series_of(timeline)`` against time in hours."""
    fig = go.Figure()
    for i, (policy, timeline) in enumerate(timelines.items()):
        _step_traces(fig, series_of(timeline), policy, policy_color(i))
    return _layout(fig, title, "Time (hours)", ytitle)


def _figures(runs: HtmlRuns) -> list[go.Figure]:
    tables = {policy: table for policy, (table, _, _) in runs.items()}
    timelines = {policy: timeline for policy, (_, timeline, _) in runs.items()}
    summaries = {policy: summary for policy, (_, _, summary) in runs.items()}
    return [
        wait_cdf_figure(tables),
        size_slowdown_figure(summaries),
        timeline_figure(timelines, allocation_series, "GPU allocation", "Allocated GPUs (% of cluster)"),
        timeline_figure(timelines, queue_series, "Queue length", "Waiting jobs (all queues)"),
    ]


def _figure_html(figures: list[go.Figure]) -> str:
    """The figures as HTML fragments; plotly.js is inlined with the first one only."""
    return "\n".join(
        pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False})
        for i, fig in enumerate(figures)
    )


def _body(runs: HtmlRuns, title: str, context: Mapping[str, str]) -> str:
    summaries = {policy: summary for policy, (_, _, summary) in runs.items()}
    by_size = {policy: s.by_size for policy, s in summaries.items()}
    by_group = {policy: s.by_group for policy, s in summaries.items()}
    return f"""<h1>{html.escape(title)}</h1>
<h2>Context</h2>
{context_table(context)}
<h2>Summary</h2>
<p class="note">Highlighted: the best value in each row (compared before rounding);
the Better column says which direction is better. A dash means undefined (no job to measure).</p>
{metrics_table(summaries)}
<h2>Charts</h2>
{_figure_html(_figures(runs))}
<h2>By job size</h2>
{breakdown_table(by_size, "Size (GPUs)", order_size_labels)}
<h2>By group</h2>
{breakdown_table(by_group, "Group", sorted)}
"""


def write_html_report(runs: HtmlRuns, out_path: Path, *, title: str, context: Mapping[str, str]) -> Path:
    """Write one self-contained HTML file comparing the runs; return its path.

    ``runs`` maps policy name to (JobTable, Timeline, RunSummary), in display
    order; ``context`` (cluster, workload, seed, ...) is shown as given. The
    file holds the context, a metric comparison table with the best value per
    row highlighted, four interactive charts and per-size and per-group
    breakdowns. Creates the parent folder if needed.
    """
    document = f"""<!DOCTYPE html>
<html lang="en">
<head>
<meta charset="utf-8">
<title>{html.escape(title)}</title>
<style>{_CSS}</style>
</head>
<body>
{_body(runs, title, context)}
</body>
</html>
"""
    out_path.parent.mkdir(parents=True, exist_ok=True)
    out_path.write_text(document, encoding="utf-8")
    return out_path
