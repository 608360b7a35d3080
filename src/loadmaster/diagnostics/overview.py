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

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "clusters": self.cluster_labels,
            "suspects": list(self.suspects),
            "peer_z_max": self.peer_z_max,
            "metric_correlation": self.metric_corr,
            "rank_lag": {k: {"lag_steps": v[0], "corr": round(v[1], 4)} for k, v in self.rank_lag.items()},
            "change_points_s": self.change_points_s,
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


def overview(frame: JobFrame) -> Overview:
    """Every narrowing-down view of ``frame``."""
    names = [g.name for g in frame.gpus]
    sm = frame.metric("SM_ACTIVE")
    feats = features(np.nan_to_num(sm, nan=np.nanmedian(sm) if np.isfinite(sm).any() else 0.0))
    clusters = k_medoids(feats) if len(names) >= 4 else None
    labels = clusters.labels.tolist() if clusters is not None else [0] * len(names)
    suspects = tuple(names[r] for r in clusters.minority()) if clusters is not None else ()
    peer = {}
    for key in OVERVIEW_METRICS:
        z = window_z(frame, key)
        peer[key] = {
            n: round(float(np.nanmax(np.abs(z[i]))), 2) if z.shape[1] else 0.0 for i, n in enumerate(names)
        }
    dev = {k: frame.metric(k) - nanmedian(frame.metric(k), axis=0) for k in OVERVIEW_METRICS}
    mc = {
        a: {b: round(corr(dev[a].ravel(), dev[b].ravel()), 3) for b in OVERVIEW_METRICS}
        for a in OVERVIEW_METRICS
    }
    smooth = rolling_mean(sm, max(1, round(30.0 / frame.step_s)))
    med = nanmedian(smooth, axis=0)
    thin = max(1, sm.shape[1] // 4000)
    lag = {n: lagged_corr(sm[i, ::thin], nanmedian(sm, axis=0)[::thin], 5) for i, n in enumerate(names)}
    cps = change_points(med[::thin], min_size=max(5, 60 // max(1, round(frame.step_s * thin))))
    return Overview(
        cluster_labels=dict(zip(names, (int(v) for v in labels), strict=True)),
        suspects=suspects,
        peer_z_max=peer,
        metric_corr=mc,
        rank_lag=lag,
        change_points_s=[float(frame.times_s[min(c * thin, frame.times_s.size - 1)]) for c in cps],
    )
