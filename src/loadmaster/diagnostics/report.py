"""A job's diagnosis and its report: JSON (findings, overview) and HTML with the preview plots.

Plots are matplotlib PNGs embedded in the HTML: per-metric rank x time heat
maps and per-GPU sparklines, both downsampled by a min/max envelope so a
one-second spike in a six-hour job stays visible.
"""

from __future__ import annotations

import base64
import html
import io
import json
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
import numpy as np

from loadmaster.diagnostics.detectors import DetectorConfig, detect, telemetry_began
from loadmaster.diagnostics.findings import Finding
from loadmaster.diagnostics.frame import JobFrame
from loadmaster.diagnostics.overview import OVERVIEW_METRICS, Overview, overview
from loadmaster.diagnostics.signals import envelope

MAX_COLUMNS = 600
"""Heat maps and sparklines show at most this many time buckets."""
MAX_SPARKLINES = 64


@dataclass(frozen=True)
class Diagnosis:
    """Everything diagnostics says about one job."""

    job: str
    gpus: int
    nodes: int
    start_s: float
    end_s: float
    step_s: float
    findings: tuple[Finding, ...]
    overview: Overview | None
    analysis_s: float
    telemetry_s: float = 0.0
    """Seconds of the window in which some GPU of the job sent a sample."""
    note: str | None = None
    """Why there is no verdict (too little telemetry), or what part of the window had no telemetry."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "job": self.job,
            "gpus": self.gpus,
            "nodes": self.nodes,
            "start_s": self.start_s,
            "end_s": self.end_s,
            "step_s": self.step_s,
            "analysis_s": round(self.analysis_s, 4),
            "telemetry_s": self.telemetry_s,
            "note": self.note,
            "findings": [f.to_dict() for f in self.findings],
            "overview": self.overview.to_dict() if self.overview is not None else None,
        }


def diagnose(frame: JobFrame, cfg: DetectorConfig | None = None, with_overview: bool = True) -> Diagnosis:
    """Run every detector (and the overview views) on a frame; with too little telemetry, none, and a
    note that says so (a verdict on a few samples would be noise, and no data is not a finding)."""
    started = time.perf_counter()
    config = cfg or DetectorConfig()
    telemetry_s, note = coverage(frame, config)
    enough = telemetry_s >= config.min_telemetry_s
    findings = tuple(detect(frame, config)) if enough else ()
    view = overview(frame) if with_overview and enough else None
    return Diagnosis(
        frame.job,
        len(frame.gpus),
        len(frame.nodes),
        frame.start_s,
        float(frame.times_s[-1]),
        frame.step_s,
        findings,
        view,
        time.perf_counter() - started,
        telemetry_s,
        note,
    )


def coverage(frame: JobFrame, cfg: DetectorConfig) -> tuple[float, str | None]:
    """Seconds with any sample of the job, and a note when it is too little or begins late."""
    sent = frame.present.any(axis=0)
    telemetry_s = float(np.count_nonzero(sent)) * frame.step_s
    if telemetry_s < cfg.min_telemetry_s:
        return telemetry_s, (
            f"too little telemetry for a verdict: {telemetry_s:.0f} s with samples in the "
            f"{frame.times_s.size * frame.step_s:.0f} s asked for "
            f"(at least {cfg.min_telemetry_s:.0f} s needed)"
        )
    began = telemetry_began(frame)
    if began > 0:
        start, _ = frame.interval(began, began)
        return telemetry_s, (
            f"the job's telemetry begins at {start:.0f} s, {start - frame.start_s:.0f} s into the window; "
            "the time before is not diagnosed"
        )
    return telemetry_s, None


def _png(fig: Any) -> str:
    buf = io.BytesIO()
    fig.savefig(buf, format="png", dpi=90, bbox_inches="tight")
    plt.close(fig)
    return base64.b64encode(buf.getvalue()).decode("ascii")


def heatmap_png(frame: JobFrame, key: str) -> str:
    """Rank x time heat map of one metric (bucket max), as base64 PNG."""
    width = max(1, -(-frame.times_s.size // MAX_COLUMNS))
    starts, _, hi = envelope(frame.metric(key), width)
    fig, ax = plt.subplots(figsize=(10, max(2.0, min(8.0, 0.08 * len(frame.gpus) + 1.5))))
    t0, t1 = float(frame.times_s[0]), float(frame.times_s[-1])
    image = ax.imshow(
        hi, aspect="auto", interpolation="nearest", extent=(t0, t1, len(frame.gpus) - 0.5, -0.5)
    )
    ax.set_title(f"{key} (max per {width * frame.step_s:.0f} s)")
    ax.set_xlabel("time (s)")
    ax.set_ylabel("rank")
    fig.colorbar(image, ax=ax)
    del starts
    return _png(fig)


def sparklines_png(frame: JobFrame, key: str) -> str:
    """Per-GPU sparklines of one metric (min/max band), as base64 PNG."""
    n = min(len(frame.gpus), MAX_SPARKLINES)
    width = max(1, -(-frame.times_s.size // MAX_COLUMNS))
    starts, lo, hi = envelope(frame.metric(key)[:n], width)
    t = frame.times_s[starts]
    fig, axes = plt.subplots(n, 1, figsize=(10, 0.35 * n + 0.5), sharex=True, squeeze=False)
    for i in range(n):
        ax = axes[i, 0]
        ax.fill_between(t, lo[i], hi[i], linewidth=0.5)
        ax.set_yticks([])
        ax.set_ylabel(frame.gpus[i].name, rotation=0, ha="right", fontsize=6)
    axes[-1, 0].set_xlabel("time (s)")
    fig.suptitle(f"{key} per GPU (min/max per {width * frame.step_s:.0f} s)")
    return _png(fig)


def write_report(diagnosis: Diagnosis, frame: JobFrame | None, out: Path) -> dict[str, Path]:
    """Write ``diagnosis.json`` and ``diagnosis.html`` (plots when ``frame`` is given) into ``out``."""
    out.mkdir(parents=True, exist_ok=True)
    paths = {"json": out / "diagnosis.json", "html": out / "diagnosis.html"}
    paths["json"].write_text(json.dumps(diagnosis.to_dict(), indent=2))
    paths["html"].write_text(render_html(diagnosis, frame))
    return paths


def render_html(diagnosis: Diagnosis, frame: JobFrame | None) -> str:
    """The report page: findings table, suspects, then heat maps and sparklines."""
    rows = "".join(
        f"<tr><td>{f.kind.value}</td><td>{html.escape(', '.join(f.nodes) or ', '.join(f.gpus[:8]))}</td>"
        f"<td>{f.start_s:.0f}</td><td>{f.end_s:.0f}</td><td>{f.confidence:.2f}</td>"
        f"<td>{html.escape(f.evidence.text)}</td></tr>"
        for f in diagnosis.findings
    )
    parts = [
        "<html><head><meta charset='utf-8'>",
        f"<title>Diagnosis of {html.escape(diagnosis.job)}</title></head><body>",
        f"<h1>Diagnosis of job {html.escape(diagnosis.job)}</h1>",
        f"<p>{diagnosis.gpus} GPUs on {diagnosis.nodes} nodes, "
        f"{diagnosis.start_s:.0f}-{diagnosis.end_s:.0f} s "
        f"at {diagnosis.step_s:g} s; analysis {diagnosis.analysis_s:.2f} s.</p>",
        f"<p><b>{html.escape(diagnosis.note)}</b></p>" if diagnosis.note else "",
        "<h2>Findings</h2>",
        "<table border='1' cellspacing='0' cellpadding='3'><tr><th>kind</th><th>target</th><th>start s</th>"
        f"<th>end s</th><th>confidence</th><th>evidence</th></tr>{rows}</table>"
        if rows
        else "<p>No findings: every GPU behaves like its peers.</p>",
    ]
    if diagnosis.overview is not None:
        suspects = ", ".join(diagnosis.overview.suspects) or "none"
        cps = ", ".join(f"{c:.0f}" for c in diagnosis.overview.change_points_s) or "none"
        parts.append(
            f"<h2>Narrowing down</h2><p>Minority clusters (SM activity features): {html.escape(suspects)}."
            f" Change points of the job-median SM activity (s): {cps}.</p>"
        )
    if frame is not None:
        parts.append("<h2>Preview</h2>")
        for key in OVERVIEW_METRICS[:4]:
            parts.append(f"<img src='data:image/png;base64,{heatmap_png(frame, key)}'/><br/>")
        parts.append(f"<img src='data:image/png;base64,{sparklines_png(frame, 'SM_ACTIVE')}'/>")
    parts.append("</body></html>")
    return "\n".join(parts)
