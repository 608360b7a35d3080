"""Per-rank iteration times: stragglers by peer comparison per iteration, slow groups by clustering.

Input is a (ranks x iterations) matrix of iteration (mini-batch) times, NaN
where a rank did not report, such as the Alibaba PAI v2020 mini-batch data
(:func:`read_pai_minibatch`).
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadmaster.diagnostics.findings import Evidence, Finding, FindingKind, confidence
from loadmaster.diagnostics.frame import read_table
from loadmaster.diagnostics.signals import (
    MAD_SCALE,
    FloatArray,
    change_points,
    k_medoids,
    merge_runs,
    nanmedian,
    runs,
)
from loadmaster.errors import TelemetryError


@dataclass(frozen=True)
class IterationTimes:
    """Iteration times of a job's ranks: ``times[rank, k]`` for iteration stamp ``iterations[k]``."""

    job: str
    ranks: tuple[str, ...]
    iterations: FloatArray
    times: FloatArray
    unit: str = "s"
    """The unit of ``times``: seconds, or ``units`` where the source normalised them (PAI: 0-1000)."""


def read_pai_minibatch(path: Path) -> IterationTimes:
    """A ``job_N_norm.csv`` of the PAI v2020 mini-batch data (worker, gpu, time, batch_time_norm)."""
    table = read_table(path)
    for col in ("worker", "time", "batch_time_norm"):
        if col not in table.column_names:
            raise TelemetryError(
                f"{path}: lacks column {col!r} (expected worker, gpu, time, batch_time_norm)"
            )
    worker = np.asarray(table.column("worker").to_numpy(), dtype=np.int64)
    stamp = np.asarray(table.column("time").to_numpy(), dtype=np.float64)
    value = np.asarray(table.column("batch_time_norm").to_numpy(), dtype=np.float64)
    ranks = np.unique(worker)
    iters = np.unique(stamp)
    times = np.full((ranks.size, iters.size), np.nan)
    times[np.searchsorted(ranks, worker), np.searchsorted(iters, stamp)] = value
    job = path.stem.removesuffix("_norm")
    return IterationTimes(job, tuple(f"worker {r}" for r in ranks), iters, times, unit="units (0-1000)")


def read_iteration_csv(path: Path) -> IterationTimes:
    """A CSV (or Parquet) with columns ``rank``, ``iteration``, ``time_s``: one row per rank and step."""
    table = read_table(path)
    for col in ("rank", "iteration", "time_s"):
        if col not in table.column_names:
            raise TelemetryError(f"{path}: lacks column {col!r} (expected rank, iteration, time_s)")
    rank = [str(r) for r in table.column("rank").to_pylist()]
    stamp = np.asarray(table.column("iteration").to_numpy(), dtype=np.float64)
    value = np.asarray(table.column("time_s").to_numpy(), dtype=np.float64)
    ranks = sorted(set(rank), key=lambda r: (len(r), r))
    row = {r: i for i, r in enumerate(ranks)}
    iters = np.unique(stamp)
    times = np.full((len(ranks), iters.size), np.nan)
    times[[row[r] for r in rank], np.searchsorted(iters, stamp)] = value
    return IterationTimes(path.stem, tuple(f"rank {r}" for r in ranks), iters, times, unit="s")


def whatif_step_time_share(it: IterationTimes, rows: Sequence[int], first: int, last: int) -> float:
    """The share of the job's time over iterations ``first..last`` it would take if ``rows`` ran at
    their peers' median each iteration: synchronous training waits for the slowest rank, so a step
    lasts the maximum over ranks; the rows' times are replaced by the other ranks' median."""
    span = it.times[:, first : last + 1]
    others = np.delete(span, list(rows), axis=0)
    if others.size == 0:
        return 1.0
    step = np.fmax.reduce(span, axis=0)
    better = span.copy()
    better[list(rows)] = nanmedian(others, axis=0)[None, :]
    new = np.fmax.reduce(better, axis=0)
    ok = np.isfinite(step) & np.isfinite(new)
    total = float(step[ok].sum())
    return float(new[ok].sum() / total) if total > 0 else 1.0


@dataclass(frozen=True)
class IterationConfig:
    """Thresholds for iteration-time analysis."""

    z: float = 6.0
    """A rank this many robust standard deviations slower than the iteration's median straggles."""
    min_excess: float = 0.25
    """... and at least this share slower than the median (ignores noise on very steady jobs)."""
    merge_gap: int = 30
    """Straggling iterations this close together are one episode."""
    group_gap: float = 1.5
    """A slow group's median time is at least this many times the fast group's."""


def stragglers(it: IterationTimes, cfg: IterationConfig | None = None) -> list[Finding]:
    """Ranks slower than their peers in some iterations: one finding per rank and episode; the
    interval is in iteration stamps (``start_s``/``end_s`` hold iteration numbers)."""
    c = cfg or IterationConfig()
    med = nanmedian(it.times, axis=0)
    mad = nanmedian(np.abs(it.times - med), axis=0) * MAD_SCALE
    scale = np.maximum(np.nan_to_num(mad), 1e-9)
    z = (it.times - med) / scale
    slow = (np.nan_to_num(z) > c.z) & (np.nan_to_num(it.times / med) > 1.0 + c.min_excess)
    out = []
    for r, rank in enumerate(it.ranks):
        for a, b in merge_runs(runs(slow[r]), c.merge_gap):
            hits = int(slow[r, a : b + 1].sum())
            if hits < 3:
                continue
            excess = float(nanmedian((it.times[r, a : b + 1] - med[a : b + 1])[slow[r, a : b + 1]]))
            share = whatif_step_time_share(it, [r], a, b)
            ev = Evidence(
                ("iteration time",),
                {
                    "slow_iterations": hits,
                    "median_excess": excess,
                    "max_z": float(np.nanmax(z[r, a : b + 1])),
                    "whatif_step_time_share": share,
                    "whatif_speedup": 1.0 / share,
                },
                f"{hits} iterations slower than the per-iteration median by {excess:.3g} {it.unit} (median); "
                f"at its peers' median the job's iterations {_whatif_text(share)}",
            )
            conf = confidence(hits, 3, float(b - a + 1), 3.0)
            start, end = float(it.iterations[a]), float(it.iterations[b])
            out.append(Finding(FindingKind.STRAGGLER, (rank,), (), start, end, ev, conf, axis="iteration"))
    return out


def _whatif_text(share: float) -> str:
    return f"would take {100 * (1 - share):.0f}% less time ({1 / share:.2f}x faster)"


def slow_group(it: IterationTimes, cfg: IterationConfig | None = None) -> Finding | None:
    """A group of ranks persistently slower than the rest (clusters by level and variability), or None."""
    c = cfg or IterationConfig()
    level = nanmedian(it.times, axis=1)
    clusters = k_medoids(np.log(np.maximum(level, 1e-9))[:, None], k_max=2)
    if clusters.medoids.size < 2:
        return None
    group_level = {k: float(np.median(level[clusters.labels == k])) for k in range(clusters.medoids.size)}
    fastest = min(group_level.values())
    slowest_label = max(group_level, key=lambda k: group_level[k])
    if group_level[slowest_label] < c.group_gap * fastest:
        return None
    rows = np.flatnonzero(clusters.labels == slowest_label)
    cps = change_points(nanmedian(it.times[rows], axis=0), min_size=20)
    share = whatif_step_time_share(it, rows.tolist(), 0, it.iterations.size - 1)
    ratio = group_level[slowest_label] / fastest
    ev = Evidence(
        ("iteration time",),
        {
            "slow_median": group_level[slowest_label],
            "fast_median": fastest,
            "silhouette": clusters.silhouette,
            "whatif_step_time_share": share,
            "whatif_speedup": 1.0 / share,
        },
        f"{rows.size} ranks run {ratio:.1f}x slower than the fastest group (median iteration "
        f"{group_level[slowest_label]:.3g} against {fastest:.3g} {it.unit}; {len(cps)} change points in "
        f"their time); at the other ranks' median the job's iterations {_whatif_text(share)}",
    )
    return Finding(
        FindingKind.STRAGGLER,
        tuple(it.ranks[r] for r in rows),
        (),
        float(it.iterations[0]),
        float(it.iterations[-1]),
        ev,
        round(min(0.99, 0.5 + clusters.silhouette / 2), 3),
        axis="iteration",
    )
