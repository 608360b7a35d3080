"""Gavel's heterogeneity-aware policies (OSDI'20) as linear programs solved by HiGHS.

A policy maps the active jobs to an allocation ``X`` (jobs x GPU types): the
fraction of time each job should spend on each type. Gavel
(stanford-futuredata/gavel ``scheduler/policies``, commit ``c4fa400``) states
them in cvxpy and solves them with ECOS; here each is a linear program for
``scipy.optimize.linprog(method="highs")``: HiGHS ships with scipy (no second
solver to install) and solves these sizes in milliseconds.

Both share Gavel's constraints (``Policy.get_base_constraints``): ``0 <= X``,
each job's row sums to at most 1 (one type at a time), and each type's
column, weighted by the jobs' worker counts, fits the type's GPU count.

* ``max-min-fairness`` (``MaxMinFairnessPolicyWithPerf``): maximise the least
  ``sum_j T_ij X_ij * s_i / (w_i * P_i)``, with ``T`` the steps/s, ``s`` the
  worker count, ``w`` the priority weight and ``P_i`` the job's throughput
  under an equal split of every type (``ProportionalPolicy``). With
  ``aware=False`` every throughput counts as 1 (Gavel's agnostic
  ``MaxMinFairnessPolicy``).
* ``finish-time-fairness`` (``FinishTimeFairnessPolicyWithPerf``, Themis'
  metric): minimise the largest ``rho_i = (t_i + R_i / (T_i . X_i)) / I_i``,
  with ``t_i`` the time since arrival, ``R_i`` the steps left and ``I_i`` the
  time the job would take alone on a 1/n share of the cluster (time already
  spent, counted at that share's speed, plus ``R_i`` at it). Gavel hands the
  convex form to ECOS; ``rho`` is not linear in ``X``, but for a fixed ``rho``
  the constraints ``T_i . X_i >= R_i / (rho I_i - t_i)`` are, so the least
  feasible ``rho`` is found by bisection over HiGHS feasibility problems.

The optimum of either problem is often not unique (max-min fixes only the
least-served job), and the optimum chosen changes which jobs run. ECOS, an
interior-point method, returns a point inside the optimal face; HiGHS' simplex
returns a vertex. So by default (``face="interior"``) HiGHS runs its
interior-point method without crossover, which also stops inside the face:
on Gavel's shipped traces this brings average JCT within 1% of Gavel's own
simulator, where a vertex is up to 6% off (``benchmarks/validate_gavel.py``).
``face="spread"`` instead keeps the optimum and maximises the summed
normalised throughput with a second program (no idle capacity by design).
"""

from __future__ import annotations

import warnings
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Literal, Protocol

import numpy as np
import numpy.typing as npt
from scipy.optimize import OptimizeWarning, linprog
from scipy.sparse import coo_matrix, csr_matrix, vstack

from loadmaster.errors import SimulationError

Array = npt.NDArray[np.float64]


@dataclass(frozen=True)
class AllocationInput:
    """What a policy sees at a recomputation: the active jobs (rows) and the GPU types (columns)."""

    job_ids: tuple[int, ...]
    throughputs: Array
    """Steps/s of each job on each type (jobs x types); 0 where the job cannot run."""
    scale_factors: Array
    """Workers (GPUs) of each job."""
    priority_weights: Array
    workers: Array
    """GPUs of each type."""
    steps_remaining: Array
    since_arrival_s: Array


class RoundPolicy(Protocol):
    """A Gavel policy: an allocation (jobs x types, each in [0, 1]) from the active jobs."""

    name: str
    strict: bool
    """A job whose priority on a type is 0 never takes that type's GPUs (Gavel's rule for FIFO);
    otherwise such a job still fills GPUs left over in a round."""

    def allocate(self, state: AllocationInput) -> Array: ...


def _base_constraints(state: AllocationInput, extra_vars: int) -> tuple[csr_matrix, Array]:
    """Gavel's capacity rows over ``X`` flattened row-major, then ``extra_vars`` columns of zeros."""
    m, n = state.throughputs.shape
    rows, cols, vals = [], [], []
    for j in range(n):  # sum_i s_i X_ij <= GPUs of type j
        for i in range(m):
            rows.append(j)
            cols.append(i * n + j)
            vals.append(float(state.scale_factors[i]))
    for i in range(m):  # sum_j X_ij <= 1
        for j in range(n):
            rows.append(n + i)
            cols.append(i * n + j)
            vals.append(1.0)
    matrix = coo_matrix((vals, (rows, cols)), shape=(n + m, m * n + extra_vars)).tocsr()
    return matrix, np.concatenate([state.workers.astype(np.float64), np.ones(m)])


def _solve(
    c: Array,
    a_ub: csr_matrix,
    b_ub: Array,
    bounds: list[tuple[float | None, float | None]],
    interior: bool = False,
) -> Array | None:
    """HiGHS' solution, or None when the program is infeasible (any other failure is an error).

    ``interior``: HiGHS' interior-point method without crossover (and without
    presolve, which would fix variables at bounds): a point inside the optimal
    face, as ECOS returns, instead of a vertex.
    """
    if interior:
        with warnings.catch_warnings():
            # run_crossover is a HiGHS option scipy passes on verbatim, with a warning that it does
            warnings.simplefilter("ignore", OptimizeWarning)
            result = linprog(
                c,
                A_ub=a_ub,
                b_ub=b_ub,
                bounds=bounds,
                method="highs-ipm",
                options={"presolve": False, "run_crossover": "off"},
            )
    else:
        result = linprog(c, A_ub=a_ub, b_ub=b_ub, bounds=bounds, method="highs")
    if result.status == 2:
        return None
    if result.status != 0:
        raise SimulationError(f"HiGHS could not solve a Gavel allocation: {result.message}")
    return np.asarray(result.x, dtype=np.float64)


def _rows_ge(coeffs: Array, rhs: Array, extra: Array | None) -> tuple[csr_matrix, Array]:
    """Rows ``sum_j coeffs_ij X_ij (+ extra_i * z) >= rhs_i`` written as ``<=`` rows."""
    m, n = coeffs.shape
    rows = np.repeat(np.arange(m), n)
    cols = np.arange(m * n)
    vals = -coeffs.reshape(-1)
    width = m * n
    if extra is not None:
        rows = np.concatenate([rows, np.arange(m)])
        cols = np.concatenate([cols, np.full(m, m * n)])
        vals = np.concatenate([vals, -extra])
        width += 1
    return coo_matrix((vals, (rows, cols)), shape=(m, width)).tocsr(), -rhs


def _stack(*parts: tuple[csr_matrix, Array]) -> tuple[csr_matrix, Array]:
    return vstack([p[0] for p in parts]).tocsr(), np.concatenate([p[1] for p in parts])


def _spread(state: AllocationInput, value: Array, floor: tuple[csr_matrix, Array]) -> Array:
    """Among allocations meeting ``floor``, one maximising the sum of ``value`` (jobs x types)."""
    m, n = value.shape
    base = _base_constraints(state, 0)
    a_ub, b_ub = _stack(base, floor)
    x = _solve(-value.reshape(-1), a_ub, b_ub, [(0.0, 1.0)] * (m * n))
    if x is None:  # the floor came from a solved program: only rounding can make it infeasible
        raise SimulationError("HiGHS found no allocation at the optimum it had just found")
    return x.reshape(m, n)


Face = Literal["spread", "vertex", "interior"]
"""Which of several optimal allocations a policy returns: ``spread`` (a second program
maximising the summed normalised throughput at the optimum), ``vertex`` (HiGHS' simplex
answer as is) or ``interior`` (HiGHS' interior point without crossover: inside the
optimal face, as ECOS' answer is)."""


def _normalised(state: AllocationInput) -> Array:
    """Steps/s over the job's steps/s on an equal split of every type (0 for a job that runs nowhere)."""
    proportional = state.throughputs @ (state.workers / state.workers.sum())
    safe = np.where(proportional > 0, proportional, 1.0)
    return np.where(proportional[:, None] > 0, state.throughputs / safe[:, None], 0.0)


@dataclass
class MaxMinFairness:
    """Gavel's max-min fairness over normalised throughputs (heterogeneity-aware unless ``aware=False``)."""

    aware: bool = True
    face: Face = "interior"
    """Which optimal allocation (see :data:`Face`)."""
    slack: float = 1e-6
    name: str = "max-min-fairness"
    strict: bool = False

    def allocate(self, state: AllocationInput) -> Array:
        m, n = state.throughputs.shape
        rates = state.throughputs if self.aware else np.ones((m, n))
        share = state.workers / state.workers.sum()
        proportional = rates @ share
        weight = np.where(proportional > 0, 1.0 / np.where(proportional > 0, proportional, 1.0), 0.0)
        value = rates * (weight / state.priority_weights * state.scale_factors)[:, None]
        a_base, b_base = _base_constraints(state, 1)
        ge = _rows_ge(value, np.zeros(m), -np.ones(m))  # value_i . X_i - z >= 0
        a_ub, b_ub = _stack((a_base, b_base), ge)
        c = np.zeros(m * n + 1)
        c[-1] = -1.0
        x = _solve(c, a_ub, b_ub, [(0.0, 1.0)] * (m * n) + [(0.0, None)], self.face == "interior")
        if x is None:
            raise SimulationError("max-min fairness: HiGHS reports the program infeasible (it cannot be)")
        best = float(x[-1])
        if self.face != "spread" or best <= 0:
            return np.clip(x[:-1].reshape(m, n), 0.0, 1.0)
        floor = _rows_ge(value, np.full(m, best * (1 - self.slack)), None)
        return np.clip(_spread(state, value, floor), 0.0, 1.0)


def isolated_throughputs(state: AllocationInput) -> Array:
    """Each job's steps/s on an equal 1/m share of every type (Gavel's ``IsolatedPolicy``)."""
    m, _ = state.throughputs.shape
    x = (state.workers / m)[None, :] / state.scale_factors[:, None]
    x = x / np.maximum(x.sum(axis=1), 1.0)[:, None]
    return np.asarray((state.throughputs * x).sum(axis=1), dtype=np.float64)


@dataclass
class FinishTimeFairness:
    """Gavel's finish-time fairness (Themis' rho), by bisection over HiGHS feasibility programs.

    Stateful as Gavel's policy is: the time a job has spent is counted at its
    isolated speed, from the steps it made between two recomputations.
    """

    face: Face = "interior"
    """Which allocation at the least rho found (see :data:`Face`)."""
    tolerance: float = 1e-4
    """Bisection stops when the bracket on rho is this small relative to rho."""
    name: str = "finish-time-fairness"
    strict: bool = False
    _isolated_s: dict[int, float] = field(default_factory=dict)
    _previous: dict[int, tuple[float, float]] = field(default_factory=dict)

    def allocate(self, state: AllocationInput) -> Array:
        isolated = isolated_throughputs(state)
        spent = np.empty(len(state.job_ids))
        for i, job in enumerate(state.job_ids):
            total = self._isolated_s.get(job, 0.0)
            if job in self._previous:
                before, rate = self._previous[job]
                total += (before - float(state.steps_remaining[i])) / rate
            self._isolated_s[job] = total
            spent[i] = total
        self._previous = {
            job: (float(state.steps_remaining[i]), float(isolated[i])) for i, job in enumerate(state.job_ids)
        }
        alone = spent + state.steps_remaining / isolated
        return np.clip(self._bisect(state, alone), 0.0, 1.0)

    def _feasible(
        self, state: AllocationInput, alone: Array, rho: float, interior: bool = False
    ) -> Array | None:
        m, n = state.throughputs.shape
        room = rho * alone - state.since_arrival_s
        if np.any(room <= 0):
            return None
        need = _rows_ge(state.throughputs, state.steps_remaining / room, None)
        a_ub, b_ub = _stack(_base_constraints(state, 0), need)
        x = _solve(np.zeros(m * n), a_ub, b_ub, [(0.0, 1.0)] * (m * n), interior)
        return None if x is None else x.reshape(m, n)

    def _bisect(self, state: AllocationInput, alone: Array) -> Array:
        isolated = isolated_throughputs(state)
        high = float(np.max((state.since_arrival_s + state.steps_remaining / isolated) / alone))
        low = float(np.max(state.since_arrival_s / alone))
        best = self._feasible(state, alone, high * (1 + self.tolerance))
        if best is None:
            raise SimulationError("finish-time fairness: the isolated allocation is not feasible")
        high *= 1 + self.tolerance
        while high - low > self.tolerance * high:
            middle = (low + high) / 2
            x = self._feasible(state, alone, middle)
            if x is None:
                low = middle
            else:
                high, best = middle, x
        if self.face == "vertex":
            return best
        if self.face == "interior":
            inside = self._feasible(state, alone, high, interior=True)
            return best if inside is None else inside
        room = high * alone - state.since_arrival_s
        floor = _rows_ge(state.throughputs, state.steps_remaining / room, None)
        return _spread(state, _normalised(state), floor)


@dataclass
class Fifo:
    """Gavel's heterogeneity-aware FIFO (``FIFOPolicyWithPerf``): no LP.

    Jobs in id (arrival) order each take, whole, the GPU type with the most
    steps/s among those with room for all their workers (types in name order,
    first wins a tie); the first job that fits nowhere stops the walk (no job
    passes it). A job that cannot run on the best type with room is skipped.
    Recomputed from scratch at every recomputation, as Gavel's perf mode is.
    """

    name: str = "fifo"
    strict: bool = True

    def allocate(self, state: AllocationInput) -> Array:
        m, n = state.throughputs.shape
        x = np.zeros((m, n))
        free = state.workers.astype(np.float64)
        for i in range(m):
            if not (free > 0).any():
                break
            fits = [j for j in range(n) if free[j] > 0 and free[j] >= state.scale_factors[i]]
            if not fits:
                break
            best = max(fits, key=lambda j: (state.throughputs[i, j], -j))
            if state.throughputs[i, best] > 0:
                x[i, best] = 1.0
                free[best] -= state.scale_factors[i]
        return x


ROUND_POLICIES: Mapping[str, Callable[[], RoundPolicy]] = {
    "fifo": Fifo,
    "max-min-fairness": MaxMinFairness,
    "max-min-fairness-agnostic": lambda: MaxMinFairness(aware=False, name="max-min-fairness-agnostic"),
    "finish-time-fairness": FinishTimeFairness,
}
"""The round simulator's policies by name (one literal table; a fresh, stateless-at-start policy per run)."""
