"""Numeric building blocks of diagnostics, numpy only: robust statistics, runs, change points,
peer z-scores, clustering, correlation and spike-preserving downsampling.

Matrices are (rows x times) with NaN where a value is missing; every function
here tolerates NaN.
"""

from __future__ import annotations

import warnings
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

MAD_SCALE = 1.4826
"""MAD times this estimates the standard deviation of normal data."""


def nanmedian(x: FloatArray, axis: int | None = None) -> FloatArray:
    """``np.nanmedian`` without the all-NaN warning (an all-NaN slice gives NaN)."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(np.nanmedian(x, axis=axis), dtype=np.float64)


def nanmean(x: FloatArray, axis: int | None = None) -> FloatArray:
    """``np.nanmean`` without the empty-slice warning."""
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        return np.asarray(np.nanmean(x, axis=axis), dtype=np.float64)


def robust_z(values: FloatArray, floor: float) -> FloatArray:
    """Robust z-scores across rows (axis 0) per column: (x - median) / max(1.4826 MAD, floor)."""
    med = nanmedian(values, axis=0)
    mad = nanmedian(np.abs(values - med), axis=0) * MAD_SCALE
    return np.asarray((values - med) / np.maximum(np.nan_to_num(mad), floor), dtype=np.float64)


def rolling_mean(x: FloatArray, width: int) -> FloatArray:
    """Centred rolling mean along the last axis, ignoring NaN (NaN where a window has no value)."""
    width = max(1, int(width))
    if width == 1:
        return x.astype(np.float64, copy=True)
    valid = np.isfinite(x)
    filled = np.where(valid, x, 0.0)
    pad = [(0, 0)] * (x.ndim - 1) + [(1, 0)]
    csum = np.cumsum(np.pad(filled, pad), axis=-1)
    ccount = np.cumsum(np.pad(valid.astype(np.float64), pad), axis=-1)
    n = x.shape[-1]
    lo = np.clip(np.arange(n) - width // 2, 0, n)
    hi = np.clip(np.arange(n) - width // 2 + width, 0, n)
    total = csum[..., hi] - csum[..., lo]
    count = ccount[..., hi] - ccount[..., lo]
    with np.errstate(invalid="ignore", divide="ignore"):
        return np.asarray(np.where(count > 0, total / np.maximum(count, 1.0), np.nan), dtype=np.float64)


def forward_fill(x: FloatArray, limit: IntArray) -> FloatArray:
    """Fill NaN along the last axis with the last value, at most ``limit[row]`` steps after it."""
    n = x.shape[-1]
    idx = np.where(np.isfinite(x), np.arange(n), -1)
    last = np.maximum.accumulate(idx, axis=-1)
    ok = (last >= 0) & ((np.arange(n) - last) <= limit[:, None])
    rows = np.arange(x.shape[0])[:, None]
    filled = x[rows, np.maximum(last, 0)]
    return np.asarray(np.where(np.isfinite(x), x, np.where(ok, filled, np.nan)), dtype=np.float64)


def correct_counter_resets(x: FloatArray) -> FloatArray:
    """A counter matrix made monotonic per row: after a drop (device reset) the value before is added."""
    out = x.copy()
    for r in range(x.shape[0]):
        finite = np.flatnonzero(np.isfinite(x[r]))
        if finite.size < 2:
            continue
        v = x[r, finite]
        drop = v[1:] < v[:-1]
        if not drop.any():
            continue
        added = np.concatenate(([0.0], np.cumsum(np.where(drop, v[:-1], 0.0))))
        out[r, finite] = v + added
    return out


def runs(mask: BoolArray) -> list[tuple[int, int]]:
    """Runs of True in a 1-D mask as (first, last) inclusive index pairs."""
    m = np.concatenate(([False], np.asarray(mask, dtype=bool), [False]))
    edges = np.flatnonzero(m[1:] != m[:-1])
    return [(int(a), int(b) - 1) for a, b in zip(edges[::2], edges[1::2], strict=True)]


def merge_runs(spans: list[tuple[int, int]], gap: int) -> list[tuple[int, int]]:
    """Join runs separated by at most ``gap`` indices."""
    out: list[tuple[int, int]] = []
    for a, b in sorted(spans):
        if out and a - out[-1][1] - 1 <= gap:
            out[-1] = (out[-1][0], max(out[-1][1], b))
        else:
            out.append((a, b))
    return out


def refine_run(signal: FloatArray, span: tuple[int, int], level: float) -> tuple[int, int]:
    """Move a run's ends to where ``signal`` crosses half of ``level`` (a centred mean of a step
    crosses half its height at the step), searching outward and inward from the run."""
    half = level / 2.0
    above = np.nan_to_num(signal, nan=0.0) * np.sign(level) >= abs(half)
    a, b = span
    while a > 0 and above[a - 1]:
        a -= 1
    while a < b and not above[a]:
        a += 1
    while b < signal.size - 1 and above[b + 1]:
        b += 1
    while b > a and not above[b]:
        b -= 1
    return a, b


# ---------------------------------------------------------------------------- change points


def change_points(x: FloatArray, min_size: int = 5, penalty: float | None = None) -> list[int]:
    """Change points of a 1-D signal by binary segmentation on a squared-error cost.

    NaN values are replaced by the median. ``penalty`` is the cost a split
    must save (default: 3 x variance estimate x log n, the variance from the
    MAD of first differences so a step does not inflate it). Returns the
    indices where new segments start, sorted.
    """
    y = np.asarray(x, dtype=np.float64)
    if y.size < 2 * min_size:
        return []
    med = float(nanmedian(y))
    y = np.where(np.isfinite(y), y, med if np.isfinite(med) else 0.0)
    if penalty is None:
        sigma = float(np.median(np.abs(np.diff(y) - np.median(np.diff(y))))) * MAD_SCALE / np.sqrt(2.0)
        sigma = max(sigma, 1e-9 + 1e-3 * float(np.std(y)))
        penalty = 3.0 * sigma**2 * np.log(y.size)
    c1 = np.concatenate(([0.0], np.cumsum(y)))
    c2 = np.concatenate(([0.0], np.cumsum(y * y)))
    found: list[int] = []
    stack = [(0, y.size)]
    while stack:
        lo, hi = stack.pop()
        split, gain = _best_split(c1, c2, lo, hi, min_size)
        if split is not None and gain > penalty:
            found.append(split)
            stack += [(lo, split), (split, hi)]
    return sorted(found)


def _best_split(c1: FloatArray, c2: FloatArray, lo: int, hi: int, min_size: int) -> tuple[int | None, float]:
    if hi - lo < 2 * min_size:
        return None, 0.0
    cand = np.arange(lo + min_size, hi - min_size + 1)

    def cost(a: IntArray | int, b: IntArray | int) -> FloatArray:
        n = np.asarray(b) - np.asarray(a)
        s = c1[b] - c1[a]
        return np.asarray(c2[b] - c2[a] - s * s / np.maximum(n, 1), dtype=np.float64)

    total = float(cost(lo, hi))
    gains = total - cost(lo, cand) - cost(cand, hi)
    best = int(np.argmax(gains))
    return int(cand[best]), float(gains[best])


# ---------------------------------------------------------------------------- clustering


@dataclass(frozen=True)
class Clustering:
    """Rows grouped by feature vectors: a label per row, the medoid row of each cluster."""

    labels: IntArray
    medoids: IntArray
    silhouette: float

    def minority(self, max_share: float = 0.34) -> list[int]:
        """Rows of clusters holding at most ``max_share`` of all rows (the suspects)."""
        n = self.labels.size
        small = [c for c in range(self.medoids.size) if np.count_nonzero(self.labels == c) <= max_share * n]
        return [int(r) for r in np.flatnonzero(np.isin(self.labels, small))]


def standardise(features: FloatArray) -> FloatArray:
    """Columns centred on their median and scaled by 1.4826 MAD (or their std, or 1); NaN to 0."""
    med = nanmedian(features, axis=0)
    scale = nanmedian(np.abs(features - med), axis=0) * MAD_SCALE
    std = np.nanstd(np.where(np.isfinite(features), features, med), axis=0)
    scale = np.where(scale > 1e-9, scale, np.where(std > 1e-9, std, 1.0))
    return np.asarray(np.nan_to_num((features - med) / scale), dtype=np.float64)


def k_medoids(features: FloatArray, k_max: int = 4, seed: int = 0) -> Clustering:
    """Robust k-medoids (L1 distance on standardised features), k from 1..k_max by silhouette.

    Each k runs :func:`_alternating_k_medoids` (Voronoi iteration, not PAM's swap
    search). k = 1 is kept unless a split's mean silhouette exceeds 0.5: peers
    that only differ by noise stay one cluster. Distances are computed a block of
    rows at a time and never held all at once, so thousands of ranks take
    seconds and tens of MiB (``tests/unit/test_diagnostics_signals.py``).
    """
    x = standardise(features)
    n = x.shape[0]
    medoid = _Medoids(x)
    best = Clustering(np.zeros(n, dtype=np.int64), np.array([medoid(np.arange(n))]), 0.0)
    rng = np.random.default_rng(seed)
    for k in range(2, min(k_max, n - 1) + 1):
        labels, medoids = _alternating_k_medoids(medoid, k, rng)
        score = _silhouette(x, labels)
        if score > max(0.5, best.silhouette):
            best = Clustering(labels, medoids, score)
    return best


_BLOCK_CELLS = 1 << 20
"""Distances computed at once (rows x columns): 8 MiB of float64 per block."""


def _l1(x: FloatArray, rows: IntArray, cols: IntArray) -> FloatArray:
    """L1 distances between rows ``rows`` and ``cols`` of ``x``, summed feature by feature
    (a rows x cols matrix; never rows x cols x features)."""
    out = np.zeros((rows.size, cols.size))
    term = np.empty_like(out)
    for j in range(x.shape[1]):
        np.subtract(x[rows, j][:, None], x[cols, j][None, :], out=term)
        out += np.abs(term, out=term)
    return out


def _blocks(rows: IntArray, cols: int) -> list[IntArray]:
    """``rows`` cut into blocks of at most :data:`_BLOCK_CELLS` distances against ``cols`` columns."""
    step = max(1, _BLOCK_CELLS // max(cols, 1))
    return [rows[i : i + step] for i in range(0, rows.size, step)]


class _Medoids:
    """Medoids of row sets of ``x``, each computed once: alternating rounds and successive k
    meet the same clusters again (the last round of every k repeats the one before)."""

    def __init__(self, x: FloatArray) -> None:
        self.x = x
        self.known: dict[bytes, int] = {}

    def __call__(self, rows: IntArray) -> int:
        """The row of ``rows`` with the least summed distance to the others (first one on a tie)."""
        key = rows.tobytes()
        if key not in self.known:
            x = self.x
            sums = np.concatenate([_l1(x, block, rows).sum(axis=1) for block in _blocks(rows, rows.size)])
            self.known[key] = int(rows[np.argmin(sums)])
        return self.known[key]


def _alternating_k_medoids(medoid: _Medoids, k: int, rng: np.random.Generator) -> tuple[IntArray, IntArray]:
    """k-medoids by alternating (Voronoi) iteration from a farthest-first start.

    Assign each row to its nearest medoid, move each medoid to its cluster's
    medoid, repeat (at most 20 rounds) until the medoids stay: Park and Jun's
    alternating scheme, not PAM's BUILD/SWAP, which tries every (medoid,
    non-medoid) swap and costs O(k (n - k)^2) a round.
    """
    x = medoid.x
    everyone = np.arange(x.shape[0])
    medoids = [medoid(everyone)]
    while len(medoids) < k:
        d = _l1(x, everyone, np.array(medoids)).min(axis=1)
        medoids.append(int(np.argmax(d + 1e-12 * rng.random(d.size))))
    med = np.array(medoids, dtype=np.int64)
    labels = np.argmin(_l1(x, everyone, med), axis=1)
    for _ in range(20):
        new = np.array(
            [medoid(np.flatnonzero(labels == c)) if np.any(labels == c) else med[c] for c in range(k)]
        )
        labels = np.argmin(_l1(x, everyone, new), axis=1)
        if np.array_equal(new, med):
            break
        med = new
    return labels.astype(np.int64), med.astype(np.int64)


def _silhouette(x: FloatArray, labels: IntArray) -> float:
    """Mean silhouette of ``labels``: per row, (b - a) / max(a, b) with a its mean distance to its own
    cluster's other rows and b the least mean distance to another cluster; 0 for a row alone."""
    k = int(labels.max()) + 1
    if k < 2:
        return 0.0
    members = [np.flatnonzero(labels == c) for c in range(k)]
    counts = np.array([m.size for m in members], dtype=np.float64)
    sums = np.zeros((labels.size, k))
    for block in _blocks(np.arange(labels.size), labels.size):
        dist = _l1(x, block, np.arange(labels.size))
        for c, rows in enumerate(members):
            sums[block, c] = dist[:, rows].sum(axis=1)
    own = counts[labels]
    a = sums[np.arange(labels.size), labels] / np.maximum(own - 1, 1)
    means = np.where(counts > 0, sums / np.maximum(counts, 1), np.inf)
    means[np.arange(labels.size), labels] = np.inf
    b = means.min(axis=1)
    scores = np.where(own > 1, (b - a) / np.maximum(np.maximum(a, b), 1e-12), 0.0)
    return float(scores.mean())


# ---------------------------------------------------------------------------- features and correlation


def periodicity(x: FloatArray, max_lag: int = 120) -> float:
    """Height of the highest autocorrelation peak at lags 2..max_lag (0: aperiodic)."""
    y = np.nan_to_num(x - nanmean(x))
    n = y.size
    if n < 8 or not np.any(y):
        return 0.0
    spec = np.fft.rfft(y, 2 * n)
    ac = np.fft.irfft(spec * np.conj(spec))[: min(max_lag, n - 1) + 1]
    ac = ac / ac[0]
    return float(ac[2:].max()) if ac.size > 2 else 0.0


def corr(a: FloatArray, b: FloatArray) -> float:
    """Pearson correlation over samples where both are finite (0 when undefined)."""
    ok = np.isfinite(a) & np.isfinite(b)
    if ok.sum() < 3:
        return 0.0
    x, y = a[ok] - a[ok].mean(), b[ok] - b[ok].mean()
    den = float(np.sqrt((x * x).sum() * (y * y).sum()))
    return float((x * y).sum() / den) if den > 0 else 0.0


def lagged_corr(a: FloatArray, b: FloatArray, max_lag: int) -> tuple[int, float]:
    """The lag (b shifted by it, in samples) with the highest correlation of a and b, and that value."""
    best = (0, corr(a, b))
    for lag in range(-max_lag, max_lag + 1):
        if lag == 0:
            continue
        c = corr(a[lag:], b[:-lag]) if lag > 0 else corr(a[:lag], b[-lag:])
        if c > best[1] + 1e-9:
            best = (lag, c)
    return best


def envelope(x: FloatArray, width: int) -> tuple[IntArray, FloatArray, FloatArray]:
    """Min/max envelope along the last axis in buckets of ``width`` samples (spikes survive):
    bucket start indices, per-bucket min and max (NaN where a bucket is empty)."""
    width = max(1, int(width))
    n = x.shape[-1]
    buckets = -(-n // width)
    padded = np.full((*x.shape[:-1], buckets * width), np.nan)
    padded[..., :n] = x
    shaped = padded.reshape(*x.shape[:-1], buckets, width)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", RuntimeWarning)
        lo = np.nanmin(shaped, axis=-1)
        hi = np.nanmax(shaped, axis=-1)
    return np.arange(buckets, dtype=np.int64) * width, lo, hi
