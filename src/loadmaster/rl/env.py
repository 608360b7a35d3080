"""SchedulingEnv: the simulator as a Gymnasium environment, one decision per step.

Importing this module registers nothing; :func:`register_env` adds
``loadmaster/Scheduling-v0`` to Gymnasium's registry when called (the
explicit registration of docs/design-principles.md, habit 6).
"""

from __future__ import annotations

import dataclasses
import math
from collections.abc import Hashable
from dataclasses import dataclass
from typing import Any

import gymnasium as gym
import numpy as np
import numpy.typing as npt
from gymnasium import spaces

from loadmaster.config import load_cluster, load_workload
from loadmaster.errors import ConfigError
from loadmaster.model import ClusterSnapshot, Job, TraceJob
from loadmaster.rl.family import FamilyPoint, family
from loadmaster.scheduling import Bind, CycleResult, PluginSpec, Scheduler, build_profile
from loadmaster.scheduling.observe import (
    FEATURE_CAP,
    GLOBAL_FEATURES,
    JOB_FEATURES,
    ObservationSpec,
    global_features,
    job_features,
    node_features,
)
from loadmaster.sim import SimOptions, Simulator

ENV_ID = "loadmaster/Scheduling-v0"
"""The id :func:`register_env` registers."""

__all__ = [
    "ENV_ID",
    "FEATURE_CAP",
    "GLOBAL_FEATURES",
    "JOB_FEATURES",
    "EnvConfig",
    "SchedulingEnv",
    "register_env",
]

Obs = dict[str, Any]
"""An observation: float32 arrays under ``nodes``, ``jobs`` and ``global`` (Dict values are Any)."""


def register_env() -> None:
    """Register ``loadmaster/Scheduling-v0`` with Gymnasium (idempotent).

    Then ``gymnasium.make(ENV_ID, config=EnvConfig(...))`` builds a :class:`SchedulingEnv`.
    """
    if ENV_ID not in gym.registry:
        gym.register(id=ENV_ID, entry_point="loadmaster.rl.env:SchedulingEnv")


@dataclass(frozen=True, slots=True)
class EnvConfig:
    """What an episode is made of, what the agent sees and how it is rewarded."""

    cluster: str = "lab"
    """Built-in cluster name or cluster file."""
    workload: str = "lab"
    """Built-in workload name or workload file; each episode samples it afresh with a new seed."""
    jobs: int = 64
    """Jobs per episode (N)."""
    load: float = 0.9
    """Offered load of the sampled workload (the RL scheduler pays off at high load)."""
    window: int = 64
    """Waiting jobs the agent chooses among (K), first in submission order."""
    horizon_steps: int = 8
    """Future points of the node features (T)."""
    horizon_step_s: float = 1800.0
    """Spacing of those points; 8 x 30 min looks four hours ahead."""
    placement: str = "binpack"
    """Score plugin that places the chosen job (any registered score plugin: binpack, spread, first-fit)."""
    bound_s: float = 10.0
    """Bound of the bounded slowdown, as in :func:`loadmaster.metrics.bounded_slowdown`."""
    fairness_weight: float = 0.0
    """Weight of the longest-wait penalty (0: off); see the reward in :class:`SchedulingEnv`."""
    wait_scale_s: float = 3600.0
    """Scale of waits in observations and in the fairness term (one hour)."""
    allow_wait: bool = True
    """Offer the wait action while some job can start (False: the agent must start one, as the
    ``learned`` plugin with lax allocation does; wait stays valid when nothing fits)."""
    family: str | None = None
    """A training family (:mod:`loadmaster.rl.family`): each episode draws its load and workload
    parameters from it, and ``workload`` and ``load`` are not used."""

    def __post_init__(self) -> None:
        positive = {
            "jobs": self.jobs,
            "load": self.load,
            "window": self.window,
            "horizon_steps": self.horizon_steps,
            "horizon_step_s": self.horizon_step_s,
            "bound_s": self.bound_s,
            "wait_scale_s": self.wait_scale_s,
        }
        for name, value in positive.items():
            if not value > 0:
                raise ConfigError("EnvConfig", name, f"must be > 0, got {value}")
        if not self.fairness_weight >= 0:
            raise ConfigError("EnvConfig", "fairness_weight", f"must be >= 0, got {self.fairness_weight}")
        if self.family is not None:
            family(self.family)

    @property
    def observation(self) -> ObservationSpec:
        """The feature settings the ``learned`` plugin must use to see what this env shows."""
        return ObservationSpec(self.window, self.horizon_steps, self.horizon_step_s, self.wait_scale_s)


class _AgentScheduler(Scheduler):
    """A scheduler whose cycle binds only the job the agent chose (or nothing), placed by the profile."""

    def __init__(self, placement: str) -> None:
        plugins = [PluginSpec("fifo", {}), PluginSpec("gang", {}), PluginSpec(placement, {})]
        super().__init__(
            build_profile(f"rl-{placement}", ["allocate"], plugins, source="EnvConfig.placement")
        )
        self.choice: str | None = None

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        choice, self.choice = self.choice, None
        if choice is None:
            return CycleResult(decisions=())
        return self.place(snapshot, choice, now)

    def place(self, snapshot: ClusterSnapshot, job_id: str, now: float) -> CycleResult:
        """The cycle of a snapshot whose only pending job is ``job_id`` (placement is deterministic)."""
        only = [p for p in snapshot.pending if p.job.id == job_id]
        alone = dataclasses.replace(snapshot, pending=only, pending_queues=None)
        return super().cycle(alone, now, np.random.default_rng(0))


def _shape(job: Job) -> Hashable:
    return (
        job.request,
        job.tasks,
        job.min_available,
        job.pool,
        job.resource_type,
        *job.node_selector.items(),
    )


class SchedulingEnv(gym.Env[Obs, np.int64]):
    """Pick which waiting job starts next on a simulated GPU cluster.

    **Episode.** ``reset(seed)`` samples ``config.jobs`` jobs of ``config.workload``
    at ``config.load`` (workload seed drawn from the env's seeded generator) and
    runs the simulator to the first decision point. A *decision point* is a
    moment when at least one job of the window fits the free resources now; the
    env advances simulated time on its own past moments where none does. The
    episode terminates when no event is left (every job that can run has run;
    a job that can never fit the cluster is rejected at arrival, as in
    :func:`loadmaster.sim.simulate`). ``truncated`` is always False.

    **Action space.** ``Discrete(K + 1)``, K = ``config.window``. Action ``i < K``
    starts the i-th waiting job in submission order; the ``config.placement``
    plugin (gang + bin packing by default) places it, and the agent decides
    again at the same instant. Action ``K`` waits: time advances to the next
    event (an arrival or a completion) and on to the next decision point.

    **Action mask.** ``info["action_mask"]`` and :meth:`action_masks` (bool,
    length K + 1): slot ``i`` is valid iff it holds a job that the placement
    plugin can start now; wait is valid iff an event is still due (with none
    left, waiting could change nothing) and, with ``config.allow_wait`` False,
    only while no slot is valid. At a decision point at least one
    action is valid. An invalid action is not an error: it is carried out as
    wait if wait is valid, else as the first valid slot, and
    ``info["invalid_action"]`` is True.

    **Observation** (a ``Dict`` of float32 boxes; n nodes, K, T):

    ============ ============ ==============================================================
    key          shape        contents
    ============ ============ ==============================================================
    ``nodes``    (n, T + 1)   free GPUs / GPUs of each node now, then at now + h x
                              ``horizon_step_s`` (h = 1..T) once running jobs reach their
                              time limits (what a scheduler can know); in [0, 1]
    ``jobs``     (K, 6)       per window slot, zero-padded: ``present`` (1 if a job),
                              ``gpus`` (GPUs / largest node's GPUs), ``time_limit`` (hours),
                              ``wait`` (wait so far / ``wait_scale_s``), ``user_usage`` (its
                              user's share of decayed past GPU use, in [0, 1]), ``fits``
                              (1 if it can start now: the mask)
    ``global``   (5,)         ``queue_length`` (waiting jobs / K, may exceed 1),
                              ``allocation`` (busy GPU fraction), ``day_sin``, ``day_cos``
                              (time of day), ``jobs_left`` (jobs not yet started / N)
    ============ ============ ==============================================================

    **Reward.** Each job in the system (waiting or running) accrues bounded
    slowdown at rate ``1 / max(duration, bound_s)`` per second; a step's reward
    is minus what all jobs accrued during the simulated time it advanced,
    divided by N. Starting a job without advancing time gives 0. Over an
    episode the rewards sum to ``-mean((wait + run) / max(run, bound_s))``:
    minus the mean bounded slowdown for every job that runs at least
    ``bound_s`` (a shorter job counts its unclipped ratio). The running part is
    the same under every policy. With ``fairness_weight`` w > 0, each step
    also adds ``-w * integral of (longest current wait / wait_scale_s) dt /
    wait_scale_s``: a penalty on the maximum wait, growing with how long the
    oldest job has waited. Features without a natural bound are clipped to
    ``FEATURE_CAP`` (1000).

    **Determinism.** Same ``reset`` seed and same actions: same observations,
    rewards and schedule. The env draws randomness only from ``np_random``.
    """

    metadata: dict[str, Any] = {"render_modes": []}  # noqa: RUF012 (Gymnasium's class attribute)

    def __init__(self, config: EnvConfig | None = None) -> None:
        self.config = config or EnvConfig()
        self.cluster = load_cluster(self.config.cluster)
        nodes = self.cluster.nodes
        k, t = self.config.window, self.config.horizon_steps
        self.action_space = spaces.Discrete(k + 1)
        self.observation_space = spaces.Dict(
            {
                "nodes": spaces.Box(0.0, 1.0, (len(nodes), t + 1), np.float32),
                "jobs": spaces.Box(0.0, FEATURE_CAP, (k, len(JOB_FEATURES)), np.float32),
                "global": spaces.Box(-1.0, FEATURE_CAP, (len(GLOBAL_FEATURES),), np.float32),
            }
        )
        self.traces: list[TraceJob] = []
        self.load = self.config.load
        """The offered load of the current episode (drawn from ``config.family`` if one is set)."""
        self.point: FamilyPoint | None = None
        """The current episode's draw of ``config.family`` (None without a family)."""
        self.starts: list[tuple[str, float]] = []
        """(job id, start time) of the jobs started in the episode, in the order the agent started them."""
        self._sim: Simulator | None = None
        self._scheduler = _AgentScheduler(self.config.placement)
        self._duration: dict[str, float] = {}
        self._mask = np.zeros(k + 1, dtype=bool)

    def reset(
        self, *, seed: int | None = None, options: dict[str, Any] | None = None
    ) -> tuple[Obs, dict[str, Any]]:
        super().reset(seed=seed)
        workload_seed = int(self.np_random.integers(2**31 - 1))
        if self.config.family is None:
            name, load, params = self.config.workload, self.config.load, None
        else:
            drawn = family(self.config.family)
            self.point = drawn.draw(self.np_random)
            name, load, params = drawn.workload, self.point.load, self.point.params()
        self.load = load
        workload = load_workload(
            name, self.cluster, jobs=self.config.jobs, load=load, seed=workload_seed, params=params
        )
        self.traces = workload.jobs
        self._duration = {t.job.id: t.duration_s for t in self.traces}
        self._scheduler = _AgentScheduler(self.config.placement)
        self._sim = Simulator(self.cluster.nodes, self._scheduler, self.traces, SimOptions(seed=0))
        self._sim.start()
        self.starts = []
        self._advance()
        return self._observe(), self._info(invalid=False)

    def action_masks(self) -> npt.NDArray[np.bool_]:
        """Which actions are valid now (a copy; see the class docstring)."""
        return self._mask.copy()

    def step(self, action: np.int64 | int) -> tuple[Obs, float, bool, bool, dict[str, Any]]:
        sim = self._require_sim()
        chosen = int(action)
        invalid = not (0 <= chosen < len(self._mask) and self._mask[chosen])
        if invalid:
            chosen = self.config.window if self._mask[-1] else int(np.argmax(self._mask))
        reward = 0.0
        if chosen == self.config.window:
            if sim.events:
                reward += self._step_sim()
        else:
            job_id = self._window()[chosen].job.id
            self._scheduler.choice = job_id
            sim.cycle_again()
            self.starts.append((job_id, sim.now))
        reward += self._advance()
        terminated = not sim.events and not sim.cluster.pending
        return self._observe(), reward, terminated, False, self._info(invalid)

    def _require_sim(self) -> Simulator:
        if self._sim is None:
            raise gym.error.ResetNeeded("call reset() before step()")
        return self._sim

    def _window(self) -> list[Any]:
        sim = self._require_sim()
        return list(sim.cluster.pending.values())[: self.config.window]

    def _advance(self) -> float:
        """Run the simulator to the next decision point (or the end); return the reward accrued."""
        sim = self._require_sim()
        reward = 0.0
        while True:
            self._mask = self._compute_mask()
            if self._mask[:-1].any() or not sim.events:
                return reward
            reward += self._step_sim()

    def _step_sim(self) -> float:
        """One simulator step with no job chosen; return the reward of the time it advanced."""
        sim = self._require_sim()
        t1 = sim.events.next_time()
        reward = 0.0
        if not math.isnan(sim.now) and t1 > sim.now:
            reward = self._accrued(sim.now, t1)
        sim.step()
        return reward

    def _accrued(self, t0: float, t1: float) -> float:
        sim = self._require_sim()
        cfg = self.config
        dt = t1 - t0
        in_system = [*sim.cluster.pending, *sim.cluster.running]
        rate = sum(1.0 / max(self._duration[j], cfg.bound_s) for j in in_system)
        reward = -rate * dt / len(self.traces)
        if cfg.fairness_weight > 0 and sim.cluster.pending:
            oldest = min(p.job.submit_s for p in sim.cluster.pending.values())
            area = (t0 - oldest + dt / 2) * dt  # the longest wait grows linearly over [t0, t1]
            reward -= cfg.fairness_weight * area / cfg.wait_scale_s**2
        return reward

    def _compute_mask(self) -> npt.NDArray[np.bool_]:
        sim = self._require_sim()
        mask = np.zeros(self.config.window + 1, dtype=bool)
        mask[-1] = bool(sim.events)
        if math.isnan(sim.now):
            return mask
        snapshot = sim.cluster.snapshot(sim.now)
        fits: dict[Hashable, bool] = {}
        for i, pending in enumerate(self._window()):
            shape = _shape(pending.job)
            if shape not in fits:
                result = self._scheduler.place(snapshot, pending.job.id, sim.now)
                fits[shape] = any(isinstance(d, Bind) and d.starts for d in result.decisions)
            mask[i] = fits[shape]
        if not self.config.allow_wait and mask[:-1].any():
            mask[-1] = False
        return mask

    def _info(self, invalid: bool) -> dict[str, Any]:
        return {"action_mask": self._mask.copy(), "invalid_action": invalid}

    def _observe(self) -> Obs:
        sim = self._require_sim()
        now = 0.0 if math.isnan(sim.now) else sim.now
        snapshot = sim.cluster.snapshot(now)
        spec = self.config.observation
        window = [p.job for p in self._window()]
        unstarted = len(self.traces) - int(np.sum(~np.isnan(sim.log.start)))
        return {
            "nodes": node_features(snapshot, now, spec),
            "jobs": job_features(
                window, snapshot, now, spec, fits=self._mask[: len(window)], rows=spec.window
            ),
            "global": global_features(snapshot, now, spec, max(unstarted, 0) / len(self.traces)),
        }
