"""Synthetic workloads shaped like a research lab's job history.

The learned-scheduler account in docs/design-principles.md fits a generator to years of job
history: heavy and light users, heavy and light workloads, GPUs per job, GPU
memory, run times and arrival intervals, with a *workload ratio* (load) that
experiments vary. :func:`sample_lab_workload` draws such a trace from
:class:`LabWorkloadParams` for the pools of a cluster, and :func:`offered_load`
measures the load of any trace with the same definition the generator targets.

The trace clock starts on a Monday at 00:00 local time: ``submit_s % 86400``
is the time of day and ``submit_s // 86400 % 7`` the weekday (0 = Monday).
"""

from __future__ import annotations

import math
import string
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError
from loadmaster.model import MILLI_PER_GPU, Job, ResourceType, TaskRequest, TraceJob

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

GPU_SIZES: tuple[int, ...] = (1, 2, 4, 8, 16, 32, 64)
"""Total GPUs a generated job may ask for."""

HOUR_S = 3600.0
DAY_S = 24 * HOUR_S
WEEK_S = 7 * DAY_S
_MINUTE_S = 60.0
_WEEKEND_FIRST_DAY = 5  # Saturday, with Monday = 0


def _check(name: str, value: object, ok: bool, allowed: str) -> None:
    """Raise ModelError naming ``name``, its value and what is allowed, unless ``ok``."""
    if not ok:
        raise ModelError(f"{name} must be {allowed}, got {value!r}")


def _is_fraction(value: float, *, open_low: bool = False) -> bool:
    """True for a finite value in [0, 1] (or (0, 1] with ``open_low``)."""
    return (value > 0.0 if open_low else value >= 0.0) and value <= 1.0


@dataclass(frozen=True, slots=True)
class PoolTarget:
    """One pool of the cluster the workload is generated for.

    Jobs sent here get ``Job.pool = name`` and ``Job.resource_type =
    resource_type.name``; their sizes respect ``max_job_gpus``,
    ``capacity_gpus`` and ``gpus_per_node`` (see :func:`sample_lab_workload`).
    """

    name: str
    """Pool name, copied to ``Job.pool``."""
    resource_type: ResourceType
    """GPU model and per-GPU CPU/memory bundle of the pool's hosts."""
    capacity_gpus: int
    """GPUs in the pool; the denominator of the pool's offered load."""
    gpus_per_node: int
    """GPUs of the largest node in the pool: a task never spans nodes."""
    share: float
    """Relative fraction of jobs sent to this pool (shares are normalised over pools)."""
    max_job_gpus: int
    """Largest job (total GPUs) this pool receives; e.g. 1 for an interactive pool."""

    def __post_init__(self) -> None:
        where = f"PoolTarget {self.name!r}"
        _check(f"{where}: name", self.name, bool(self.name), "a non-empty string")
        _check(f"{where}: capacity_gpus", self.capacity_gpus, self.capacity_gpus >= 1, ">= 1")
        _check(
            f"{where}: gpus_per_node",
            self.gpus_per_node,
            1 <= self.gpus_per_node <= self.capacity_gpus,
            f"between 1 and capacity_gpus={self.capacity_gpus}",
        )
        _check(f"{where}: share", self.share, 0.0 < self.share < math.inf, "> 0 and finite")
        _check(f"{where}: max_job_gpus", self.max_job_gpus, self.max_job_gpus >= 1, ">= 1")


@dataclass(frozen=True, slots=True)
class LabWorkloadParams:
    """Every knob of the lab workload generator, with its unit and the reason for its default.

    Defaults describe a mid-sized research lab: a few dozen researchers in four
    groups, most jobs short 1-GPU debugging runs, most GPU-hours in long
    multi-GPU training runs by a handful of heavy users (the shape reported for
    Philly/Helios-style lab clusters).
    """

    users: int = 40
    """People submitting jobs; a mid-sized lab has a few dozen."""
    groups: int = 4
    """Groups (labs) "lab-a", "lab-b", ...; user i belongs to group i mod groups. At most 26."""
    heavy_user_fraction: float = 0.1
    """Fraction of users who are heavy users (at least one); 10%: a few people per lab."""
    heavy_user_job_share: float = 0.6
    """Fraction of all jobs submitted by the heavy users; with their heavier workloads
    this gives them about 80% of GPU-hours."""
    heavy_workload_prob_heavy_user: float = 0.5
    """Probability that a heavy user's job is a heavy (training) workload rather than a
    light (debugging) one; heavy users mostly run experiments at scale."""
    heavy_workload_prob_light_user: float = 0.15
    """The same probability for a light user, who mostly debugs and evaluates."""
    gpu_weights: tuple[tuple[int, float], ...] = (
        (1, 0.60),
        (2, 0.14),
        (4, 0.11),
        (8, 0.10),
        (16, 0.03),
        (32, 0.015),
        (64, 0.005),
    )
    """(total GPUs, relative weight) pairs over GPU_SIZES: most lab jobs use one GPU, a
    tenth fill one 8-GPU server and a few percent span several servers."""
    light_median_s: float = 900.0
    """Median duration (s) of a 1-GPU light workload: a 15-minute debugging run."""
    light_sigma: float = 1.2
    """Log-normal sigma of light durations (natural log); wide: crashes to hour-long tests."""
    heavy_median_s: float = 21_600.0
    """Median duration (s) of a 1-GPU heavy workload: a 6-hour training run."""
    heavy_sigma: float = 1.0
    """Log-normal sigma of heavy durations; from about 1 hour to a few days."""
    duration_size_exponent: float = 0.2
    """Medians scale by gpus ** exponent: a 64-GPU job runs about 2.3x longer, as
    large runs are the long pre-training jobs."""
    min_duration_s: float = 60.0
    """Shortest duration (s); shorter runs are clipped up (below a scheduling cycle's worth)."""
    max_duration_s: float = 7 * DAY_S
    """Longest duration (s): one week, a typical cluster's maximum time limit."""
    limit_factor_median: float = 3.0
    """Median of time_limit / duration before rounding: users ask about 3x what they use."""
    limit_factor_sigma: float = 0.6
    """Log-normal sigma of that factor: most requests lie between 1.5x and 10x."""
    limit_factor_min: float = 1.2
    """Smallest over-estimation factor (>= 1, so the limit never kills the job)."""
    limit_factor_max: float = 20.0
    """Largest over-estimation factor before rounding up to whole hours."""
    limit_hour_rounding_prob: float = 0.7
    """Probability that a requested limit of an hour or more is rounded up to whole hours
    (else whole minutes); users type "4:00:00", not "3:17:42"."""
    max_time_limit_s: float = 14 * DAY_S
    """Largest time limit (s) the cluster accepts; never below a job's duration."""
    gpu_memory_beta_light: tuple[float, float] = (1.5, 4.0)
    """Beta(a, b) of the GPU-memory fraction a light job needs: mean 27%, mostly small
    (the jobs that fit MIG slices)."""
    gpu_memory_beta_heavy: tuple[float, float] = (4.0, 2.0)
    """Beta(a, b) of the GPU-memory fraction a heavy job needs: mean 67%; training fills GPUs."""
    gpu_memory_step_mib: int = 1024
    """GPU memory requests are rounded up to this step (MiB); users ask in whole GiB."""
    daily_amplitude: float = 0.6
    """Relative amplitude of the daily arrival cycle, in [0, 1): the rate at the peak hour
    is (1 + a) / (1 - a) = 4x the rate twelve hours later."""
    peak_hour: float = 14.0
    """Hour of day (local, 0-24) with the most submissions: early afternoon."""
    weekend_factor: float = 0.4
    """Arrival rate on Saturday and Sunday relative to weekdays, in (0, 1]."""
    user_habits: bool = False
    """Give every user habits of their own (docs/workload-fitting.md, "User habits"): a personal
    offset to the log of their run times and of their over-asking factor, and a personal run-time
    spread. Off (the default, and every built-in workload but ``lab-habits``): a job's run time and
    limit are drawn independently of who submits it, and the ``user_*`` fields below are ignored."""
    user_run_time_share: float = 0.71
    """With ``user_habits``: the share of the class model's log-run-time variance (``light_sigma**2``,
    ``heavy_sigma**2``) that lies between users, a personal offset kept for every job of the user,
    rather than within a user's own jobs, in [0, 1]. The total is unchanged, so the run-time
    marginal keeps its shape. Default: calibrated so that the workload's run times split between
    and within users as on the COARE Saliksik Slurm log (``lab-habits``, docs/workload-fitting.md)."""
    user_run_time_sigma_spread: float = 0.457
    """With ``user_habits``: the standard deviation of the log of a user's own within-user
    run-time spread relative to the pooled one, >= 0 (0: every user equally erratic). Default:
    measured on the same log."""
    user_run_time_persistence: float = 0.526
    """With ``user_habits``: how much a job follows the user's previous job, in [0, 1). Users
    submit runs of similar jobs (a sweep, a debugging session): with this probability a job
    repeats the workload class, pool and GPU count of the user's previous job, and its run-time
    noise is the next step of a per-user AR(1) chain with this lag-1 correlation. 0: every job
    draws afresh around the user's offset. Both chains are stationary, so the marginals are
    unchanged. Default: calibrated like the share."""
    user_limit_factor_share: float = 0.222
    """With ``user_habits``: the share of the variance of the log over-asking factor
    (limit / run time, ``limit_factor_sigma``) that lies between users, in [0, 1]: some users
    always ask for about what they need, others for far more. Default: calibrated like the
    run-time share."""
    user_limit_factor_persistence: float = 0.484
    """With ``user_habits``: the same lag-1 correlation for the log over-asking factor, in [0, 1).
    Default: calibrated like the share."""

    def __post_init__(self) -> None:
        self._check_population()
        self._check_sizes()
        self._check_durations()
        self._check_limits()
        self._check_memory_and_cycle()
        self._check_habits()

    def _check_population(self) -> None:
        p = "LabWorkloadParams"
        _check(f"{p}.users", self.users, self.users >= 1, ">= 1")
        _check(f"{p}.groups", self.groups, 1 <= self.groups <= 26, "between 1 and 26")
        fraction = self.heavy_user_fraction
        ok = _is_fraction(fraction, open_low=True)
        _check(f"{p}.heavy_user_fraction", fraction, ok, "in (0, 1]")
        for name in (
            "heavy_user_job_share",
            "heavy_workload_prob_heavy_user",
            "heavy_workload_prob_light_user",
        ):
            value = getattr(self, name)
            _check(f"{p}.{name}", value, _is_fraction(value), "in [0, 1]")

    def _check_sizes(self) -> None:
        name = "LabWorkloadParams.gpu_weights"
        sizes = [size for size, _ in self.gpu_weights]
        weights = [weight for _, weight in self.gpu_weights]
        allowed = f"(gpus, weight) pairs with distinct gpus in {GPU_SIZES}"
        _check(name, sizes, set(sizes) <= set(GPU_SIZES) and len(set(sizes)) == len(sizes), allowed)
        valid = all(0.0 <= w < math.inf for w in weights) and sum(weights) > 0.0
        _check(name, weights, valid, "finite weights >= 0 with a positive sum")

    def _check_durations(self) -> None:
        p = "LabWorkloadParams"
        for name in ("light_median_s", "heavy_median_s", "light_sigma", "heavy_sigma"):
            value = getattr(self, name)
            _check(f"{p}.{name}", value, 0.0 < value < math.inf, "> 0 and finite")
        exponent = self.duration_size_exponent
        _check(f"{p}.duration_size_exponent", exponent, 0.0 <= exponent < math.inf, ">= 0")
        low, high = self.min_duration_s, self.max_duration_s
        _check(f"{p}.min_duration_s", low, 0.0 < low < math.inf, "> 0 and finite")
        _check(f"{p}.max_duration_s", high, low <= high < math.inf, f">= min_duration_s={low}")

    def _check_limits(self) -> None:
        p = "LabWorkloadParams"
        median, sigma = self.limit_factor_median, self.limit_factor_sigma
        _check(f"{p}.limit_factor_median", median, 1.0 <= median < math.inf, ">= 1")
        _check(f"{p}.limit_factor_sigma", sigma, 0.0 <= sigma < math.inf, ">= 0")
        low, high = self.limit_factor_min, self.limit_factor_max
        _check(f"{p}.limit_factor_min", low, 1.0 <= low < math.inf, ">= 1")
        _check(f"{p}.limit_factor_max", high, low <= high < math.inf, f">= limit_factor_min={low}")
        prob = self.limit_hour_rounding_prob
        _check(f"{p}.limit_hour_rounding_prob", prob, _is_fraction(prob), "in [0, 1]")
        cap = self.max_time_limit_s
        ok = self.max_duration_s <= cap < math.inf
        _check(f"{p}.max_time_limit_s", cap, ok, f">= max_duration_s={self.max_duration_s}")

    def _check_memory_and_cycle(self) -> None:
        p = "LabWorkloadParams"
        for name in ("gpu_memory_beta_light", "gpu_memory_beta_heavy"):
            pair = getattr(self, name)
            ok = len(pair) == 2 and all(0.0 < v < math.inf for v in pair)
            _check(f"{p}.{name}", pair, ok, "two finite numbers > 0")
        step = self.gpu_memory_step_mib
        _check(f"{p}.gpu_memory_step_mib", step, step >= 1, ">= 1")
        amp = self.daily_amplitude
        _check(f"{p}.daily_amplitude", amp, 0.0 <= amp < 1.0, "in [0, 1)")
        _check(f"{p}.peak_hour", self.peak_hour, 0.0 <= self.peak_hour < 24.0, "in [0, 24)")
        weekend = self.weekend_factor
        _check(f"{p}.weekend_factor", weekend, _is_fraction(weekend, open_low=True), "in (0, 1]")

    def _check_habits(self) -> None:
        p = "LabWorkloadParams"
        habits = self.user_habits
        _check(f"{p}.user_habits", habits, isinstance(habits, bool), "true or false")
        for name in ("user_run_time_share", "user_limit_factor_share"):
            value = getattr(self, name)
            _check(f"{p}.{name}", value, _is_fraction(value), "in [0, 1]")
        spread = self.user_run_time_sigma_spread
        _check(f"{p}.user_run_time_sigma_spread", spread, 0.0 <= spread < math.inf, ">= 0 and finite")
        for name in ("user_run_time_persistence", "user_limit_factor_persistence"):
            value = getattr(self, name)
            _check(f"{p}.{name}", value, 0.0 <= value < 1.0, "in [0, 1)")


def heavy_user_ids(params: LabWorkloadParams) -> tuple[str, ...]:
    """The ids of the heavy users: the first ``max(1, round(users * heavy_user_fraction))``."""
    return tuple(_user_id(i) for i in range(_heavy_count(params)))


def offered_load(jobs: Sequence[TraceJob], capacity_gpus: int) -> float:
    """The offered load (workload ratio) of a trace on ``capacity_gpus`` GPUs.

    ``load = sum(job.gpus * duration_s) / (capacity_gpus * span)`` where
    ``span = max(submit_s) - min(submit_s)`` (last minus first submission of a
    trace in submission order). Durations are the true run times, not the time
    limits. Load 1 means the jobs' GPU-seconds would keep every GPU busy for the
    whole submission window; above 1 the queue must grow. Raises ModelError
    when ``capacity_gpus < 1`` or the jobs do not span a positive time.
    """
    _check("offered_load: capacity_gpus", capacity_gpus, capacity_gpus >= 1, ">= 1")
    if not jobs:
        raise ModelError("offered_load: jobs must hold at least two jobs, got none")
    submits = [trace.job.submit_s for trace in jobs]
    span_s = max(submits) - min(submits)
    if span_s <= 0.0:
        raise ModelError(
            f"offered_load: jobs must be submitted at two or more distinct times "
            f"(span must be > 0), got span {span_s} s over {len(jobs)} job(s)"
        )
    gpu_s = math.fsum(trace.job.gpus * trace.duration_s for trace in jobs)
    return gpu_s / (capacity_gpus * span_s)


@dataclass(frozen=True, eq=False)
class _Draws:
    """One row per job, in draw order (not yet sorted by submission)."""

    user: IntArray
    pool: IntArray
    gpus: IntArray
    duration_s: FloatArray
    time_limit_s: FloatArray
    gpu_memory_mib: IntArray
    submit_s: FloatArray


def sample_lab_workload(
    params: LabWorkloadParams,
    pools: Sequence[PoolTarget],
    *,
    n_jobs: int,
    load: float,
    rng: np.random.Generator,
) -> list[TraceJob]:
    """Draw ``n_jobs`` jobs of a research lab, in submission order, at offered load ``load``.

    Each job picks a user (heavy users submit ``heavy_user_job_share`` of the
    jobs), a workload class (heavy training or light debugging), a pool (by
    ``share``), a size from ``gpu_weights`` restricted to the sizes the pool
    allows (at most ``max_job_gpus`` and ``capacity_gpus``; above
    ``gpus_per_node`` only whole multiples of it), a log-normal duration, an
    over-estimated time limit and its GPU memory. With ``params.user_habits``
    the run time and the over-estimation factor also depend on the user, each
    user keeping personal habits for the whole trace (see :func:`_draw_habits`).

    A job of ``g <= gpus_per_node`` GPUs is one task of ``g`` GPUs; a larger
    job is ``g / gpus_per_node`` tasks of ``gpus_per_node`` GPUs (one worker
    per node). Each task asks for its GPUs' bundle of CPU and memory.

    Arrivals per pool follow a non-homogeneous Poisson process with the daily
    and weekly cycle, drawn by time rescaling and conditioned on the pool's
    job count and span, and the pool's rate is set so that the pool's
    :func:`offered_load` on its ``capacity_gpus`` equals ``load`` (up to
    floating point). Pools whose spans differ end their streams at different
    times, so the whole trace's load on the total capacity is ``load`` only
    when the spans agree. Deterministic given ``rng``'s state; draws nothing
    from global random state. Bad arguments raise ModelError.
    """
    _check_arguments(pools, n_jobs, load)
    draws = _draw(params, pools, n_jobs, load, rng)
    return _build_jobs(params, pools, draws)


def _check_arguments(pools: Sequence[PoolTarget], n_jobs: int, load: float) -> None:
    """Reject arguments that cannot describe a workload, naming the argument."""
    ok_n = isinstance(n_jobs, int | np.integer) and not isinstance(n_jobs, bool) and n_jobs >= 1
    _check("sample_lab_workload: n_jobs", n_jobs, ok_n, "an integer >= 1")
    _check("sample_lab_workload: load", load, 0.0 < load < math.inf, "> 0 and finite")
    _check("sample_lab_workload: pools", pools, len(pools) >= 1, "at least one PoolTarget")
    names = [pool.name for pool in pools]
    _check("sample_lab_workload: pools", names, len(set(names)) == len(names), "uniquely named")


def _draw(
    params: LabWorkloadParams,
    pools: Sequence[PoolTarget],
    n_jobs: int,
    load: float,
    rng: np.random.Generator,
) -> _Draws:
    """Every random column of the workload, drawn in a fixed order from ``rng``."""
    user, heavy_user = _draw_users(params, n_jobs, rng)
    # Drawn only when on, so that a workload without habits draws exactly what it always did.
    habits = _draw_habits(params, user, rng) if params.user_habits else None
    heavy_prob = np.where(
        heavy_user, params.heavy_workload_prob_heavy_user, params.heavy_workload_prob_light_user
    )
    heavy_work = rng.random(n_jobs) < heavy_prob
    shares = np.array([pool.share for pool in pools], dtype=np.float64)
    pool = rng.choice(len(pools), size=n_jobs, p=shares / shares.sum()).astype(np.int64)
    gpus = _draw_gpus(params, pools, pool, rng)
    if habits is not None:
        heavy_work, pool, gpus = habits.repeat_shapes(heavy_work, pool, gpus)
    duration_s = _draw_durations(params, gpus, heavy_work, rng, habits)
    time_limit_s = _draw_time_limits(params, duration_s, rng, habits)
    type_memory = np.array([p.resource_type.gpu_memory_mib for p in pools], dtype=np.int64)
    gpu_memory_mib = _draw_gpu_memory(params, heavy_work, type_memory[pool], rng)
    submit_s = _draw_arrivals(params, pools, pool, gpus * duration_s, load=load, rng=rng)
    return _Draws(user, pool, gpus, duration_s, time_limit_s, gpu_memory_mib, submit_s)


def _heavy_count(params: LabWorkloadParams) -> int:
    return min(params.users, max(1, round(params.users * params.heavy_user_fraction)))


def _user_id(index: int) -> str:
    return f"u{index + 1:03d}"


def _group_name(index: int) -> str:
    return f"lab-{string.ascii_lowercase[index]}"


def _draw_users(
    params: LabWorkloadParams, n_jobs: int, rng: np.random.Generator
) -> tuple[IntArray, BoolArray]:
    """The submitting user of each job, and whether that user is a heavy user.

    Users 0..k-1 are the heavy users; they split ``heavy_user_job_share`` of
    the jobs evenly, and the light users split the rest.
    """
    heavy = _heavy_count(params)
    light = params.users - heavy
    weights = np.empty(params.users, dtype=np.float64)
    if light == 0:
        weights[:] = 1.0 / heavy
    else:
        weights[:heavy] = params.heavy_user_job_share / heavy
        weights[heavy:] = (1.0 - params.heavy_user_job_share) / light
    user = rng.choice(params.users, size=n_jobs, p=weights / weights.sum()).astype(np.int64)
    return user, user < heavy


@dataclass(frozen=True, eq=False)
class _Habits:
    """The users' habits, on the scale of standard normal draws."""

    user: IntArray
    """Each job's user, in draw order."""
    repeat: BoolArray
    """Whether each job repeats the shape of its user's previous job (never a user's first)."""
    run: _Habit
    factor: _Habit

    def repeat_shapes(
        self, heavy: BoolArray, pool: IntArray, gpus: IntArray
    ) -> tuple[BoolArray, IntArray, IntArray]:
        """The jobs' class, pool and size, with each repeating job given its user's previous
        job's (itself perhaps a repeat). A fresh draw from the marginal or a copy of the
        previous one: a chain whose stationary law is the marginal, so shares are kept."""
        heavy, pool, gpus = heavy.copy(), pool.copy(), gpus.copy()
        previous: dict[int, int] = {}
        for k, (u, again) in enumerate(zip(self.user.tolist(), self.repeat.tolist(), strict=True)):
            last = previous.get(u)
            if again and last is not None:
                heavy[k], pool[k], gpus[k] = heavy[last], pool[last], gpus[last]
            previous[u] = k
        return heavy, pool, gpus


@dataclass(frozen=True, eq=False)
class _Habit:
    """One quantity's habits: per-user offset and within-user scale, and the chain's correlation."""

    offset: FloatArray
    """Where each user's values sit (the between-user part), one per user."""
    scale: FloatArray
    """Each user's within-user spread, one per user."""
    persistence: float
    """Lag-1 correlation of the within-user part along the user's jobs."""

    def apply(self, normal: FloatArray, user: IntArray) -> FloatArray:
        """Turn the jobs' own standard normal draws into draws with this habit."""
        chained = _chain(normal, user, self.persistence)
        out: FloatArray = self.offset[user] + self.scale[user] * chained
        return out


def _draw_habits(params: LabWorkloadParams, user: IntArray, rng: np.random.Generator) -> _Habits:
    """One personal run-time and over-asking distribution per user, and which jobs repeat their
    user's previous one (see ``LabWorkloadParams.user_run_time_persistence``).

    A log value is ``sqrt(share) * A_u + sqrt(1 - share) * r_u * E``: ``A_u`` the user's normal
    offset, ``E`` the job's own part, a stationary AR(1) chain of standard normals along the
    user's jobs (see :func:`_chain`). With ``r_u = 1`` the sum is again a standard normal, so the
    class model's marginal is kept exactly and only its split between users, within users and
    along a user's jobs changes. ``r_u = exp(s B_u - s**2)`` with ``s`` the sigma spread makes some
    users more erratic than others while keeping the mean of ``r_u**2`` at 1, hence the total
    variance.
    """
    users = params.users
    run_offset = rng.standard_normal(users)
    spread_draw = rng.standard_normal(users)
    factor_offset = rng.standard_normal(users)
    repeat = rng.random(len(user)) < params.user_run_time_persistence
    spread = params.user_run_time_sigma_spread
    ratio = np.exp(spread * spread_draw - spread**2)
    run_share, factor_share = params.user_run_time_share, params.user_limit_factor_share
    run = _Habit(
        math.sqrt(run_share) * run_offset,
        math.sqrt(1.0 - run_share) * ratio,
        params.user_run_time_persistence,
    )
    factor = _Habit(
        math.sqrt(factor_share) * factor_offset,
        np.full(users, math.sqrt(1.0 - factor_share)),
        params.user_limit_factor_persistence,
    )
    return _Habits(user, repeat, run, factor)


def _chain(normal: FloatArray, user: IntArray, rho: float) -> FloatArray:
    """Per user, the AR(1) chain ``e_k = rho e_{k-1} + sqrt(1 - rho**2) z_k`` over the user's jobs
    in draw order, started at ``e_0 = z_0`` (stationary: every ``e`` is a standard normal).

    Within a pool, draw order is submission order (arrivals are sorted and handed out in draw
    order); pools share one span, so across pools it is submission order up to noise.
    """
    if rho == 0.0:
        return normal
    out = np.empty_like(normal)
    last: dict[int, float] = {}
    keep = math.sqrt(1.0 - rho * rho)
    for k, (u, z) in enumerate(zip(user.tolist(), normal.tolist(), strict=True)):
        previous = last.get(u)
        value = z if previous is None else rho * previous + keep * z
        out[k] = last[u] = value
    return out


def _allowed_sizes(pool: PoolTarget) -> list[int]:
    """Job sizes a pool can take: within its caps, and whole nodes once above one node."""
    limit = min(pool.max_job_gpus, pool.capacity_gpus)
    return [
        size
        for size in GPU_SIZES
        if size <= limit and (size <= pool.gpus_per_node or size % pool.gpus_per_node == 0)
    ]


def _draw_gpus(
    params: LabWorkloadParams,
    pools: Sequence[PoolTarget],
    pool: IntArray,
    rng: np.random.Generator,
) -> IntArray:
    """Total GPUs of each job: the lab's size mix restricted to what its pool allows.

    Restricting (renormalising) rather than clamping keeps, e.g., an 8-GPU cap
    from turning every would-be 64-GPU job into an extra 8-GPU job.
    """
    weight_of = dict(params.gpu_weights)
    gpus = np.empty(len(pool), dtype=np.int64)
    for index, target in enumerate(pools):
        sizes = _allowed_sizes(target)
        weights = np.array([weight_of.get(size, 0.0) for size in sizes], dtype=np.float64)
        if weights.sum() <= 0.0:
            raise ModelError(
                f"pool {target.name!r}: LabWorkloadParams.gpu_weights must give a positive "
                f"weight to at least one size the pool allows, {sizes}"
            )
        mask = pool == index
        gpus[mask] = rng.choice(sizes, size=int(mask.sum()), p=weights / weights.sum())
    return gpus


def _draw_durations(
    params: LabWorkloadParams,
    gpus: IntArray,
    heavy: BoolArray,
    rng: np.random.Generator,
    habits: _Habits | None = None,
) -> FloatArray:
    """Log-normal true run times (whole seconds), longer for heavy and larger jobs; with
    ``habits`` the normal draw is split into the user's part and the job's own."""
    median = np.where(heavy, params.heavy_median_s, params.light_median_s)
    median = median * gpus.astype(np.float64) ** params.duration_size_exponent
    sigma = np.where(heavy, params.heavy_sigma, params.light_sigma)
    normal = rng.standard_normal(len(gpus))
    if habits is not None:
        normal = habits.run.apply(normal, habits.user)
    duration = median * np.exp(sigma * normal)
    clipped: FloatArray = np.clip(np.rint(duration), params.min_duration_s, params.max_duration_s)
    return clipped


def _draw_time_limits(
    params: LabWorkloadParams,
    duration_s: FloatArray,
    rng: np.random.Generator,
    habits: _Habits | None = None,
) -> FloatArray:
    """Requested limits: the duration times a log-normal factor, rounded up like users do; with
    ``habits`` the factor's normal draw is split into the user's part and the job's own.

    Always >= the duration: the factor is >= 1, rounding only goes up, and the
    cluster cap is never applied below the duration.
    """
    n = len(duration_s)
    normal = rng.standard_normal(n)
    if habits is not None:
        normal = habits.factor.apply(normal, habits.user)
    factor = params.limit_factor_median * np.exp(params.limit_factor_sigma * normal)
    factor = np.clip(factor, params.limit_factor_min, params.limit_factor_max)
    raw = duration_s * factor
    # Below an hour people round to minutes ("0:20:00"), or a 5-minute run would
    # always ask for 12x what it uses.
    hourly = (rng.random(n) < params.limit_hour_rounding_prob) & (raw >= HOUR_S)
    limit = np.where(hourly, np.ceil(raw / HOUR_S) * HOUR_S, np.ceil(raw / _MINUTE_S) * _MINUTE_S)
    return np.maximum(np.minimum(limit, params.max_time_limit_s), duration_s)


def _draw_gpu_memory(
    params: LabWorkloadParams,
    heavy: BoolArray,
    type_memory_mib: IntArray,
    rng: np.random.Generator,
) -> IntArray:
    """GPU memory per GPU each job needs: a Beta fraction of its type's, in whole steps."""
    a = np.where(heavy, params.gpu_memory_beta_heavy[0], params.gpu_memory_beta_light[0])
    b = np.where(heavy, params.gpu_memory_beta_heavy[1], params.gpu_memory_beta_light[1])
    fraction = rng.beta(a, b)
    step = params.gpu_memory_step_mib
    mib = np.ceil(fraction * type_memory_mib / step).astype(np.int64) * step
    return np.minimum(np.maximum(mib, step), type_memory_mib)


def _week_intensity(params: LabWorkloadParams) -> tuple[FloatArray, FloatArray]:
    """The cumulative arrival intensity over one week, on a one-minute grid.

    Returns ``(grid_s, cumulative)``: the intensity is constant within each
    minute, and ``cumulative`` is scaled so that a week holds WEEK_S units
    (mean intensity 1), which keeps operational time close to clock time.
    """
    bins = int(WEEK_S / _MINUTE_S)
    middle_s = (np.arange(bins) + 0.5) * _MINUTE_S
    hour = (middle_s % DAY_S) / HOUR_S
    rate = 1.0 + params.daily_amplitude * np.cos(2.0 * np.pi * (hour - params.peak_hour) / 24.0)
    weekend = (middle_s // DAY_S) >= _WEEKEND_FIRST_DAY
    rate = np.where(weekend, rate * params.weekend_factor, rate)
    cumulative: FloatArray = np.concatenate(([0.0], np.cumsum(rate)))
    grid_s: FloatArray = np.arange(bins + 1, dtype=np.float64) * _MINUTE_S
    return grid_s, cumulative * (WEEK_S / cumulative[-1])


def _to_operational(t_s: FloatArray, week: tuple[FloatArray, FloatArray]) -> FloatArray:
    """Cumulative intensity at clock times ``t_s`` (>= 0)."""
    grid_s, cumulative = week
    weeks, rest = np.divmod(t_s, WEEK_S)
    return weeks * WEEK_S + np.interp(rest, grid_s, cumulative)


def _to_clock(u: FloatArray, week: tuple[FloatArray, FloatArray]) -> FloatArray:
    """Clock times at which the cumulative intensity reaches ``u`` (inverse of the above)."""
    grid_s, cumulative = week
    weeks, rest = np.divmod(u, WEEK_S)
    return weeks * WEEK_S + np.interp(rest, cumulative, grid_s)


def _draw_arrivals(
    params: LabWorkloadParams,
    pools: Sequence[PoolTarget],
    pool: IntArray,
    gpu_s: FloatArray,
    *,
    load: float,
    rng: np.random.Generator,
) -> FloatArray:
    """Submission times, per pool, so that each pool's offered load is ``load``.

    A pool whose jobs need W GPU-seconds on C GPUs must spread them over
    ``span = W / (load * C)``: that fixes its arrival rate.
    """
    week = _week_intensity(params)
    submit_s = np.empty(len(pool), dtype=np.float64)
    for index, target in enumerate(pools):
        mask = pool == index
        count = int(mask.sum())
        if count:
            span_s = float(gpu_s[mask].sum()) / (load * target.capacity_gpus)
            submit_s[mask] = _pool_arrivals(count, span_s, week, rng)
    return submit_s


def _pool_arrivals(
    count: int, span_s: float, week: tuple[FloatArray, FloatArray], rng: np.random.Generator
) -> FloatArray:
    """``count`` sorted arrivals of the cyclic Poisson process whose last minus first is ``span_s``.

    The first arrival is the process's first event at mean rate
    ``(count - 1) / span_s``; given the first and last events, the ones between
    are uniform in operational time, drawn as normalised exponential spacings.
    """
    first_u = rng.exponential(span_s / max(count - 1, 1))
    first_s = float(_to_clock(np.array([first_u]), week)[0])
    if count == 1:
        return np.array([first_s])
    ends_u = _to_operational(np.array([first_s, first_s + span_s]), week)
    steps = rng.exponential(size=count - 1)
    fraction = np.concatenate(([0.0], np.cumsum(steps) / steps.sum()))
    times = _to_clock(ends_u[0] + (ends_u[1] - ends_u[0]) * fraction, week)
    # Pin both ends exactly so that the span, hence the load, is exact.
    times = np.clip(times, first_s, first_s + span_s)
    times[0], times[-1] = first_s, first_s + span_s
    return times


def _task_shapes(pools: Sequence[PoolTarget], draws: _Draws) -> tuple[IntArray, IntArray]:
    """Tasks per job and whole GPUs per task: one task up to a node, else one per node."""
    per_node = np.array([pool.gpus_per_node for pool in pools], dtype=np.int64)[draws.pool]
    tasks = np.where(draws.gpus <= per_node, 1, draws.gpus // per_node)
    return tasks, draws.gpus // tasks


def _build_jobs(params: LabWorkloadParams, pools: Sequence[PoolTarget], draws: _Draws) -> list[TraceJob]:
    """Job objects in submission order, with ids j000001, j000002, ..."""
    users = [_user_id(i) for i in range(params.users)]
    groups = [_group_name(i % params.groups) for i in range(params.users)]
    # Identical requests are shared: they are frozen, and few distinct ones exist.
    requests: dict[tuple[int, int, int], TaskRequest] = {}
    jobs: list[TraceJob] = []
    for rank, (user, pool, n_tasks, per_task, gpu_mem, submit, limit, run) in enumerate(
        _sorted_rows(pools, draws)
    ):
        target = pools[pool]
        key = (pool, per_task, gpu_mem)
        if key not in requests:
            requests[key] = _bundle(target.resource_type, per_task, gpu_mem)
        job = Job(
            id=f"j{rank + 1:06d}",
            user=users[user],
            group=groups[user],
            submit_s=submit,
            tasks=n_tasks,
            request=requests[key],
            time_limit_s=limit,
            queue="default",
            pool=target.name,
            resource_type=target.resource_type.name,
        )
        jobs.append(TraceJob(job=job, duration_s=run))
    return jobs


_Row = tuple[int, int, int, int, int, float, float, float]


def _sorted_rows(pools: Sequence[PoolTarget], draws: _Draws) -> list[_Row]:
    """Per job, in submission order: user, pool, tasks, GPUs per task, GPU memory,
    submit, time limit and duration, as Python scalars (fast to build objects from)."""
    order = np.argsort(draws.submit_s, kind="stable")
    tasks, gpus_per_task = _task_shapes(pools, draws)
    columns = (
        draws.user,
        draws.pool,
        tasks,
        gpus_per_task,
        draws.gpu_memory_mib,
        draws.submit_s,
        draws.time_limit_s,
        draws.duration_s,
    )
    return list(zip(*(column[order].tolist() for column in columns), strict=True))


def _bundle(resource_type: ResourceType, gpus: int, gpu_memory_mib: int) -> TaskRequest:
    """A task of ``gpus`` whole GPUs with their bundled CPU and memory."""
    return TaskRequest(
        gpu_milli=gpus * MILLI_PER_GPU,
        cpu_milli=gpus * resource_type.cpu_milli_per_gpu,
        memory_mib=gpus * resource_type.memory_mib_per_gpu,
        gpu_memory_mib=gpu_memory_mib,
    )
