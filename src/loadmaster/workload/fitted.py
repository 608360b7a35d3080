"""A workload model fitted to a job trace, and drawing jobs from it.

The model follows the generator described in docs/design-principles.md: users fall into a
heavy and a light class (the few users holding most GPU-hours, and the
rest); each class has its own share of the jobs, job shapes (GPUs per job),
run times (a log-normal mixture), time-limit over-estimation and GPU memory.
Jobs arrive as a renewal process in *operational time*: the clock is
stretched by a daily (and, on a wall clock, weekly) cycle of the arrival
rate, and the gaps between submissions in that stretched time follow a
fitted distribution with a share of exact zeros (jobs submitted in bursts).
Mapped back to the clock, arrivals bunch in busy hours and thin out at night
and at weekends, and the gaps keep the trace's burstiness, which a plain
Poisson process would lose.

:func:`sample_workload` draws jobs; ``load`` rescales the arrival rate (not
the cycle) so that the sample's offered load on a cluster hits a target.
"""

from __future__ import annotations

import dataclasses
import math
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError
from loadmaster.workload.mixture import LogNormalMixture

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]

MODEL_VERSION = 1
"""Version of the model (and of its YAML file); bumped when a field changes meaning."""

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
WEEK_S = 7 * DAY_S
HOURS_PER_WEEK = 168
MIN_MULTIPLIER = 0.01
"""Smallest rate multiplier: an hour with no submissions in the trace still gets a trickle, so that
operational time keeps increasing and maps back to the clock one to one."""

Clock = Literal["wall", "relative"]
CLOCKS: tuple[Clock, ...] = ("wall", "relative")


def _require(where: str, ok: bool, message: str) -> None:
    if not ok:
        raise ModelError(f"{where}: {message}")


@dataclass(frozen=True, slots=True)
class Atom:
    """A value that a quantity takes exactly, with its probability: a point mass."""

    value: float
    """The value (>= 0), in the quantity's unit."""
    share: float
    """Probability of exactly this value, in (0, 1)."""


@dataclass(frozen=True, slots=True)
class PositiveDistribution:
    """A quantity >= 0: point masses (``atoms``), else a log-normal mixture.

    Atoms keep what a continuous mixture cannot: jobs submitted in the same
    second as the previous one (a gap of exactly 0), or a run time that many
    jobs share exactly (a fixed benchmark, a time limit that killed them).
    Mixture draws are rounded to multiples of ``resolution`` (and at least one
    ``resolution``) when it is > 0, as the trace recorded them: a trace in
    whole seconds is sampled in whole seconds, so that discrete marginals match.
    """

    atoms: tuple[Atom, ...]
    """Point masses; their shares sum to less than 1."""
    mixture: LogNormalMixture
    """Distribution of the other values."""
    resolution: float = 0.0
    """Rounding step of values drawn from the mixture (0: not rounded)."""

    def __post_init__(self) -> None:
        for atom in self.atoms:
            ok = math.isfinite(atom.value) and atom.value >= 0.0 and 0.0 < atom.share < 1.0
            _require("PositiveDistribution.atoms", ok, f"need value >= 0 and share in (0, 1), got {atom}")
        total = math.fsum(a.share for a in self.atoms)
        _require("PositiveDistribution.atoms", total < 1.0, f"shares must sum to less than 1, got {total}")
        ok = math.isfinite(self.resolution) and self.resolution >= 0.0
        _require("PositiveDistribution.resolution", ok, "must be >= 0")

    @property
    def atom_share(self) -> float:
        """Probability of drawing one of the atoms."""
        return math.fsum(a.share for a in self.atoms)

    def sample(self, n: int, rng: np.random.Generator) -> FloatArray:
        """``n`` draws."""
        u = rng.random(n)
        values = self.mixture.sample(n, rng)
        if self.resolution > 0.0:
            values = np.maximum(np.round(values / self.resolution), 1.0) * self.resolution
        edges = np.cumsum([a.share for a in self.atoms])
        which = np.searchsorted(edges, u, side="right")
        atom_values = np.array([a.value for a in self.atoms] + [np.nan])
        return np.asarray(np.where(which < len(self.atoms), atom_values[which], values), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class Quantiles:
    """An empirical distribution kept as its quantiles at probabilities 0, 1/(m-1), ..., 1.

    Drawing picks a uniform probability and interpolates linearly between
    neighbouring quantiles; a value repeated over several quantiles keeps its
    point mass (a time limit of exactly twice the run time, say).
    """

    values: tuple[float, ...]
    """Non-decreasing quantiles, at least two."""
    resolution: float = 0.0
    """Rounding step of drawn values (0: not rounded)."""

    def __post_init__(self) -> None:
        v = np.asarray(self.values, dtype=np.float64)
        ok = v.size >= 2 and bool(np.all(np.isfinite(v))) and bool(np.all(np.diff(v) >= 0.0))
        _require(
            "Quantiles.values", ok, f"must be at least two finite non-decreasing numbers, got {self.values}"
        )
        ok = math.isfinite(self.resolution) and self.resolution >= 0.0
        _require("Quantiles.resolution", ok, "must be >= 0")

    def sample(self, n: int, rng: np.random.Generator) -> FloatArray:
        """``n`` draws."""
        v = np.asarray(self.values, dtype=np.float64)
        drawn = np.interp(rng.random(n) * (v.size - 1), np.arange(v.size), v)
        if self.resolution > 0.0:
            drawn = np.round(drawn / self.resolution) * self.resolution
        return np.asarray(drawn, dtype=np.float64)


@dataclass(frozen=True, slots=True)
class JobShape:
    """One job shape: a gang of ``tasks`` tasks of ``gpu_milli_per_task`` each, with its probability."""

    tasks: int
    """Tasks in the gang, >= 1."""
    gpu_milli_per_task: int
    """GPU per task in milli-GPU (1000 = one GPU), >= 0."""
    share: float
    """Probability of this shape within its user class, in (0, 1]."""

    @property
    def gpus(self) -> float:
        """Total GPUs of a job of this shape."""
        return self.tasks * self.gpu_milli_per_task / 1000.0


@dataclass(frozen=True, slots=True)
class UserClass:
    """Heavy or light users: how many, how much they submit, and what their jobs look like."""

    name: str
    """``heavy`` or ``light``."""
    users: int
    """Distinct users in the class; sampled jobs name users ``<name>-001`` and so on, chosen uniformly."""
    job_share: float
    """Fraction of all jobs submitted by this class, in (0, 1]."""
    gpu_hour_share: float
    """Fraction of the trace's GPU-hours this class used (informational; not used to sample)."""
    shapes: tuple[JobShape, ...]
    """Empirical distribution of job shapes; shares sum to 1."""
    duration_s: PositiveDistribution
    """Run time in seconds."""
    time_limit_ratio: Quantiles | None = None
    """Requested time limit / run time, when the trace records limits."""
    gpu_memory_mib: Quantiles | None = None
    """GPU memory per GPU in MiB, when the trace records it."""

    def __post_init__(self) -> None:
        where = f"UserClass {self.name!r}"
        _require(f"{where}: users", self.users >= 1, f"must be >= 1, got {self.users}")
        _require(
            f"{where}: job_share", 0.0 < self.job_share <= 1.0, f"must be in (0, 1], got {self.job_share}"
        )
        _require(f"{where}: shapes", bool(self.shapes), "must hold at least one shape")
        for s in self.shapes:
            ok = s.tasks >= 1 and s.gpu_milli_per_task >= 0 and 0.0 < s.share <= 1.0
            _require(
                f"{where}: shapes", ok, f"need tasks >= 1, gpu_milli_per_task >= 0, share in (0, 1]: {s}"
            )
        total = math.fsum(s.share for s in self.shapes)
        _require(f"{where}: shapes", abs(total - 1.0) <= 1e-6, f"shares must sum to 1, got {total}")


@dataclass(frozen=True, slots=True)
class ArrivalModel:
    """When jobs are submitted: a cyclic rate and the gaps between submissions in operational time.

    The rate at clock time ``t`` is proportional to ``hour_of_day[h] *
    day_of_week[d]`` for the hour ``h`` and weekday ``d`` (0 = Monday) that
    ``t`` falls in. Operational time is the integral of that rate, scaled so
    that a week of clock time is a week of operational time. Gaps between
    consecutive submissions, measured in operational time, are independent
    draws of ``gap_s``.
    """

    clock: Clock
    """``wall`` when the trace recorded real dates (weekly cycle fitted), ``relative`` when its clock
    starts at an arbitrary zero (daily cycle on that clock; ``day_of_week`` all 1)."""
    start_hour_of_week: float
    """Where in the week (hours since Monday 00:00, UTC on a wall clock) the first submission falls."""
    hour_of_day: tuple[float, ...]
    """24 rate multipliers, mean 1."""
    day_of_week: tuple[float, ...]
    """7 rate multipliers, Monday first, mean 1."""
    gap_s: PositiveDistribution
    """Gap between consecutive submissions, seconds of operational time."""
    submit_resolution_s: float = 0.0
    """Submission times are rounded to multiples of this (0: not rounded)."""

    def __post_init__(self) -> None:
        _require("ArrivalModel.clock", self.clock in CLOCKS, f"must be one of {CLOCKS}, got {self.clock!r}")
        ok = 0.0 <= self.start_hour_of_week < HOURS_PER_WEEK
        _require("ArrivalModel.start_hour_of_week", ok, f"must be in [0, 168), got {self.start_hour_of_week}")
        for name, size in (("hour_of_day", 24), ("day_of_week", 7)):
            values = getattr(self, name)
            ok = len(values) == size and all(math.isfinite(v) and v > 0.0 for v in values)
            _require(f"ArrivalModel.{name}", ok, f"must be {size} numbers > 0, got {values}")
        ok = math.isfinite(self.submit_resolution_s) and self.submit_resolution_s >= 0.0
        _require("ArrivalModel.submit_resolution_s", ok, "must be >= 0")

    def week_cumulative(self) -> FloatArray:
        """Operational time at each hour of the week (169 points, from 0 to WEEK_S)."""
        hours = np.arange(HOURS_PER_WEEK)
        rate = np.asarray(self.hour_of_day)[hours % 24] * np.asarray(self.day_of_week)[hours // 24]
        cumulative = np.concatenate(([0.0], np.cumsum(rate)))
        return np.asarray(cumulative * (WEEK_S / cumulative[-1]), dtype=np.float64)

    def to_operational(self, t_s: FloatArray) -> FloatArray:
        """Operational time at clock times ``t_s``, both in seconds since a Monday 00:00."""
        grid = np.arange(HOURS_PER_WEEK + 1) * HOUR_S
        weeks, rest = np.divmod(t_s, WEEK_S)
        return np.asarray(weeks * WEEK_S + np.interp(rest, grid, self.week_cumulative()), dtype=np.float64)

    def to_clock(self, u: FloatArray) -> FloatArray:
        """Clock times at operational times ``u``: the inverse of :meth:`to_operational`."""
        grid = np.arange(HOURS_PER_WEEK + 1) * HOUR_S
        weeks, rest = np.divmod(u, WEEK_S)
        return np.asarray(weeks * WEEK_S + np.interp(rest, self.week_cumulative(), grid), dtype=np.float64)


@dataclass(frozen=True, slots=True)
class FittedOn:
    """What the model was fitted to (informational, except ``capacity_gpus``)."""

    source: str
    """Trace file name."""
    jobs: int
    span_s: float
    """Last minus first submission."""
    capacity_gpus: int | None = None
    """GPUs of the traced cluster when the trace says (an SWF header's MaxProcs); the default
    cluster size for ``--load`` when sampling."""
    offered_load: float | None = None
    """The trace's offered load on ``capacity_gpus``."""
    heavy_gpu_hour_share: float = 0.8
    """Heavy users are the fewest top users (by GPU-hours) holding at least this share."""


@dataclass(frozen=True, slots=True)
class WorkloadModel:
    """A fitted workload: user classes and arrivals (see the module docstring)."""

    fitted_on: FittedOn
    classes: tuple[UserClass, ...]
    arrivals: ArrivalModel
    version: int = MODEL_VERSION

    def __post_init__(self) -> None:
        _require("WorkloadModel.version", self.version == MODEL_VERSION, f"must be {MODEL_VERSION}")
        _require("WorkloadModel.classes", bool(self.classes), "must hold at least one class")
        names = [c.name for c in self.classes]
        _require("WorkloadModel.classes", len(set(names)) == len(names), f"names must be distinct: {names}")
        total = math.fsum(c.job_share for c in self.classes)
        _require("WorkloadModel.classes", abs(total - 1.0) <= 1e-6, f"job shares must sum to 1, got {total}")

    @property
    def has_time_limits(self) -> bool:
        """Whether every class models time limits."""
        return all(c.time_limit_ratio is not None for c in self.classes)

    @property
    def has_gpu_memory(self) -> bool:
        """Whether every class models GPU memory."""
        return all(c.gpu_memory_mib is not None for c in self.classes)


@dataclass(frozen=True, eq=False)
class SampledJobs:
    """Jobs drawn from a model, one row per job in submission order (NaN: not modelled)."""

    user: tuple[str, ...]
    user_class: tuple[str, ...]
    submit_s: FloatArray
    duration_s: FloatArray
    time_limit_s: FloatArray
    tasks: IntArray
    gpu_milli_per_task: IntArray
    gpu_memory_mib: FloatArray

    def __len__(self) -> int:
        return int(self.submit_s.size)

    @property
    def gpus(self) -> FloatArray:
        """Total GPUs per job."""
        return np.asarray(self.tasks * self.gpu_milli_per_task / 1000.0, dtype=np.float64)


def sample_workload(
    model: WorkloadModel,
    n_jobs: int,
    rng: np.random.Generator,
    *,
    load: float | None = None,
    capacity_gpus: int | None = None,
) -> SampledJobs:
    """Draw ``n_jobs`` jobs from ``model``, the first submitted at time 0.

    Without ``load`` the arrival rate is the fitted one. With ``load`` the
    gaps in operational time are scaled by one factor so that the sample's
    offered load, ``sum(gpus * duration) / (capacity_gpus * span)``, equals
    ``load`` (up to the rounding of submission times); ``capacity_gpus``
    defaults to the model's ``fitted_on.capacity_gpus``. Deterministic given
    ``rng``'s state. Bad arguments raise ModelError.
    """
    _require("sample_workload: n_jobs", n_jobs >= 1, f"must be >= 1, got {n_jobs}")
    which = rng.choice(len(model.classes), size=n_jobs, p=_normalised([c.job_share for c in model.classes]))
    columns = _class_columns(model, which, rng)
    gaps = model.arrivals.gap_s.sample(n_jobs - 1, rng)
    scale = 1.0
    if load is not None:
        gpu_s = float(np.sum(columns.gpus * columns.duration_s))
        scale = _load_scale(model, gaps, gpu_s, load, capacity_gpus)
    return dataclasses.replace(columns, submit_s=_arrival_times(model.arrivals, gaps * scale))


def _normalised(weights: list[float]) -> FloatArray:
    array = np.asarray(weights, dtype=np.float64)
    return np.asarray(array / array.sum(), dtype=np.float64)


def _class_columns(model: WorkloadModel, which: IntArray, rng: np.random.Generator) -> SampledJobs:
    """Every per-job column but the submission time (left empty), drawn class by class in a fixed order."""
    n = which.size
    users = np.empty(n, dtype=object)
    tasks = np.zeros(n, dtype=np.int64)
    milli = np.zeros(n, dtype=np.int64)
    duration = np.zeros(n)
    limit = np.full(n, np.nan)
    memory = np.full(n, np.nan)
    for index, cls in enumerate(model.classes):
        mask = which == index
        count = int(mask.sum())
        user_index = rng.integers(0, cls.users, size=count)
        users[mask] = [f"{cls.name}-{i + 1:03d}" for i in user_index.tolist()]
        shape = rng.choice(len(cls.shapes), size=count, p=_normalised([s.share for s in cls.shapes]))
        tasks[mask] = np.array([s.tasks for s in cls.shapes], dtype=np.int64)[shape]
        milli[mask] = np.array([s.gpu_milli_per_task for s in cls.shapes], dtype=np.int64)[shape]
        duration[mask] = cls.duration_s.sample(count, rng)
        if cls.time_limit_ratio is not None:
            limit[mask] = np.round(duration[mask] * cls.time_limit_ratio.sample(count, rng))
        if cls.gpu_memory_mib is not None:
            memory[mask] = cls.gpu_memory_mib.sample(count, rng)
    names = tuple(model.classes[i].name for i in which.tolist())
    empty = np.zeros(0)
    return SampledJobs(tuple(users.tolist()), names, empty, duration, limit, tasks, milli, memory)


def _load_scale(
    model: WorkloadModel, gaps: FloatArray, gpu_s: float, load: float, capacity_gpus: int | None
) -> float:
    """The factor on operational gaps that makes the clock span ``gpu_s / (load * capacity)``."""
    capacity = capacity_gpus if capacity_gpus is not None else model.fitted_on.capacity_gpus
    _require("sample_workload: load", math.isfinite(load) and load > 0.0, f"must be > 0, got {load}")
    if capacity is None or capacity < 1:
        raise ModelError(
            f"sample_workload: capacity_gpus must be >= 1 to target a load (the model does not say "
            f"the cluster's size; give --gpus), got {capacity}"
        )
    total = float(gaps.sum())
    _require("sample_workload: load", total > 0.0 and gpu_s > 0.0, "needs two or more jobs using GPU time")
    span_s = gpu_s / (load * capacity)
    return float(_operational(model.arrivals, np.array([span_s]))[0]) / total


def _operational(arrivals: ArrivalModel, t_s: FloatArray) -> FloatArray:
    """Operational time elapsed from sample time 0 to sample clock times ``t_s``."""
    start = np.array([arrivals.start_hour_of_week * HOUR_S])
    return np.asarray(arrivals.to_operational(t_s + start[0]) - arrivals.to_operational(start)[0])


def _arrival_times(arrivals: ArrivalModel, gaps: FloatArray) -> FloatArray:
    """Sample clock times of submissions whose operational gaps are ``gaps``; the first at 0."""
    start = np.array([arrivals.start_hour_of_week * HOUR_S])
    u = arrivals.to_operational(start)[0] + np.concatenate(([0.0], np.cumsum(gaps)))
    clock = arrivals.to_clock(u) - start[0]
    clock = np.maximum(clock - clock[0], 0.0)
    step = arrivals.submit_resolution_s
    if step > 0.0:
        clock = np.round(clock / step) * step
    return np.asarray(clock, dtype=np.float64)
