"""Log-normal mixtures: fitting by expectation-maximisation, choosing the size by BIC, sampling.

A positive quantity ``x`` (a run time, a gap between submissions) follows a
log-normal mixture when ``log x`` follows a mixture of normals. Job run times
are typically a mix of crashes and debugging runs (seconds to minutes) and
training runs (hours to days): two to four log-normal components describe
them well where a single log-normal cannot.

Everything here is pure numpy and deterministic: the EM starts from the
data's quantiles, not from random draws.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError

FloatArray = npt.NDArray[np.float64]

MAX_COMPONENTS = 4
"""Most components a fit may choose: more rarely lower the BIC and make the model file hard to read."""

MIN_SIGMA = 0.05
"""Smallest component sigma (natural log): a 5% spread. Trace values are rounded (whole seconds),
and without a floor one component would collapse onto a single repeated value."""

_TOLERANCE = 1e-6
"""EM stops when the mean log-likelihood per point improves by less than this."""

_MAX_ITERATIONS = 500
_LOG_SQRT_2PI = 0.5 * math.log(2.0 * math.pi)


@dataclass(frozen=True, slots=True)
class LogNormalComponent:
    """One component: ``log x ~ Normal(mu, sigma)``, chosen with probability ``weight``."""

    weight: float
    """Probability of this component, in (0, 1]; the weights of a mixture sum to 1."""
    mu: float
    """Mean of ``log x`` (natural log; x in the quantity's unit, e.g. seconds)."""
    sigma: float
    """Standard deviation of ``log x``, > 0."""

    @property
    def median(self) -> float:
        """``exp(mu)``: the component's median, in the quantity's unit."""
        return math.exp(self.mu)


@dataclass(frozen=True, slots=True)
class LogNormalMixture:
    """A mixture of log-normal components, ordered by median."""

    components: tuple[LogNormalComponent, ...]

    def __post_init__(self) -> None:
        if not self.components:
            raise ModelError("LogNormalMixture: components must hold at least one component, got none")
        for index, c in enumerate(self.components):
            finite = all(math.isfinite(v) for v in (c.weight, c.mu, c.sigma))
            if not finite or not 0.0 < c.weight <= 1.0 or c.sigma <= 0.0:
                raise ModelError(
                    f"LogNormalMixture: components[{index}] must have weight in (0, 1], a finite mu "
                    f"and sigma > 0, got {c}"
                )
        total = math.fsum(c.weight for c in self.components)
        if abs(total - 1.0) > 1e-6:
            raise ModelError(f"LogNormalMixture: component weights must sum to 1, got {total}")

    def sample(self, n: int, rng: np.random.Generator) -> FloatArray:
        """``n`` independent draws (> 0)."""
        weights = np.array([c.weight for c in self.components])
        which = rng.choice(len(self.components), size=n, p=weights / weights.sum())
        mu = np.array([c.mu for c in self.components])[which]
        sigma = np.array([c.sigma for c in self.components])[which]
        return np.asarray(np.exp(mu + sigma * rng.standard_normal(n)), dtype=np.float64)

    def log_likelihood(self, x: FloatArray) -> float:
        """Total log-density of positive values ``x`` under the mixture."""
        y = np.log(x)
        return float(_log_density(y, *self._arrays()).sum()) - float(y.sum())

    def _arrays(self) -> tuple[FloatArray, FloatArray, FloatArray]:
        return (
            np.array([c.weight for c in self.components]),
            np.array([c.mu for c in self.components]),
            np.array([c.sigma for c in self.components]),
        )


@dataclass(frozen=True, slots=True)
class MixtureFit:
    """A fitted mixture with the numbers that chose it."""

    mixture: LogNormalMixture
    log_likelihood: float
    """Log-likelihood of the data (densities of x, not log x)."""
    bic: float
    """Bayesian information criterion: ``-2 log L + (3k - 1) log n``; lower is better."""
    iterations: int


def fit_lognormal_mixture(x: FloatArray, k: int) -> MixtureFit:
    """Fit a ``k``-component log-normal mixture to positive values ``x`` by EM.

    Starts from ``k`` equal-count slices of the sorted ``log x``; iterates
    until the mean log-likelihood gains less than 1e-6 (at most 500 steps). Sigmas never go below
    :data:`MIN_SIGMA`. Raises ModelError for ``k`` outside 1..MAX_COMPONENTS,
    non-positive or non-finite values, or fewer than ``2k`` values.
    """
    y = _logs(x, k)
    weight, mu, sigma = _initial(y, k)
    previous = -math.inf
    iterations = 0
    for iterations in range(1, _MAX_ITERATIONS + 1):  # noqa: B007 - the count is reported
        log_p = _component_log_densities(y, weight, mu, sigma)
        total = _log_sum_exp(log_p)
        mean_ll = float(total.mean())
        resp = np.exp(log_p - total[:, None])
        weight, mu, sigma = _maximise(y, resp)
        if mean_ll - previous < _TOLERANCE:
            break
        previous = mean_ll
    ll = float(_log_density(y, weight, mu, sigma).sum() - y.sum())
    order = np.argsort(mu)
    mixture = LogNormalMixture(
        tuple(
            LogNormalComponent(float(weight[i]), float(mu[i]), float(sigma[i]))
            for i in order
            if weight[i] > 0.0
        )
    )
    mixture = _renormalised(mixture)
    bic = -2.0 * ll + (3 * k - 1) * math.log(y.size)
    return MixtureFit(mixture, ll, bic, iterations)


def select_lognormal_mixture(x: FloatArray, max_components: int = MAX_COMPONENTS) -> tuple[MixtureFit, ...]:
    """Fit 1..``max_components`` components (as many as the data allow); the fits, best BIC first."""
    if not 1 <= max_components <= MAX_COMPONENTS:
        raise ModelError(f"max_components must be between 1 and {MAX_COMPONENTS}, got {max_components}")
    most = max(1, min(max_components, np.asarray(x).size // 10))
    fits = [fit_lognormal_mixture(x, k) for k in range(1, most + 1)]
    return tuple(sorted(fits, key=lambda f: f.bic))


def _logs(x: FloatArray, k: int) -> FloatArray:
    values = np.asarray(x, dtype=np.float64)
    if not 1 <= k <= MAX_COMPONENTS:
        raise ModelError(f"k must be between 1 and {MAX_COMPONENTS}, got {k}")
    if values.size < 2 * k:
        raise ModelError(f"fitting {k} component(s) needs at least {2 * k} values, got {values.size}")
    if not np.all(np.isfinite(values)) or np.any(values <= 0.0):
        raise ModelError("a log-normal mixture is fitted to finite values > 0 only")
    return np.log(values)


def _initial(y: FloatArray, k: int) -> tuple[FloatArray, FloatArray, FloatArray]:
    """Equal weights; each component the mean and spread of one equal-count slice of sorted y."""
    slices = np.array_split(np.sort(y), k)
    mu = np.array([s.mean() for s in slices])
    sigma = np.maximum(np.array([s.std() for s in slices]), MIN_SIGMA)
    return np.full(k, 1.0 / k), mu, sigma


def _maximise(y: FloatArray, resp: FloatArray) -> tuple[FloatArray, FloatArray, FloatArray]:
    mass = resp.sum(axis=0)
    safe = np.maximum(mass, 1e-300)
    mu = (resp * y[:, None]).sum(axis=0) / safe
    var = (resp * (y[:, None] - mu) ** 2).sum(axis=0) / safe
    sigma = np.maximum(np.sqrt(var), MIN_SIGMA)
    return mass / y.size, mu, sigma


def _component_log_densities(
    y: FloatArray, weight: FloatArray, mu: FloatArray, sigma: FloatArray
) -> FloatArray:
    """``log(weight_j * Normal(y_i; mu_j, sigma_j))`` for each value i and component j."""
    z = (y[:, None] - mu) / sigma
    with np.errstate(divide="ignore"):
        log_w = np.log(weight)
    return np.asarray(log_w - np.log(sigma) - _LOG_SQRT_2PI - 0.5 * z * z, dtype=np.float64)


def _log_density(y: FloatArray, weight: FloatArray, mu: FloatArray, sigma: FloatArray) -> FloatArray:
    return _log_sum_exp(_component_log_densities(y, weight, mu, sigma))


def _log_sum_exp(log_p: FloatArray) -> FloatArray:
    """``log(sum_j exp(log_p[i, j]))`` per row, without overflow."""
    top = log_p.max(axis=1)
    return np.asarray(top + np.log(np.exp(log_p - top[:, None]).sum(axis=1)), dtype=np.float64)


def _renormalised(mixture: LogNormalMixture) -> LogNormalMixture:
    """The same components with weights scaled to sum to exactly 1 (EM leaves rounding error)."""
    total = math.fsum(c.weight for c in mixture.components)
    return LogNormalMixture(
        tuple(LogNormalComponent(c.weight / total, c.mu, c.sigma) for c in mixture.components)
    )
