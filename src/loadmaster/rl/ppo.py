"""PPO training of the learned scheduler in the simulator, on the CPU.

One update = collect ``steps`` decisions from the environments (one per
training load, episodes back to back), compute advantages with GAE, then
``epochs`` passes of clipped-surrogate minibatch updates. Decisions with a
single valid action teach nothing and are not stored; their reward goes to
the previous stored decision. An optional warm start first imitates a
heuristic (behaviour cloning), so PPO refines a sensible policy instead of
starting from a random one, which it would mostly spend its budget escaping.

Everything is seeded: torch, the environments and the minibatch shuffles
draw from ``TrainConfig.seed``; torch runs on one thread, so the same seed
gives the same checkpoint on the same machine. The environments step in
rounds (each picks its action from its own observation, then all step), so
with ``ray`` each lives in its own Ray actor and they step in parallel, with
the same decisions, in the same order, as in this process.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable
from dataclasses import dataclass, field
from typing import Literal

import numpy as np
import numpy.typing as npt
import torch

from loadmaster.errors import ConfigError
from loadmaster.parallel import ActorGroup, LocalActors, RayActors
from loadmaster.rl.agent import Agent, Batch, prepare
from loadmaster.rl.env import EnvConfig, SchedulingEnv
from loadmaster.rl.family import family, validation_seed

Teacher = Literal["none", "sjf", "fifo"]


@dataclass(frozen=True, slots=True)
class TrainConfig:
    """What to train on and PPO's settings (defaults: the shipped ``lab`` checkpoint)."""

    env: EnvConfig = field(default_factory=lambda: EnvConfig(jobs=256, allow_wait=False))
    """Episode settings; ``env.load`` is replaced by each of ``loads``."""
    loads: tuple[float, ...] = (0.9, 1.1)
    """One environment per load; updates draw decisions from all of them (not used with ``family``)."""
    family: str | None = None
    """A training family (:mod:`loadmaster.rl.family`): ``FAMILY_ENVIRONMENTS`` environments whose
    every episode draws its own load and workload parameters, instead of one per load."""
    validation: int = 0
    """Validation windows played greedily at each check (0: none, the last update is the policy);
    with them the policy is the check with the lowest mean bounded slowdown (the warm start counts
    as update 0). With a family they draw from its validation stream, else from the training loads
    in turn, with seeds of a stream of their own."""
    validate_every: int = 1
    """Updates between validation checks (the last update is always checked)."""
    seed: int = 0
    updates: int = 60
    steps: int = 2048
    """Stored decisions per update (over all environments)."""
    epochs: int = 4
    minibatch: int = 256
    lr: float = 3e-4
    gamma: float = 1.0
    """Discount per decision: 1, since the episode's rewards sum to minus its mean bounded slowdown."""
    gae_lambda: float = 0.95
    clip: float = 0.2
    entropy: float = 0.003
    value_coef: float = 0.5
    max_grad_norm: float = 0.5
    hidden: int = 64
    warm_start: Teacher = "sjf"
    """Heuristic imitated before PPO (none: start from random weights)."""
    warm_steps: int = 8192
    """Decisions of behaviour cloning in the warm start."""

    def __post_init__(self) -> None:
        for name in ("updates", "steps", "epochs", "minibatch", "hidden", "validate_every"):
            value = getattr(self, name)
            if value < 1:
                raise ConfigError("TrainConfig", name, f"must be >= 1, got {value}")
        if not self.loads or any(not load > 0 for load in self.loads):
            raise ConfigError("TrainConfig", "loads", f"need one or more loads > 0, got {self.loads}")
        if self.validation < 0:
            raise ConfigError("TrainConfig", "validation", f"must be >= 0, got {self.validation}")
        if self.family is not None:
            family(self.family)
        if self.warm_start not in ("none", "sjf", "fifo"):
            raise ConfigError("TrainConfig", "warm_start", f"one of none, sjf, fifo; got {self.warm_start!r}")


@dataclass(frozen=True, slots=True)
class UpdateLog:
    """One row of the learning curve."""

    update: int
    decisions: int
    episodes: int
    mean_bsld: float
    """Mean bounded slowdown of the episodes that ended during the update (NaN if none)."""
    mean_bsld_by_load: dict[float, float]
    policy_loss: float
    value_loss: float
    entropy: float
    approx_kl: float
    elapsed_s: float
    validation_bsld: float = float("nan")
    """Mean bounded slowdown of the greedy policy on the validation windows (NaN: not checked)."""


@dataclass
class _Rollout:
    jobs: list[npt.NDArray[np.float32]] = field(default_factory=list)
    present: list[npt.NDArray[np.float32]] = field(default_factory=list)
    context: list[npt.NDArray[np.float32]] = field(default_factory=list)
    mask: list[npt.NDArray[np.bool_]] = field(default_factory=list)
    action: list[int] = field(default_factory=list)
    logp: list[float] = field(default_factory=list)
    value: list[float] = field(default_factory=list)
    reward: list[float] = field(default_factory=list)
    done: list[bool] = field(default_factory=list)
    runner: list[int] = field(default_factory=list)
    bootstrap: dict[int, float] = field(default_factory=dict)
    """Value of each runner's state after its last stored decision, when its episode goes on."""

    def record(self, runner: _Runner | _View) -> Batch:
        """Store the runner's current observation; return it as a batch of one."""
        one = _batch_of_one(runner)
        self.jobs.append(one.jobs[0].numpy())
        self.present.append(one.present[0].numpy())
        self.context.append(one.context[0].numpy())
        self.mask.append(one.mask[0].numpy())
        return one

    def batch(self) -> Batch:
        """Every stored observation, stacked once (minibatches index into it)."""
        return Batch(
            jobs=torch.from_numpy(np.stack(self.jobs)),
            present=torch.from_numpy(np.stack(self.present)),
            mask=torch.from_numpy(np.stack(self.mask)),
            context=torch.from_numpy(np.stack(self.context)),
        )


def _batch_of_one(runner: _Runner | _View) -> Batch:
    jobs, present, context = prepare(runner.obs)
    return Batch(
        jobs=torch.from_numpy(jobs[None]),
        present=torch.from_numpy(present[None]),
        mask=torch.from_numpy(runner.mask[None].copy()),
        context=torch.from_numpy(context[None]),
    )


def _rows(batch: Batch, index: torch.Tensor) -> Batch:
    return Batch(batch.jobs[index], batch.present[index], batch.mask[index], batch.context[index])


class _Runner:
    """One environment playing episodes back to back, remembering its episode's reward.

    In the trainer it is a view: the environment itself lives in a :class:`_RunnerActor` (here
    or on Ray), and :meth:`apply` copies in what a step returned."""

    def __init__(self, config: EnvConfig, seed: int) -> None:
        self.env = SchedulingEnv(config)
        self.load = config.load
        self.obs, info = self.env.reset(seed=seed)
        self.mask: npt.NDArray[np.bool_] = info["action_mask"]
        self.episode_reward = 0.0
        self.finished: list[float] = []

    def step(self, action: int) -> tuple[float, bool]:
        obs, reward, terminated, truncated, info = self.env.step(action)
        self.episode_reward += float(reward)
        done = terminated or truncated
        if done:
            self.finished.append(-self.episode_reward)
            self.episode_reward = 0.0
            obs, info = self.env.reset()
        self.obs, self.mask = obs, info["action_mask"]
        return float(reward), done


Stepped = tuple[float, bool, dict[str, npt.NDArray[np.float32]], npt.NDArray[np.bool_], float | None]
"""What a step returns to the trainer: reward, done, the next observation and mask, and the
episode's mean bounded slowdown when it ended."""


class _RunnerActor:
    """A :class:`_Runner` where its environment lives (this process or a Ray worker)."""

    def __init__(self, config: EnvConfig, seed: int) -> None:
        self.runner = _Runner(config, seed)

    def first(self, _: object) -> tuple[dict[str, npt.NDArray[np.float32]], npt.NDArray[np.bool_]]:
        return self.runner.obs, self.runner.mask

    def step(self, action: int) -> Stepped:
        before = len(self.runner.finished)
        reward, done = self.runner.step(action)
        ended = self.runner.finished[-1] if len(self.runner.finished) > before else None
        self.runner.finished.clear()
        return reward, done, self.runner.obs, self.runner.mask, ended


@dataclass
class _View:
    """The trainer's copy of one environment's state (the environment itself is in an actor)."""

    load: float
    obs: dict[str, npt.NDArray[np.float32]]
    mask: npt.NDArray[np.bool_]
    finished: list[float] = field(default_factory=list)


class _Fleet:
    """The training environments, stepped a round at a time."""

    def __init__(self, configs: list[EnvConfig], seeds: list[int], ray: str | None) -> None:
        inits = list(zip(configs, seeds, strict=True))
        self.group: ActorGroup = (
            RayActors(_RunnerActor, inits, ray) if ray else LocalActors(_RunnerActor, inits)
        )
        first = self.group.call("first", [None] * len(configs))
        self.views = [_View(c.load, obs, mask) for c, (obs, mask) in zip(configs, first, strict=True)]

    def step(self, actions: list[int]) -> list[tuple[float, bool]]:
        """Every environment takes its action (in parallel on Ray); the views follow."""
        out = []
        for view, (reward, done, obs, mask, ended) in zip(
            self.views, self.group.call("step", actions), strict=True
        ):
            view.obs, view.mask = obs, mask
            if ended is not None:
                view.finished.append(ended)
            out.append((reward, done))
        return out


MAX_IDLE_EPISODES = 20
"""Episodes in a row without one decision that has a choice before training gives up (the
settings make every job start as soon as it arrives, so there is nothing to learn)."""


def _check_progress(idle: int) -> None:
    if idle >= MAX_IDLE_EPISODES:
        raise ConfigError(
            "TrainConfig",
            "env.jobs",
            f"{idle} episodes in a row offered no choice between jobs (queues never build up);"
            " use more jobs per episode or higher loads",
        )


def teacher_action(
    obs: dict[str, npt.NDArray[np.float32]], mask: npt.NDArray[np.bool_], teacher: Teacher
) -> int:
    """The heuristic's pick among valid slots: shortest requested time (sjf) or the oldest (fifo)."""
    valid = np.flatnonzero(mask[:-1])
    if len(valid) == 0:
        return len(mask) - 1
    if teacher == "sjf":
        return int(valid[np.argmin(obs["jobs"][valid, 2])])
    return int(valid[0])


FAMILY_ENVIRONMENTS = 2
"""Environments of a family run (as many as the shipped ``lab`` run's loads): each plays episodes
back to back, every one drawn afresh from the family."""


def training_envs(config: TrainConfig) -> list[EnvConfig]:
    """The training environments' settings: one per load, or ``FAMILY_ENVIRONMENTS`` of a family."""
    if config.family is not None:
        return [dataclasses.replace(config.env, family=config.family)] * FAMILY_ENVIRONMENTS
    return [dataclasses.replace(config.env, load=load) for load in config.loads]


def validation_env(config: TrainConfig, index: int) -> EnvConfig:
    """The settings of the ``index``-th validation window (its seed: :func:`validation_seed`)."""
    if config.family is not None:
        return dataclasses.replace(config.env, family=config.family)
    return dataclasses.replace(config.env, load=config.loads[index % len(config.loads)])


def train(
    config: TrainConfig,
    on_update: Callable[[UpdateLog, Agent], None] | None = None,
    ray: str | None = None,
    on_start: Callable[[float], None] | None = None,
) -> Agent:
    """Train an agent; ``on_update`` sees each update's log and the agent (for checkpoints),
    ``on_start`` the starting network's validation score (with ``config.validation``).
    ``ray`` (``auto``, ``local`` or an address) runs each environment in a Ray actor: the same result.
    Returns the last update's agent, or with validation the best-validated one."""
    torch.manual_seed(config.seed)
    torch.set_num_threads(1)
    rng = np.random.default_rng(config.seed)
    configs = training_envs(config)
    seeds = [int(rng.integers(2**31 - 1)) for _ in configs]
    fleet = _Fleet(configs, seeds, ray)
    try:
        return _train(config, on_update, rng, fleet, on_start)
    finally:
        fleet.group.close()


def validate(agent: Agent, config: TrainConfig) -> float:
    """Mean bounded slowdown of the greedy policy (the best-scored valid job each decision) over
    ``config.validation`` windows; the same windows at every check."""
    scores = []
    with torch.no_grad():
        for index in range(config.validation):
            env = SchedulingEnv(validation_env(config, index))
            obs, info = env.reset(seed=validation_seed(index))
            view = _View(env.load, obs, info["action_mask"])
            total, done = 0.0, False
            while not done:
                action = int(torch.argmax(agent.logits(_batch_of_one(view))[0]))
                view.obs, reward, terminated, truncated, info = env.step(action)
                view.mask = info["action_mask"]
                total += float(reward)
                done = terminated or truncated
            scores.append(-total)
    return float(np.mean(scores))


def _train(
    config: TrainConfig,
    on_update: Callable[[UpdateLog, Agent], None] | None,
    rng: np.random.Generator,
    fleet: _Fleet,
    on_start: Callable[[float], None] | None,
) -> Agent:
    runners = fleet.views
    agent = Agent(config.env.observation, hidden=config.hidden)
    optimizer = torch.optim.Adam(agent.parameters(), lr=config.lr)
    if config.warm_start != "none":
        _warm_start(agent, optimizer, fleet, config)
    best: tuple[float, dict[str, torch.Tensor]] | None = None
    if config.validation:
        best = (validate(agent, config), _copy(agent))
        if on_start is not None:
            on_start(best[0])
    started = time.perf_counter()
    for update in range(1, config.updates + 1):
        rollout = _collect(agent, fleet, config.steps, rng)
        losses = _optimise(agent, optimizer, rollout, config, rng)
        score = float("nan")
        if best is not None and (update % config.validate_every == 0 or update == config.updates):
            score = validate(agent, config)
            if score < best[0]:
                best = (score, _copy(agent))
        # A family's environments have no fixed load: its curve has no per-load columns.
        by_load = {} if config.family else {r.load: float(np.mean(r.finished)) for r in runners if r.finished}
        finished = [x for r in runners for x in r.finished]
        log = UpdateLog(
            update=update,
            decisions=len(rollout.action),
            episodes=len(finished),
            mean_bsld=float(np.mean(finished)) if finished else float("nan"),
            mean_bsld_by_load=by_load,
            policy_loss=losses[0],
            value_loss=losses[1],
            entropy=losses[2],
            approx_kl=losses[3],
            elapsed_s=time.perf_counter() - started,
            validation_bsld=score,
        )
        for r in runners:
            r.finished.clear()
        if on_update is not None:
            on_update(log, agent)
    if best is not None:
        agent.load_state_dict(best[1])
    return agent


def _copy(agent: Agent) -> dict[str, torch.Tensor]:
    return {k: v.clone() for k, v in agent.state_dict().items()}


def _warm_start(agent: Agent, optimizer: torch.optim.Optimizer, fleet: _Fleet, config: TrainConfig) -> None:
    """Behaviour cloning: play the teacher, then fit the score network to its choices."""
    rollout = _Rollout()
    idle = 0
    runners = fleet.views
    while len(rollout.action) < config.warm_steps:
        picks: list[int] = []
        chose: list[bool] = []
        for runner in runners:
            action = teacher_action(runner.obs, runner.mask, config.warm_start)
            chose.append(bool(runner.mask.sum() > 1))
            if chose[-1]:
                rollout.record(runner)
                rollout.action.append(action)
            picks.append(action)
        for choice, (_, done) in zip(chose, fleet.step(picks), strict=True):
            idle = 0 if choice else idle
            idle += done
            _check_progress(idle)
    for r in runners:
        r.finished.clear()
    actions = torch.tensor(rollout.action)
    generator = torch.Generator().manual_seed(config.seed)
    n, full = len(rollout.action), rollout.batch()
    for _ in range(10 * -(-n // config.minibatch)):  # ten epochs' worth of random minibatches
        index = torch.randperm(n, generator=generator)[: config.minibatch]
        loss = torch.nn.functional.cross_entropy(agent.logits(_rows(full, index)), actions[index])
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()


def _collect(agent: Agent, fleet: _Fleet, steps: int, rng: np.random.Generator) -> _Rollout:
    """Play until ``steps`` decisions with a real choice are stored (rounds over the runners: each
    picks its action, in runner order, then all step)."""
    rollout = _Rollout()
    last: dict[int, int] = {}
    idle = 0
    runners = fleet.views
    with torch.no_grad():
        while len(rollout.action) < steps:
            actions: list[int] = []
            chose: list[bool] = []
            for i, runner in enumerate(runners):
                chose.append(bool(runner.mask.sum() > 1))
                if not chose[-1]:
                    actions.append(int(np.argmax(runner.mask)))
                    continue
                batch = rollout.record(runner)
                logits = agent.logits(batch)[0]
                probs = torch.softmax(logits, dim=0).double().numpy()
                action = int(rng.choice(len(probs), p=probs / probs.sum()))
                rollout.action.append(action)
                rollout.logp.append(torch.log_softmax(logits, 0)[action].item())
                rollout.value.append(agent.values(batch)[0].item())
                rollout.reward.append(0.0)
                rollout.done.append(False)
                rollout.runner.append(i)
                last[i] = len(rollout.action) - 1
                actions.append(action)
            for i, (reward, done) in enumerate(fleet.step(actions)):
                if chose[i]:
                    idle = 0
                else:
                    idle += done
                    _check_progress(idle)
                if i in last:
                    rollout.reward[last[i]] += reward
                    if done:
                        rollout.done[last[i]] = True
                        del last[i]
        for i in last:
            rollout.bootstrap[i] = agent.values(_batch_of_one(runners[i]))[0].item()
    return rollout


def advantages(
    rollout: _Rollout, gamma: float, lam: float
) -> tuple[npt.NDArray[np.float64], npt.NDArray[np.float64]]:
    """GAE advantages and value targets, computed along each runner's own decisions."""
    n = len(rollout.action)
    adv = np.zeros(n)
    values = np.asarray(rollout.value)
    for i in set(rollout.runner):
        steps = [k for k in range(n) if rollout.runner[k] == i]
        gae, next_value = 0.0, rollout.bootstrap.get(i, 0.0)
        for k in reversed(steps):
            if rollout.done[k]:
                gae, next_value = 0.0, 0.0
            delta = rollout.reward[k] + gamma * next_value - values[k]
            gae = delta + gamma * lam * gae
            adv[k] = gae
            next_value = values[k]
    return adv, adv + values


def _optimise(
    agent: Agent,
    optimizer: torch.optim.Optimizer,
    rollout: _Rollout,
    config: TrainConfig,
    rng: np.random.Generator,
) -> tuple[float, float, float, float]:
    """Clipped-surrogate PPO epochs over the rollout; returns the last epoch's mean losses and KL."""
    adv, returns = advantages(rollout, config.gamma, config.gae_lambda)
    n = len(rollout.action)
    full = rollout.batch()
    actions = torch.tensor(rollout.action)
    old_logp = torch.tensor(rollout.logp, dtype=torch.float32)
    adv_t = torch.tensor((adv - adv.mean()) / (adv.std() + 1e-8), dtype=torch.float32)
    returns_t = torch.tensor(returns, dtype=torch.float32)
    stats: list[tuple[float, float, float, float]] = []
    for _ in range(config.epochs):
        stats.clear()
        order = rng.permutation(n)
        for start in range(0, n, config.minibatch):
            idx = torch.from_numpy(order[start : start + config.minibatch])
            batch = _rows(full, idx)
            logits = agent.logits(batch)
            logp_all = torch.log_softmax(logits, dim=1)
            logp = logp_all.gather(1, actions[idx].unsqueeze(1)).squeeze(1)
            ratio = torch.exp(logp - old_logp[idx])
            surrogate = torch.min(
                ratio * adv_t[idx], torch.clamp(ratio, 1 - config.clip, 1 + config.clip) * adv_t[idx]
            )
            policy_loss = -surrogate.mean()
            probs = torch.softmax(logits, dim=1)
            entropy = -(probs * torch.where(batch.mask, logp_all, torch.zeros_like(logp_all))).sum(1).mean()
            value_loss = ((agent.values(batch) - returns_t[idx]) ** 2).mean()
            loss = policy_loss + config.value_coef * value_loss - config.entropy * entropy
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(agent.parameters(), config.max_grad_norm)
            optimizer.step()
            kl = (old_logp[idx] - logp).mean().item()
            stats.append((policy_loss.item(), value_loss.item(), entropy.item(), kl))
    return tuple(float(x) for x in np.mean(stats, axis=0))  # type: ignore[return-value]
