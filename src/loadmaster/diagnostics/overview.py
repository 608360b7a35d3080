"""The narrowing-down views of a job: GPU clusters, peer z-scores per window, metric correlations,
lagged cross-rank correlation and change points of job-level signals."""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import numpy as np

from loadmaster.diagnostics.frame import JobFrame
from loadmaster.diagnostics.signals import (
    FloatArray,
    change_points,
    corr,
    k_medoids,
    lagged_corr,
    nanmean,
    nanmedian,
    periodicity,
    robust_z,
    rolling_mean,
)

OVERVIEW_METRICS = (
    "SM_ACTIVE",
    "PIPE_TENSOR_ACTIVE",
    "GPU_UTIL",
    "POWER_USAGE",
    "GPU_TEMP",
    "FB_USED",
    "NVLINK_TX_BYTES",
)
"""Metrics the overview clusters, correlates and previews."""

MIN_OVERVIEW_S = 300.0
"""Shortest trace the clusters are drawn from: one peer window (:func:`window_z`). On a few
seconds of data the features (spread, periodicity) are noise, and k-medoids splits healthy GPUs
into 'minority' clusters."""


@dataclass(frozen=True)
class Overview:
    """Clusters (label per GPU, suspects), peer z per window, correlations and change points."""

    cluster_labels: dict[str, int]
    suspects: tuple[str, ...]
    peer_z_max: dict[str, dict[str, float]]
    """Per metric, per GPU: the largest |robust z| over windows."""
    metric_corr: dict[str, dict[str, float]]
    """Job-wide correlation of per-GPU deviations between metric pairs (metric x metric)."""
    rank_lag: dict[str, tuple[int, float]]
    """Per GPU: (lag in steps, correlation) of its SM activity against the job median."""
    change_points_s: list[float]
    """Change points of the job-median SM activity (seconds)."""
    notes: tuple[str, ...] = ()
    """What the views could not use, said plainly (a metric absent from the data, a trace too short)."""

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "clusters": self.cluster_labels,
            "suspects": list(self.suspects),
            "peer_z_max": self.peer_z_max,
            "metric_correlation": self.metric_corr,
            "rank_lag": {k: {"lag_steps": v[0], "corr": round(v[1], 4)} for k, v in self.rank_lag.items()},
            "change_points_s": self.change_points_s,
            "notes": list(self.notes),
        }


def features(x: FloatArray) -> FloatArray:
    """Per row: level (median), variability (IQR), periodicity, correlation with the row median."""
    med = nanmedian(x, axis=0)
    q = np.nanpercentile(np.where(np.isfinite(x), x, np.nanmedian(x)), [25, 75], axis=1)
    thin = x[:, :: max(1, x.shape[1] // 2000)]
    return np.column_stack(
        [
            nanmedian(x, axis=1),
            q[1] - q[0],
            [periodicity(r) for r in thin],
            [corr(r, med) for r in x],
        ]
    )


def window_z(frame: JobFrame, key: str, window_s: float = 300.0) -> FloatArray:
    """Robust z-scores across ranks of each GPU's window mean (GPUs x windows)."""
    x = frame.metric(key)
    w = max(1, round(window_s / frame.step_s))
    n = x.shape[1] // w
    if n == 0:
        return np.zeros((x.shape[0], 0))
    means = nanmean(x[:, : n * w].reshape(x.shape[0], n, w), axis=2)
    floor = 0.01 * max(float(np.nanmax(np.abs(means))) if np.isfinite(means).any() else 1.0, 1e-9)
    return robust_z(means, floor)


def _largest_abs(row: FloatArray) -> float:
    finite = row[np.isfinite(row)]
    return round(float(np.max(np.abs(finite))), 2) if finite.size else 0.0


def overview(frame: JobFrame) -> Overview:
    """Every narrowing-down view of ``frame``; ``notes`` says what it had to leave out and why.

    A metric absent from the data (all NaN) is left out of the peer z-scores
    and correlations; a trace shorter than :data:`MIN_OVERVIEW_S` gets no
    clusters, so no GPU is named a suspect on too little data.
    """
    names = [g.name for g in frame.gpus]
    absent = [k for k in OVERVIEW_METRICS if not np.isfinite(frame.metric(k)).any()]
    present = [k for k in OVERVIEW_METRICS if k not in absent]
    notes = []
    if absent:
        notes.append(f"not in the data: {', '.join(absent)} (left out of the peer z-scores and correlations)")
    span_s = frame.times_s.size * frame.step_s
    sm = frame.metric("SM_ACTIVE")
    clusters = None
    if "SM_ACTIVE" in absent:
        notes.append("no SM_ACTIVE: no clusters, suspects, rank lags or change points")
    elif span_s < MIN_OVERVIEW_S:
        notes.append(
            f"the data covers {span_s:.0f} s, less than the {MIN_OVERVIEW_S:.0f} s the clusters need "
            "(one peer window): no clusters and no suspects"
        )
    elif len(names) >= 4:
        clusters = k_medoids(features(np.nan_to_num(sm, nan=float(np.nanmedian(sm)))))
    labels = clusters.labels.tolist() if clusters is not None else [0] * len(names)
    suspects = tuple(names[r] for r in clusters.minority()) if clusters is not None else ()
    peer = {}
    for key in present:
        z = window_z(frame, key)
        peer[key] = {n: _largest_abs(z[i]) for i, n in enumerate(names)}
    dev = {k: frame.metric(k) - nanmedian(frame.metric(k), axis=0) for k in present}
    mc = {a: {b: round(corr(dev[a].ravel(), dev[b].ravel()), 3) for b in present} for a in present}
    lag: dict[str, tuple[int, float]] = {}
    cps: list[int] = []
    thin = max(1, sm.shape[1] // 4000)
    if "SM_ACTIVE" not in absent:
        smooth = rolling_mean(sm, max(1, round(30.0 / frame.step_s)))
        med = nanmedian(smooth, axis=0)
        lag = {n: lagged_corr(sm[i, ::thin], nanmedian(sm, axis=0)[::thin], 5) for i, n in enumerate(names)}
        cps = change_points(med[::thin], min_size=max(5, 60 // max(1, round(frame.step_s * thin))))
    return Overview(
        cluster_labels=dict(zip(names, (int(v) for v in labels), strict=True)),
        suspects=suspects,
        peer_z_max=peer,
        metric_corr=mc,
        rank_lag=lag,
        change_points_s=[float(frame.times_s[min(c * thin, frame.times_s.size - 1)]) for c in cps],
        notes=tuple(notes),
    )
