"""The goodness-of-fit report of ``loadmaster workload fit``: a KS table, QQ plots and CDFs.

A sample drawn from the fitted model is compared with the trace, marginal by
marginal. The QQ plot puts the trace's quantiles on x and the sample's on y:
points on the diagonal mean the model reproduces that quantity. The CDF plot
overlays both empirical CDFs; the KS distance is the largest vertical gap
between them. Figures are built without pyplot, as in :mod:`loadmaster.report.plots`.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from pathlib import Path

import numpy as np
from matplotlib.axes import Axes
from matplotlib.figure import Figure

from loadmaster.report.charts import policy_color
from loadmaster.report.plots import DPI
from loadmaster.workload.goodness import KS_TARGET, FloatArray, Marginal, ecdf, qq_points

_TRACE_COLOR = policy_color(0)
_SAMPLE_COLOR = policy_color(1)

LABELS = {
    "gpus_per_job": "GPUs per job",
    "duration_s": "Run time (s)",
    "interarrival_s": "Inter-arrival time (s)",
    "time_limit_ratio": "Time limit / run time",
    "gpu_memory_mib": "GPU memory (MiB per GPU)",
}
"""Axis labels of the marginals :func:`loadmaster.workload.goodness.compare_marginals` returns."""


def ks_table_markdown(marginals: Sequence[Marginal]) -> str:
    """The KS distances as a Markdown table, with whether each is within the target."""
    lines = [
        "| marginal | KS distance | within 0.1 | trace median | sample median |",
        "|---|---|---|---|---|",
    ]
    for m in marginals:
        verdict = "yes" if m.passes else "**no**"
        lines.append(
            f"| {LABELS.get(m.name, m.name)} | {m.ks:.4f} | {verdict} | "
            f"{_median(m.trace):.4g} | {_median(m.sample):.4g} |"
        )
    return "\n".join(lines)


def write_fit_report(
    folder: Path, marginals: Sequence[Marginal], *, title: str, details: Sequence[str] = ()
) -> dict[str, Path]:
    """Write ``fit_qq.png``, ``fit_cdf.png`` and ``fit_report.md`` into ``folder``; their paths by name.

    ``details`` are Markdown lines about the model, printed under the table.
    """
    folder.mkdir(parents=True, exist_ok=True)
    paths = {"qq": folder / "fit_qq.png", "cdf": folder / "fit_cdf.png", "report": folder / "fit_report.md"}
    _grid(marginals, _draw_qq).savefig(paths["qq"], dpi=DPI)
    _grid(marginals, _draw_cdf).savefig(paths["cdf"], dpi=DPI)
    text = [
        f"# {title}",
        "",
        "A sample of as many jobs as the trace, drawn from the fitted model at its fitted arrival",
        "rate, compared with the trace. KS distance: the largest gap between the two CDFs",
        f"(target <= {KS_TARGET}).",
        "",
        ks_table_markdown(marginals),
        "",
        *details,
        "",
        "## QQ plots",
        "",
        "Trace quantiles on x, sample quantiles on y; on the diagonal, the model reproduces the trace.",
        "",
        f"![QQ plots]({paths['qq'].name})",
        "",
        "## CDFs",
        "",
        f"![CDFs]({paths['cdf'].name})",
        "",
    ]
    paths["report"].write_text("\n".join(text), encoding="utf-8")
    return paths


def _grid(marginals: Sequence[Marginal], draw: Callable[[Axes, Marginal], None]) -> Figure:
    columns = min(3, max(1, len(marginals)))
    rows = -(-len(marginals) // columns)
    figure = Figure(figsize=(4.6 * columns, 4.0 * rows), layout="constrained")
    axes = figure.subplots(rows, columns, squeeze=False)
    for index, ax in enumerate(axes.flat):
        if index < len(marginals):
            draw(ax, marginals[index])
        else:
            ax.set_visible(False)
    return figure


def _draw_qq(ax: Axes, m: Marginal) -> None:
    trace_q, sample_q = qq_points(m.trace, m.sample)
    if m.log_scale:
        trace_q, sample_q = _positive(trace_q), _positive(sample_q)
        ax.set_xscale("log")
        ax.set_yscale("log")
    low = float(min(trace_q.min(), sample_q.min()))
    high = float(max(trace_q.max(), sample_q.max()))
    ax.plot([low, high], [low, high], color="grey", linewidth=1, linestyle="--")
    ax.scatter(trace_q, sample_q, s=9, color=_SAMPLE_COLOR)
    label = LABELS.get(m.name, m.name)
    ax.set_title(f"{label}: KS {m.ks:.3f}")
    ax.set_xlabel("trace quantile")
    ax.set_ylabel("sample quantile")
    ax.grid(True, alpha=0.3)


def _draw_cdf(ax: Axes, m: Marginal) -> None:
    for values, name, color in ((m.trace, "trace", _TRACE_COLOR), (m.sample, "sample", _SAMPLE_COLOR)):
        finite = values[np.isfinite(values)]
        points = np.unique(_positive(finite) if m.log_scale else finite)
        ax.step(points, ecdf(finite, points), where="post", color=color, label=name)
    if m.log_scale:
        ax.set_xscale("log")
    ax.set_title(f"{LABELS.get(m.name, m.name)}: KS {m.ks:.3f}")
    ax.set_ylabel("fraction of jobs <= x")
    ax.set_ylim(0.0, 1.0)
    ax.legend(loc="lower right")
    ax.grid(True, alpha=0.3)


def _positive(values: FloatArray) -> FloatArray:
    """Values drawn on a log axis: zeros (bursts, instant failures) at half the smallest positive value."""
    positive = values[values > 0.0]
    floor = float(positive.min()) / 2.0 if positive.size else 1.0
    return np.asarray(np.maximum(values, floor), dtype=np.float64)


def _median(values: FloatArray) -> float:
    finite = values[np.isfinite(values)]
    return float(np.median(finite)) if finite.size else float("nan")
