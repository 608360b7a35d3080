"""A sweep's answers: the combined table, each metric against load with intervals, the paired table.

``results.parquet`` has one row per cell, in the sweep's order, with its labels,
its status (done, failed, missing) and every metric; it holds nothing that
changes from run to run (times and hosts go to ``timing.csv``), so the same
sweep gives the same table. ``comparison.parquet`` (and ``.csv``) has one row
per compared pair, group and metric. ``plots/METRIC.png`` and ``report.html``
draw each metric's mean over seeds against load, per profile, with its
bootstrap interval.
"""

from __future__ import annotations

import html
import math
import zlib
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np
import plotly.graph_objects as go
import plotly.io as pio
import pyarrow as pa
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from loadmaster import __version__
from loadmaster.sweep.spec import METRIC_NAMES, Sweep
from loadmaster.sweep.stats import Paired, bootstrap_mean, paired
from loadmaster.sweep.store import Store

HIGHER_IS_BETTER = frozenset({"jobs_ran", "allocation_mean", "jain_fairness"})
LABELS = ("cluster", "workload", "kind", "workload_jobs", "load", "profile", "variant", "seed")
GROUP = ("cluster", "workload", "variant")


def results_table(sweep: Sweep, store: Store) -> pa.Table:
    """One row per cell of the sweep, in its order: labels, key, status, offered load, metrics."""
    done, failures = store.done(), store.failures()
    rows: dict[str, list[Any]] = {
        name: [] for name in (*LABELS, "key", "status", "offered_load", *METRIC_NAMES)
    }
    for cell in sweep.cells:
        for name, value in cell.labels().items():
            rows[name].append(value)
        record = done.get(cell.key)
        rows["key"].append(cell.key)
        rows["status"].append("done" if record else "failed" if cell.key in failures else "missing")
        rows["offered_load"].append(record.get("offered_load") if record else None)
        for metric in METRIC_NAMES:
            value = record["metrics"].get(metric) if record else None
            rows[metric].append(float(value) if value is not None else None)
    types = {
        "workload_jobs": pa.int64(),
        "load": pa.float64(),
        "seed": pa.int64(),
        "offered_load": pa.float64(),
    }
    columns = {
        name: pa.array(values, type=types.get(name, pa.float64() if name in METRIC_NAMES else pa.string()))
        for name, values in rows.items()
    }
    return pa.table(columns)


def timing_table(sweep: Sweep, store: Store) -> pa.Table:
    """Per finished cell: its key, seconds to run, the node and process, and the attempt."""
    done = store.done()
    keys = sorted({c.key for c in sweep.cells if c.key in done})
    return pa.table(
        {
            "key": keys,
            "wall_s": [float(done[k]["wall_s"]) for k in keys],
            "node": [str(done[k].get("ran_on", {}).get("node", "")) for k in keys],
            "pid": [int(done[k].get("ran_on", {}).get("pid", 0)) for k in keys],
            "attempt": [int(done[k].get("attempt", 1)) for k in keys],
        }
    )


@dataclass(frozen=True, slots=True)
class Point:
    """One profile's metric at one load: mean over seeds and its interval."""

    x: float
    mean: float
    low: float
    high: float
    seeds: int


def _seed_of(*parts: object) -> int:
    return zlib.crc32("|".join(str(p) for p in parts).encode())


def _rows(table: pa.Table) -> list[dict[str, Any]]:
    return [r for r in table.to_pylist() if r["status"] == "done"]


def _x(row: dict[str, Any]) -> float:
    load = row["load"]
    return float(load) if load is not None else float(row["offered_load"] or math.nan)


def curves(sweep: Sweep, table: pa.Table, metric: str) -> dict[tuple[str, ...], dict[str, list[Point]]]:
    """(cluster, workload, variant) -> profile -> points by load."""
    groups: dict[tuple[str, ...], dict[str, dict[object, list[dict[str, Any]]]]] = {}
    for row in _rows(table):
        key = tuple(str(row[g]) for g in GROUP)
        groups.setdefault(key, {}).setdefault(row["profile"], {}).setdefault(row["load"], []).append(row)
    out: dict[tuple[str, ...], dict[str, list[Point]]] = {}
    for key, profiles in groups.items():
        for profile, by_load in profiles.items():
            points = []
            for load, rows in by_load.items():
                values = [r[metric] for r in rows if r[metric] is not None]
                low, high = bootstrap_mean(
                    values,
                    resamples=sweep.spec.bootstrap,
                    alpha=sweep.spec.alpha,
                    seed=_seed_of(*key, profile, load, metric),
                )
                mean = float(np.mean(values)) if values else math.nan
                x = float(np.mean([_x(r) for r in rows]))
                points.append(Point(x, mean, low, high, len(values)))
            out.setdefault(key, {})[profile] = sorted(points, key=lambda p: p.x)
    return out


def comparison_table(sweep: Sweep, table: pa.Table) -> pa.Table:
    """Each compared pair (A, B), per group, load and metric: B - A over the seeds both finished."""
    by: dict[tuple[Any, ...], dict[int, dict[str, Any]]] = {}
    for row in _rows(table):
        by.setdefault((*(row[g] for g in GROUP), row["load"], row["profile"]), {})[row["seed"]] = row
    groups = sorted(
        {k[:4] for k in by}, key=lambda k: (str(k[0]), str(k[1]), str(k[2]), -1 if k[3] is None else k[3])
    )
    out: dict[str, list[Any]] = {
        n: []
        for n in (
            "cluster",
            "workload",
            "variant",
            "load",
            "metric",
            "a",
            "b",
            "seeds",
            "mean_a",
            "mean_b",
            "diff",
            "ci_low",
            "ci_high",
            "p_value",
            "significant",
            "verdict",
        )
    }
    for a, b in sweep.compare:
        for group in groups:
            rows_a, rows_b = by.get((*group, a), {}), by.get((*group, b), {})
            seeds = sorted(set(rows_a) & set(rows_b))
            for metric in sweep.spec.metrics:
                values_a = [_num(rows_a[s][metric]) for s in seeds]
                values_b = [_num(rows_b[s][metric]) for s in seeds]
                result = paired(
                    values_a,
                    values_b,
                    resamples=sweep.spec.bootstrap,
                    alpha=sweep.spec.alpha,
                    seed=_seed_of(*group, a, b, metric),
                )
                for name, value in zip(("cluster", "workload", "variant", "load"), group, strict=True):
                    out[name].append(value)
                out["metric"].append(metric)
                out["a"].append(a)
                out["b"].append(b)
                out["seeds"].append(result.seeds)
                for name, value in (
                    ("mean_a", result.mean_a),
                    ("mean_b", result.mean_b),
                    ("diff", result.diff),
                    ("ci_low", result.low),
                    ("ci_high", result.high),
                    ("p_value", result.p_value),
                ):
                    out[name].append(None if math.isnan(value) else value)
                out["significant"].append(result.significant)
                out["verdict"].append(verdict(result, metric, b))
    types = {"load": pa.float64(), "seeds": pa.int64(), "significant": pa.bool_()}
    floats = {"mean_a", "mean_b", "diff", "ci_low", "ci_high", "p_value"}
    return pa.table(
        {
            n: pa.array(v, type=types.get(n, pa.float64() if n in floats else pa.string()))
            for n, v in out.items()
        }
    )


def _num(value: Any) -> float:
    return float(value) if value is not None else math.nan


def verdict(result: Paired, metric: str, b: str) -> str:
    """``b better``, ``b worse`` or ``no significant difference`` (the metric's direction known)."""
    if not result.significant:
        return "no significant difference" if result.seeds else "no common seeds"
    higher = result.diff > 0
    better = higher if metric in HIGHER_IS_BETTER else not higher
    return f"{b} {'better' if better else 'worse'}"


def _title(metric: str) -> str:
    direction = "higher" if metric in HIGHER_IS_BETTER else "lower"
    return f"{metric} ({direction} is better)"


def write_plots(sweep: Sweep, table: pa.Table, out_dir: Path) -> list[Path]:
    """``plots/METRIC.png``: one panel per (cluster, workload, variant), one line per profile."""
    (out_dir / "plots").mkdir(parents=True, exist_ok=True)
    paths = []
    for metric in sweep.spec.metrics:
        panels = curves(sweep, table, metric)
        if not panels:
            continue
        n = len(panels)
        cols = min(n, 3)
        fig, axes = plt.subplots(
            math.ceil(n / cols), cols, figsize=(5.5 * cols, 4 * math.ceil(n / cols)), squeeze=False
        )
        for ax, (key, profiles) in zip(axes.flat, sorted(panels.items()), strict=False):
            for profile, points in profiles.items():
                xs = [p.x for p in points]
                ax.plot(xs, [p.mean for p in points], marker="o", label=profile)
                ax.fill_between(xs, [p.low for p in points], [p.high for p in points], alpha=0.2)
            ax.set_title(" / ".join(key), fontsize=9)
            ax.set_xlabel("offered load")
            ax.set_ylabel(metric)
            ax.grid(alpha=0.3)
            ax.legend(fontsize=7)
        for ax in list(axes.flat)[n:]:
            ax.set_visible(False)
        level = f"{100 * (1 - sweep.spec.alpha):.0f}%"
        fig.suptitle(f"{_title(metric)}\nmean over seeds, {level} bootstrap interval", fontsize=10)
        fig.tight_layout()
        path = out_dir / "plots" / f"{metric}.png"
        fig.savefig(path, dpi=90)
        plt.close(fig)
        paths.append(path)
    return paths


def _figures(sweep: Sweep, table: pa.Table) -> list[go.Figure]:
    figures = []
    for metric in sweep.spec.metrics:
        for key, profiles in sorted(curves(sweep, table, metric).items()):
            fig = go.Figure()
            for profile, points in profiles.items():
                fig.add_trace(
                    go.Scatter(
                        x=[p.x for p in points],
                        y=[p.mean for p in points],
                        name=profile,
                        mode="lines+markers",
                        error_y={
                            "type": "data",
                            "symmetric": False,
                            "array": [p.high - p.mean if math.isfinite(p.high) else 0 for p in points],
                            "arrayminus": [p.mean - p.low if math.isfinite(p.low) else 0 for p in points],
                        },
                        customdata=[p.seeds for p in points],
                        hovertemplate="load %{x:.2f}: %{y:.4g} (%{customdata} seeds)",
                    )
                )
            fig.update_layout(
                title=f"{_title(metric)}: {' / '.join(key)}",
                xaxis_title="offered load",
                yaxis_title=metric,
                height=380,
            )
            figures.append(fig)
    return figures


def _html_table(table: pa.Table, columns: Sequence[str]) -> str:
    head = "".join(f"<th>{html.escape(c)}</th>" for c in columns)
    body = []
    for row in table.to_pylist():
        cls = ' class="sig"' if row.get("significant") else ""
        cells = "".join(f"<td>{html.escape(_fmt(row[c]))}</td>" for c in columns)
        body.append(f"<tr{cls}>{cells}</tr>")
    return f"<table><tr>{head}</tr>{''.join(body)}</table>"


def _fmt(value: Any) -> str:
    if value is None:
        return "-"
    if isinstance(value, float):
        return f"{value:.4g}"
    return str(value)


_CSS = """body{font-family:system-ui,sans-serif;margin:2em;max-width:1200px}
table{border-collapse:collapse;font-size:13px;margin:1em 0}
td,th{border:1px solid #ccc;padding:3px 8px;text-align:right}
th{background:#f3f3f3}tr.sig{background:#fff3c4}.note{color:#555}"""


def write_report(sweep: Sweep, store: Store, out_dir: Path) -> dict[str, Path]:
    """Write the tables, the plots and report.html into ``out_dir``; return their paths."""
    table = results_table(sweep, store)
    pq.write_table(table, out_dir / "results.parquet")
    pacsv.write_csv(table, out_dir / "results.csv")
    pacsv.write_csv(timing_table(sweep, store), out_dir / "timing.csv")
    comparison = comparison_table(sweep, table)
    pq.write_table(comparison, out_dir / "comparison.parquet")
    pacsv.write_csv(comparison, out_dir / "comparison.csv")
    write_plots(sweep, table, out_dir)
    statuses = table.column("status").to_pylist()
    failures = store.failures()
    failed_rows = "".join(
        f"<tr><td>{html.escape(k)}</td><td>{html.escape(str(v['labels']))}</td><td>{v['attempts']}</td>"
        f"<td><pre>{html.escape(v['error'].strip().splitlines()[-1])}</pre></td></tr>"
        for k, v in failures.items()
    )
    failed = (
        f"<table><tr><th>key</th><th>cell</th><th>attempts</th><th>last error</th></tr>{failed_rows}</table>"
        if failed_rows
        else "<p>None.</p>"
    )
    counts = ", ".join(f"{statuses.count(s)} {s}" for s in ("done", "failed", "missing"))
    figures = "\n".join(
        pio.to_html(fig, full_html=False, include_plotlyjs=(i == 0), config={"displaylogo": False})
        for i, fig in enumerate(_figures(sweep, table))
    )
    columns = (
        "a",
        "b",
        "cluster",
        "workload",
        "variant",
        "load",
        "metric",
        "seeds",
        "mean_a",
        "mean_b",
        "diff",
        "ci_low",
        "ci_high",
        "p_value",
        "verdict",
    )
    level = f"{100 * (1 - sweep.spec.alpha):.0f}%"
    document = f"""<!DOCTYPE html>
<html lang="en"><head><meta charset="utf-8"><title>sweep {html.escape(sweep.name)}</title>
<style>{_CSS}</style></head>
<body>
<h1>Sweep {html.escape(sweep.name)}</h1>
<p>{html.escape(sweep.spec.description)}</p>
<p>From {html.escape(sweep.source)}; loadmaster {__version__}. Cells: {len(statuses)} ({counts}).</p>
<h2>Paired comparisons</h2>
<p class="note">B - A on the seeds both finished (same seed: same jobs).
Highlighted rows differ significantly: the {level} paired-bootstrap interval of the mean difference
excludes 0 and the exact Wilcoxon signed-rank
p-value is below {sweep.spec.alpha} (with fewer than 6 seeds no difference can reach that).
Many rows are tested at once: about {sweep.spec.alpha:.0%} of the rows with no real difference
are highlighted by chance.</p>
{_html_table(comparison, columns)}
<h2>Metrics against load</h2>
<p class="note">Mean over seeds; bars: {level} bootstrap interval of the mean
({sweep.spec.bootstrap} resamples).</p>
{figures}
<h2>Failed cells</h2>
{failed}
</body></html>
"""
    (out_dir / "report.html").write_text(document, encoding="utf-8")
    return {
        "table": out_dir / "results.parquet",
        "comparison": out_dir / "comparison.parquet",
        "report": out_dir / "report.html",
    }
