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
from plotly.subplots import make_subplots

from loadmaster.metrics import GroupStats, RunSummary
from loadmaster.metrics.reasons import wait_reasons
from loadmaster.model.outcome import JobTable, Timeline
from loadmaster.report.charts import Chart, Panel, order_size_labels, report_charts, sample_charts

PANEL_COLUMNS = 3
"""Panels per row of the small multiples (six policies: two rows of three)."""

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
    _Metric("GPU allocation, arrival window (%)", "allocation_arrivals", "higher", 100.0),
    _Metric("GPU allocation, whole run with the drain (%)", "allocation_mean", "higher", 100.0),
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
body { font-family: system-ui, sans-serif; margin: 2em auto; max-width: 1200px; padding: 0 1em; color: #222; }
.scroll { overflow-x: auto; max-width: 100%; }
table { border-collapse: collapse; margin: 0.5em 0 1.5em; font-size: 0.9em; }
tr.first th, tr.first td { border-top: 2px solid #888; }
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


def _scrolling(table: str) -> str:
    """A table in a box that scrolls sideways when it is wider than the page, never cut off."""
    return f'<div class="scroll">{table}</div>'


def metrics_table(summaries: Mapping[str, RunSummary]) -> str:
    """The comparison table: one row per key metric, one column per policy, best highlighted."""
    heads = "".join(f"<th>{html.escape(policy)}</th>" for policy in summaries)
    rows = "\n".join(_metric_row(m, summaries.values()) for m in _METRICS)
    return f'<table class="metrics">\n<tr><th>Metric</th><th>Better</th>{heads}</tr>\n{rows}\n</table>'


def _number(value: object) -> float | None:
    """A JSON number of :func:`wait_reasons` as a float; None where it is null."""
    return float(value) if isinstance(value, (int, float)) else None


def _part(value: object) -> Mapping[str, object]:
    """A JSON object of :func:`wait_reasons`; empty where it is missing."""
    return value if isinstance(value, Mapping) else {}


def wait_reasons_table(reasons: Mapping[str, Mapping[str, object]]) -> str:
    """Why jobs waited, per policy: how many jobs each plugin held back last before they started,
    how many never ran, and how far real starts fell from the starts reservations promised.

    ``reasons`` maps policy name to :func:`loadmaster.metrics.wait_reasons` of its job table.
    """
    held = {policy: _part(r.get("held_by")) for policy, r in reasons.items()}
    plugins = sorted({name for counts in held.values() for name in counts}, key=lambda n: (n == "other", n))
    errors = {policy: _part(r.get("estimate_error_s")) for policy, r in reasons.items()}
    lines: list[tuple[str, list[float | None]]] = [
        (
            f"held back last by <code>{html.escape(name)}</code>",
            [_number(held[p].get(name, 0)) for p in reasons],
        )
        for name in plugins
    ]
    lines += [
        ("never ran", [_number(r.get("never_ran")) for r in reasons.values()]),
        (
            "promised a start by a reservation",
            [_number(r.get("jobs_with_estimated_start")) for r in reasons.values()],
        ),
        (
            "started later than promised",
            [_number(e.get("started_later_than_promised")) for e in errors.values()],
        ),
    ]
    hours = [
        ("mean of real minus promised start (h)", "mean"),
        ("95th percentile of |real - promised| (h)", "p95_abs"),
    ]
    for label, key in hours:
        values = [_number(e.get(key)) for e in errors.values()]
        lines.append((label, [v / _HOUR if v is not None else None for v in values]))
    heads = "".join(f"<th>{html.escape(p)}</th>" for p in reasons)
    body = "\n".join(
        f"<tr><th>{label}</th>"
        + "".join(f'<td class="num">{_fmt(v) if v is not None else "–"}</td>' for v in values)
        + "</tr>"
        for label, values in lines
    )
    return f'<table class="reasons">\n<tr><th>Jobs</th>{heads}</tr>\n{body}\n</table>'


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
    """A row per slice (size or group, in ``order``) and policy; the columns are the statistics.

    Long rather than wide: a block of columns per policy grows past the page with six
    policies, while a row per policy keeps the table as wide as its statistics.
    """
    keys = order({key for stats in breakdowns.values() for key in stats})
    heads = "".join(f"<th>{c}</th>" for c in _GROUP_COLUMNS)
    rows = []
    for key in keys:
        for i, (policy, stats) in enumerate(breakdowns.items()):
            first = f'<th rowspan="{len(breakdowns)}">{html.escape(key)}</th>' if i == 0 else ""
            css = ' class="first"' if i == 0 else ""
            rows.append(
                f"<tr{css}>{first}<td>{html.escape(policy)}</td>{_group_cells(stats.get(key))}</tr>\n"
            )
    return (
        f'<table class="breakdown">\n<tr><th>{html.escape(key_title)}</th><th>Policy</th>{heads}</tr>\n'
        f"{''.join(rows)}</table>"
    )


def _layout(fig: go.Figure, chart: Chart) -> go.Figure:
    fig.update_layout(
        title=chart.title,
        xaxis_title=chart.x_title,
        yaxis_title=chart.y_title,
        template="plotly_white",
        height=440,
        legend_title_text="Policy",
    )
    return fig


def _rgba(hex_color: str, alpha: float) -> str:
    r, g, b = (int(hex_color[i : i + 2], 16) for i in (1, 3, 5))
    return f"rgba({r},{g},{b},{alpha})"


def _y_axis(fig: go.Figure, chart: Chart) -> None:
    """Log axes take their range as powers of ten; ``chart.y_range`` is in data units."""
    low_high = chart.y_range
    if chart.y_log:
        fig.update_yaxes(type="log")
        if low_high is not None:
            low_high = (math.log10(low_high[0]), math.log10(low_high[1]))
    if low_high is not None:
        fig.update_yaxes(range=list(low_high))


def _steps_figure(chart: Chart) -> go.Figure:
    fig = go.Figure()
    for trace in chart.traces:
        fig.add_trace(
            go.Scatter(
                x=trace.x, y=trace.y, mode="lines", line_shape="hv", name=trace.name, line_color=trace.color
            )
        )
    if chart.x_log:
        fig.update_xaxes(type="log")
    _y_axis(fig, chart)
    return _layout(fig, chart)


def _bars_figure(chart: Chart) -> go.Figure:
    fig = go.Figure()
    for trace in chart.traces:
        # None, not NaN: a missing bar is null in JSON.
        shown = [float(h) if math.isfinite(h) else None for h in trace.y]
        fig.add_trace(go.Bar(x=list(chart.categories), y=shown, name=trace.name, marker_color=trace.color))
    fig.update_layout(barmode="group")
    _y_axis(fig, chart)
    return _layout(fig, chart)


def _panel_traces(fig: go.Figure, panel: Panel, row: int, col: int) -> None:
    """The binned mean as a line; where binning hid spikes, a shaded band up to the peaks."""
    trace = panel.trace
    fig.add_trace(
        go.Scatter(
            x=trace.x,
            y=trace.y,
            mode="lines",
            line_shape="hv",
            name=trace.name,
            legendgroup=trace.name,
            line_color=trace.color,
        ),
        row=row,
        col=col,
    )
    if trace.peak is not None and not np.array_equal(trace.y, trace.peak):
        fig.add_trace(
            go.Scatter(
                x=trace.x,
                y=trace.peak,
                mode="lines",
                line_shape="hv",
                name=f"{trace.name} (peak)",
                legendgroup=trace.name,
                showlegend=False,
                line_width=0,
                fill="tonexty",
                fillcolor=_rgba(trace.color, 0.2),
            ),
            row=row,
            col=col,
        )
    if panel.marker_x is not None:
        fig.add_vline(x=panel.marker_x, line_dash="dash", line_width=1, line_color="#555", row=row, col=col)


def _panels_figure(chart: Chart) -> go.Figure:
    """Small multiples sharing both axes, so heights compare across policies; one plot with six
    overlaid step lines is unreadable where they cross."""
    cols = min(PANEL_COLUMNS, max(len(chart.panels), 1))
    rows = max(1, math.ceil(len(chart.panels) / cols))
    fig = make_subplots(
        rows=rows,
        cols=cols,
        shared_xaxes="all",
        shared_yaxes="all",
        subplot_titles=[html.escape(p.title) for p in chart.panels] or None,
        horizontal_spacing=0.04,
        vertical_spacing=0.12 if rows > 1 else 0.0,
    )
    for i, panel in enumerate(chart.panels):
        _panel_traces(fig, panel, row=i // cols + 1, col=i % cols + 1)
    fig.update_layout(title=chart.title, template="plotly_white", height=180 + 220 * rows, showlegend=False)
    fig.update_xaxes(title_text=chart.x_title, row=rows)
    fig.update_yaxes(title_text=chart.y_title, col=1)
    return fig


def figure(chart: Chart) -> go.Figure:
    """``chart`` as an interactive plotly figure."""
    build = {"steps": _steps_figure, "bars": _bars_figure, "panels": _panels_figure}[chart.kind]
    return build(chart)


def _figures(runs: HtmlRuns) -> list[go.Figure]:
    pairs = {policy: (table, timeline) for policy, (table, timeline, _) in runs.items()}
    by_size = {policy: summary.by_size for policy, (_, _, summary) in runs.items()}
    return [figure(chart) for chart in report_charts(pairs, by_size)]


def warm_up() -> None:
    """Build :func:`~loadmaster.report.charts.sample_charts` as figures and one as HTML: plotly's
    first-use work (its validators and templates are imported when first set) then happens here,
    not in the report's first figure."""
    figures = [figure(chart) for chart in sample_charts()]
    pio.to_html(figures[0], full_html=False, include_plotlyjs=False)


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
    reasons = {policy: wait_reasons(table) for policy, (table, _, _) in runs.items()}
    return f"""<h1>{html.escape(title)}</h1>
<h2>Context</h2>
{context_table(context)}
<h2>Summary</h2>
<p class="note">Highlighted: the best value in each row (compared before rounding);
the Better column says which direction is better. A dash means undefined (no job to measure).</p>
{_scrolling(metrics_table(summaries))}
<p class="note">GPU allocation is given twice: over the arrival window (first to last
submission, the period the offered load refers to) and over the whole run, which goes on
until the last job ends; the drain after the last arrival, with fewer and fewer jobs left,
lowers the second.</p>
<h2>Why jobs waited</h2>
<p class="note">Per policy: the plugin whose verdict held each job back last before it started
(its reason is in the job table's <code>wait_reason</code> column), the jobs that never ran,
and how far real starts fell from the starts that reservations promised.</p>
{_scrolling(wait_reasons_table(reasons))}
<h2>Charts</h2>
{_figure_html(_figures(runs))}
<h2>By job size</h2>
{_scrolling(breakdown_table(by_size, "Size (GPUs)", order_size_labels))}
<h2>By group</h2>
{_scrolling(breakdown_table(by_group, "Group", sorted))}
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
