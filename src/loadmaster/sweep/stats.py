"""Confidence intervals over seeds and paired tests, seeded so the same results give the same report.

* :func:`bootstrap_mean`: the percentile bootstrap interval of a mean (Efron and
  Tibshirani, *An Introduction to the Bootstrap*, 1993, ch. 13).
* :func:`wilcoxon_exact`: the two-sided Wilcoxon signed-rank test with its exact
  null distribution (zero differences dropped, tied magnitudes given their mean
  rank), counted over all 2^n sign patterns by dynamic programming, so it
  holds for the handful of seeds a sweep has, where the normal approximation
  does not.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

Floats = npt.NDArray[np.float64]


def bootstrap_mean(
    values: Sequence[float], *, resamples: int, alpha: float, seed: int
) -> tuple[float, float]:
    """The ``1 - alpha`` percentile-bootstrap interval of the mean; NaN with fewer than two values."""
    x = np.asarray([v for v in values if math.isfinite(v)], dtype=np.float64)
    if len(x) < 2:
        return math.nan, math.nan
    rng = np.random.default_rng(seed)
    means = x[rng.integers(0, len(x), size=(resamples, len(x)))].mean(axis=1)
    low, high = np.quantile(means, [alpha / 2, 1 - alpha / 2])
    return float(low), float(high)


def _ranks(magnitudes: Floats) -> Floats:
    """Ranks 1..n, ties given the mean of the ranks they span."""
    order = np.argsort(magnitudes, kind="stable")
    ranks = np.empty(len(magnitudes))
    sorted_m = magnitudes[order]
    i = 0
    while i < len(sorted_m):
        j = i
        while j + 1 < len(sorted_m) and sorted_m[j + 1] == sorted_m[i]:
            j += 1
        ranks[order[i : j + 1]] = (i + j) / 2 + 1
        i = j + 1
    return ranks


def wilcoxon_exact(differences: Sequence[float]) -> float:
    """Two-sided exact p-value of the signed-rank statistic; 1.0 when no difference is non-zero."""
    d = np.asarray([x for x in differences if math.isfinite(x) and x != 0], dtype=np.float64)
    n = len(d)
    if n == 0:
        return 1.0
    doubled = np.rint(2 * _ranks(np.abs(d))).astype(np.int64)  # half ranks become integers
    total = int(doubled.sum())
    counts = np.zeros(total + 1, dtype=object)  # exact counts: 2^n overflows int64 past n = 62
    counts[0] = 1
    for r in doubled:
        shifted = np.zeros_like(counts)
        shifted[r:] = counts[: total + 1 - r]
        counts = counts + shifted
    observed = int(doubled[d > 0].sum())
    centre = total / 2
    extreme = sum(int(c) for s, c in enumerate(counts) if abs(s - centre) >= abs(observed - centre) - 1e-9)
    return float(min(1.0, extreme / 2**n))


@dataclass(frozen=True, slots=True)
class Paired:
    """B against A on the same seeds: mean difference B - A, its interval and the test."""

    seeds: int
    mean_a: float
    mean_b: float
    diff: float
    low: float
    high: float
    p_value: float
    significant: bool
    """The interval excludes 0 and the Wilcoxon p-value is below alpha."""


def paired(a: Sequence[float], b: Sequence[float], *, resamples: int, alpha: float, seed: int) -> Paired:
    """Compare paired samples (same seeds, same order); pairs with a missing value are dropped."""
    pairs = [(x, y) for x, y in zip(a, b, strict=True) if math.isfinite(x) and math.isfinite(y)]
    if not pairs:
        return Paired(0, math.nan, math.nan, math.nan, math.nan, math.nan, 1.0, False)
    xa = np.asarray([p[0] for p in pairs])
    xb = np.asarray([p[1] for p in pairs])
    d = xb - xa
    low, high = bootstrap_mean(d.tolist(), resamples=resamples, alpha=alpha, seed=seed)
    p = wilcoxon_exact(d.tolist())
    excludes = math.isfinite(low) and (low > 0 or high < 0)
    return Paired(
        len(pairs), float(xa.mean()), float(xb.mean()), float(d.mean()), low, high, p, excludes and p < alpha
    )
