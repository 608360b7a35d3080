"""Goodness of fit: how far a sample drawn from a fitted model lies from the trace it was fitted to.

The measure is the two-sample Kolmogorov-Smirnov distance, the largest gap
between the two empirical CDFs. Both CDFs are right-continuous step
functions that only change at observed values, so the largest gap is found
by evaluating both at every distinct value of either sample. This is exact
for discrete data too (GPUs per job, whole-second run times), where ties are
common and comparing sorted samples position by position would be wrong.
"""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError
from loadmaster.workload.fit import JobColumns
from loadmaster.workload.fitted import SampledJobs, WorkloadModel, sample_workload

FloatArray = npt.NDArray[np.float64]

KS_TARGET = 0.1
"""KS distance under which a marginal counts as fitted (the acceptance bar of the fitting work)."""


def ecdf(values: FloatArray, at: FloatArray) -> FloatArray:
    """The empirical CDF of ``values`` at points ``at``: the fraction of values <= each point."""
    ordered = np.sort(np.asarray(values, dtype=np.float64))
    return np.searchsorted(ordered, at, side="right") / ordered.size


def ks_distance(a: FloatArray, b: FloatArray) -> float:
    """Two-sample KS distance ``sup_x |F_a(x) - F_b(x)|``, in [0, 1]; NaNs are ignored.

    Raises ModelError when either sample has no finite value.
    """
    first, second = _finite(a, "a"), _finite(b, "b")
    jumps = np.union1d(first, second)
    return float(np.max(np.abs(ecdf(first, jumps) - ecdf(second, jumps))))


def qq_points(a: FloatArray, b: FloatArray, points: int = 200) -> tuple[FloatArray, FloatArray]:
    """Quantiles of ``a`` and of ``b`` at the same ``points`` probabilities, for a QQ plot."""
    first, second = _finite(a, "a"), _finite(b, "b")
    probabilities = (np.arange(points) + 0.5) / points
    return (
        np.asarray(np.quantile(first, probabilities, method="inverted_cdf"), dtype=np.float64),
        np.asarray(np.quantile(second, probabilities, method="inverted_cdf"), dtype=np.float64),
    )


@dataclass(frozen=True, eq=False)
class Marginal:
    """One quantity compared between a trace and a sample drawn from its fitted model."""

    name: str
    """What is compared, e.g. ``gpus_per_job``."""
    unit: str
    """Unit of the values ('' for counts and ratios)."""
    trace: FloatArray
    sample: FloatArray
    log_scale: bool
    """Whether plots should use log axes (heavy-tailed quantities)."""

    @cached_property
    def ks(self) -> float:
        """KS distance between the trace's and the sample's values."""
        return ks_distance(self.trace, self.sample)

    @property
    def passes(self) -> bool:
        """Whether the KS distance is within :data:`KS_TARGET`."""
        return self.ks <= KS_TARGET


def _finite(values: FloatArray, name: str) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    kept = array[np.isfinite(array)]
    if kept.size == 0:
        raise ModelError(f"ks_distance: sample {name} must hold at least one finite value, got none")
    return kept


def goodness_of_fit(
    trace: JobColumns, model: WorkloadModel, rng: np.random.Generator
) -> tuple[Marginal, ...]:
    """Draw as many jobs as the trace holds from ``model`` (at its fitted rate) and compare marginals."""
    return compare_marginals(trace, sample_workload(model, len(trace), rng))


def compare_marginals(trace: JobColumns, sample: SampledJobs) -> tuple[Marginal, ...]:
    """The marginals a fit is judged by: GPUs per job, run time and inter-arrival time, plus the
    time-limit ratio and GPU memory when both the trace and the sample have them."""
    marginals = [
        Marginal("gpus_per_job", "GPUs", trace.gpus, sample.gpus, log_scale=True),
        Marginal("duration_s", "s", trace.duration_s, sample.duration_s, log_scale=True),
        Marginal("interarrival_s", "s", _gaps(trace.submit_s), _gaps(sample.submit_s), log_scale=True),
    ]
    trace_ratio = _ratio(trace.time_limit_s, trace.duration_s)
    sample_ratio = _ratio(sample.time_limit_s, sample.duration_s)
    if trace_ratio.size and sample_ratio.size:
        marginals.append(Marginal("time_limit_ratio", "", trace_ratio, sample_ratio, log_scale=True))
    memory, sampled_memory = _finite_or_empty(trace.gpu_memory_mib), _finite_or_empty(sample.gpu_memory_mib)
    if memory.size and sampled_memory.size:
        marginals.append(Marginal("gpu_memory_mib", "MiB", memory, sampled_memory, log_scale=False))
    return tuple(marginals)


def _gaps(submit_s: FloatArray) -> FloatArray:
    ordered = np.sort(_finite_or_empty(submit_s))
    return np.asarray(np.diff(ordered), dtype=np.float64)


def _ratio(limit_s: FloatArray, duration_s: FloatArray) -> FloatArray:
    ok = np.isfinite(limit_s) & np.isfinite(duration_s) & (limit_s > 0.0) & (duration_s > 0.0)
    return np.asarray(limit_s[ok] / duration_s[ok], dtype=np.float64)


def _finite_or_empty(values: FloatArray) -> FloatArray:
    array = np.asarray(values, dtype=np.float64)
    return np.asarray(array[np.isfinite(array)], dtype=np.float64)
