"""PPO over rankings: train the ``learned`` plugin in the very profile it will serve in.

The step-by-step environment (:mod:`loadmaster.rl.env`) lets the agent start
one job at a time among those that fit. The RLScheduler protocol is
different: the agent names the next job, which blocks the machine until it
starts, and with EASY backfilling others run around it. Rather than a second
environment for each profile, this trainer runs the ordinary simulator with
the ``learned`` plugin in sampling mode (``explore`` > 0: Gumbel noise on the
scores draws each cycle's order from the Plackett-Luce distribution of
``scores / explore``) and records every cycle's inputs and sampled order.

**Decisions.** In a cycle, the jobs that started, in the sampled order, and
the first one that did not (the head that blocks or reserves) are the
positions that changed what happened; their Plackett-Luce log-probability is
the action's. Where the profile commits to a head (the RLScheduler
protocol), cycles in which the head picked earlier still blocks changed
nothing and are left out, and in the cycle where it starts only the order of
the others counts; cycles with a single job offered no choice.

**Advantage.** Each update draws ``sequences`` workloads and plays each
``samples`` times with different noise (the same jobs: common random
numbers). A decision's advantage is how much less bounded slowdown its
episode accrued from that moment on than the other samples of the same
workload did from the same moment (the leave-one-out baseline), relative to
theirs and scaled by the batch's standard deviation. Counting only what
accrues after the decision keeps the earlier decisions' noise out of it. No critic is needed.

**Update.** ``epochs`` passes of PPO's clipped surrogate over minibatches of
decisions. The ratio is new over old probability of the recorded positions.

Everything is seeded; rollouts run in ``workers`` processes, or on Ray workers
(``ray``), and are merged in task order, so the result depends neither on the
number of workers nor on where they run.
"""

from __future__ import annotations

import dataclasses
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt
import torch

from loadmaster.config import Cluster, load_cluster, load_workload
from loadmaster.errors import ConfigError
from loadmaster.metrics.summary import bounded_slowdown
from loadmaster.model import NodeTable, TraceJob
from loadmaster.parallel import open_executor
from loadmaster.rl.agent import Agent
from loadmaster.scheduling import PluginSpec, Profile, Scheduler, build_profile
from loadmaster.scheduling.observe import ObservationSpec
from loadmaster.scheduling.plugins.learned import Learned, RankedCycle
from loadmaster.scheduling.policy_net import JOB_INPUTS, PolicyNet, load_policy
from loadmaster.sim import SimOptions, simulate

F32 = npt.NDArray[np.float32]
Layers = tuple[tuple[F32, F32], ...]

MAX_ROWS = 128
"""Rows kept per cycle, best first in the sampled order: the tail beyond them has negligible
probability of being drawn first, and dropping it bounds memory on long queues."""
BOUND_S = 10.0
"""Bound of the bounded slowdown (seconds), as in the protocol."""
MAX_POSITIONS = 8
"""Most positions of one cycle's order credited as decisions."""
WARM_STREAM = 1_000_001
"""Episode stream of the warm start's rollouts (training seeds stay below it)."""
VALIDATION_STREAM = 1_000_002
"""Episode stream of the validation sequences (the same at every update)."""


@dataclass(frozen=True, slots=True)
class RankConfig:
    """The trainer's settings (defaults: the shipped ``lublin`` checkpoint)."""

    seed: int = 0
    updates: int = 60
    sequences: int = 4
    """Workloads per update."""
    samples: int = 8
    """Noisy plays of each workload (>= 2: the baseline is the other samples)."""
    explore: float = 0.3
    """Gumbel noise scale while sampling (the softmax temperature of the scores)."""
    epochs: int = 4
    minibatch: int = 512
    lr: float = 1e-3
    clip: float = 0.2
    max_grad_norm: float = 0.5
    hidden: int = 64
    warm_start: bool = True
    """Start from the score network fitted to shortest-requested-time-first."""
    init: str | None = None
    """Start from this checkpoint's score network instead (a shipped name or a ``.npz`` path; the
    plugin's job inputs, ``hidden`` units): fine-tuning an existing policy in this profile."""
    validation: int = 8
    """Held-back training sequences played greedily after each update; the best update is kept."""
    workers: int = 2

    def __post_init__(self) -> None:
        if not 0 <= self.seed < WARM_STREAM:
            raise ConfigError("RankConfig", "seed", f"must be in [0, {WARM_STREAM}), got {self.seed}")
        for name in ("updates", "sequences", "epochs", "minibatch", "workers", "hidden", "validation"):
            if getattr(self, name) < 1:
                raise ConfigError("RankConfig", name, f"must be >= 1, got {getattr(self, name)}")
        if self.samples < 2:
            raise ConfigError("RankConfig", "samples", f"must be >= 2 (leave-one-out), got {self.samples}")
        if not self.explore > 0:
            raise ConfigError("RankConfig", "explore", f"must be > 0, got {self.explore}")


@dataclass(frozen=True, slots=True)
class RankLog:
    """One update: the sampled and the greedy (validation) mean bounded slowdown, and PPO's numbers."""

    update: int
    decisions: int
    sampled_bsld: float
    validation_bsld: float
    policy_loss: float
    approx_kl: float
    clip_fraction: float
    elapsed_s: float


Episode = tuple[NodeTable, Sequence[TraceJob], SimOptions]
"""One workload to play: the machine, the jobs, the simulator's options."""


class Episodes(Protocol):
    """Where training episodes come from and the profile the policy plays them in (picklable:
    rollouts run in worker processes)."""

    @property
    def commits(self) -> bool:
        """Whether the profile keeps a head it picked until that head starts (``commit``)."""
        ...

    def episode(self, stream: int, index: int) -> Episode:
        """The ``index``-th workload of the stream ``stream`` (deterministic)."""
        ...

    def profile(self, checkpoint: str, explore: float) -> Profile:
        """The profile whose first order plugin is ``learned`` with these settings."""
        ...


class Played(Protocol):
    """One played episode as the update needs it: its score, what each job accrued, the decisions."""

    @property
    def bsld(self) -> float:
        """The episode's mean bounded slowdown."""
        ...

    @property
    def submit(self) -> npt.NDArray[np.float64]:
        """Per job: when it arrived."""
        ...

    @property
    def end(self) -> npt.NDArray[np.float64]:
        """Per job: when it ended."""
        ...

    @property
    def rate(self) -> npt.NDArray[np.float64]:
        """Per job: bounded slowdown accrued per unit of time in the system, 1 / max(run, bound)."""
        ...

    @property
    def rows(self) -> list[F32]:
        """Per decision: input rows in the sampled order."""
        ...

    @property
    def positions(self) -> list[int]:
        """Per decision: how many leading positions count."""
        ...

    @property
    def times(self) -> list[float]:
        """Per decision: when it was made."""
        ...


@runtime_checkable
class ChoiceEpisodes(Protocol):
    """Episodes that play themselves (picklable): a source outside the GPU simulator records each
    decision as the rows it chose among, the chosen one first, and gives them to the trainer."""

    @property
    def width(self) -> int:
        """Inputs per row."""
        ...

    @property
    def warm_column(self) -> int:
        """The input the warm start ranks by, smallest first (the shortest-job-first column)."""
        ...

    @property
    def inputs_meta(self) -> dict[str, object]:
        """What the checkpoint records about the inputs, so that a loader can refuse a mismatch."""
        ...

    def play(self, layers: Layers, stream: int, index: int, explore: float, noise: int) -> Played:
        """Play episode ``index`` of ``stream`` with a score network of ``layers``; ``explore`` > 0
        samples each choice (Gumbel noise of that scale, seeded by ``noise``) and records it."""
        ...


Source = Episodes | ChoiceEpisodes
"""Anything the trainer plays: simulator episodes in a profile, or episodes that play themselves."""


def to_go(played: Played, times: npt.NDArray[np.float64]) -> npt.NDArray[np.float64]:
    """Bounded slowdown the jobs of ``played`` accrue after each of ``times`` (summed over jobs, per job)."""
    inside = np.maximum(played.end[None, :] - np.maximum(times[:, None], played.submit[None, :]), 0.0)
    out: npt.NDArray[np.float64] = (inside * played.rate[None, :]).sum(1) / max(len(played.rate), 1)
    return out


@dataclass(frozen=True, slots=True)
class LabEpisodes:
    """The built-in workload on the lab cluster, gang + bin packing + EASY backfill, as the
    ``learned`` profile with backfilling serves."""

    jobs: int = 512
    loads: tuple[float, ...] = (0.9, 1.1)
    commits: bool = False

    def episode(self, stream: int, index: int) -> Episode:
        rng = np.random.default_rng([stream, index])
        cluster = _lab_cluster()
        load = self.loads[index % len(self.loads)]
        sample = load_workload("lab", cluster, jobs=self.jobs, load=load, seed=int(rng.integers(2**31 - 1)))
        return cluster.nodes, sample.jobs, SimOptions(seed=int(rng.integers(2**31 - 1)))

    def profile(self, checkpoint: str, explore: float) -> Profile:
        plugins = [
            PluginSpec("learned", {"checkpoint": checkpoint, "strict": True, "explore": explore}),
            PluginSpec("gang", {}),
            PluginSpec("binpack", {}),
            PluginSpec("backfill", {"mode": "easy"}),
        ]
        return build_profile("learned-lab", ["allocate", "backfill"], plugins, source="rl.rank")


@cache
def _lab_cluster() -> Cluster:
    return load_cluster("lab")


@dataclass(frozen=True, slots=True)
class _Task:
    episodes: Source
    layers: Layers
    spec: ObservationSpec
    stream: int
    index: int
    explore: float
    noise: int


@dataclass(frozen=True, eq=False)
class _Played:
    bsld: float
    submit: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    end: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    rate: npt.NDArray[np.float64] = field(default_factory=lambda: np.zeros(0))
    """Per job: bounded slowdown accrued per second in the system, 1 / max(run, 10 s)."""
    rows: list[F32] = field(default_factory=list)
    """Per decision: input rows in the sampled order (at most MAX_ROWS)."""
    positions: list[int] = field(default_factory=list)
    """Per decision: how many leading positions count."""
    times: list[float] = field(default_factory=list)
    """Per decision: when it was made."""


def _play(task: _Task) -> Played:
    """Play one episode with the given weights; record decisions when exploring."""
    if isinstance(task.episodes, ChoiceEpisodes):
        return task.episodes.play(task.layers, task.stream, task.index, task.explore, task.noise)
    nodes, jobs, options = task.episodes.episode(task.stream, task.index)
    # A profile names a checkpoint, not weights: build it with a shipped one, then swap in the
    # weights being trained, with their own observation spec.
    prof = task.episodes.profile("lab", task.explore)
    plugin = prof.order[0]
    if not isinstance(plugin, Learned):
        raise TypeError("the rank profile's order plugin must be learned")
    plugin.policy = PolicyNet(task.layers, task.spec)
    cycles: list[RankedCycle] = []
    if task.explore > 0:
        plugin.recorder = cycles.append
    result = simulate(nodes, Scheduler(prof), list(jobs), dataclasses.replace(options, seed=task.noise))
    table = result.jobs
    ran = ~np.isnan(table.start_s)
    bsld = float(np.mean(bounded_slowdown(table.wait_s[ran], table.duration_s[ran])))
    end = np.where(np.isnan(table.end_s), np.nanmax(table.end_s, initial=0.0), table.end_s)
    rate = 1.0 / np.maximum(table.duration_s, BOUND_S)
    played = _Played(bsld, table.submit_s.astype(np.float64), end.astype(np.float64), rate)
    if not cycles:
        return played
    start_of = dict(zip(table.job_id.tolist(), table.start_s.tolist(), strict=True))
    committed: str | None = None
    for cycle in cycles:
        if committed is not None and start_of[committed] > cycle.now:
            continue  # the head picked earlier still blocks: this cycle's order changed nothing
        skip = cycle.job_ids.index(committed) if committed in cycle.job_ids else -1
        order = cycle.order[cycle.order != skip]
        if committed is not None and start_of[committed] == cycle.now:
            committed = None  # it starts now, first: the order below decides what follows it
        counted = 0
        while counted < len(order) and start_of[cycle.job_ids[order[counted]]] == cycle.now:
            counted += 1
        if counted < len(order) and task.episodes.commits:
            committed = cycle.job_ids[order[counted]]
        if len(order) < 2:
            continue  # one job left: no choice was made
        played.positions.append(min(counted + 1, len(order), MAX_POSITIONS))
        played.rows.append(cycle.inputs[order[:MAX_ROWS]])
        played.times.append(cycle.now)
    return played


def prefix_log_prob(scores: torch.Tensor, valid: torch.Tensor, positions: torch.Tensor) -> torch.Tensor:
    """Plackett-Luce log-probability of each row's first ``positions`` entries.

    ``scores`` (B, R) are logits in the recorded order, ``valid`` (B, R) marks real
    entries; position i contributes its logit minus the log-sum-exp of the logits
    from i on.
    """
    masked = torch.where(valid, scores, torch.full_like(scores, -1e9))
    suffix = torch.logcumsumexp(masked.flip(1), dim=1).flip(1)
    steps = torch.arange(scores.shape[1]).unsqueeze(0)
    counted = (steps < positions.unsqueeze(1)) & valid
    return torch.where(counted, masked - suffix, torch.zeros_like(scores)).sum(1)


def _stack(rows: list[F32]) -> tuple[torch.Tensor, torch.Tensor]:
    width = max(len(r) for r in rows)
    x = np.zeros((len(rows), width, rows[0].shape[1]), dtype=np.float32)
    valid = np.zeros((len(rows), width), dtype=bool)
    for i, r in enumerate(rows):
        x[i, : len(r)] = r
        valid[i, : len(r)] = True
    return torch.from_numpy(x), torch.from_numpy(valid)


def _scores(agent: Agent, x: torch.Tensor, explore: float) -> torch.Tensor:
    out: torch.Tensor = agent.score(x).squeeze(2) / explore
    return out


def _warm_start(
    agent: Agent, config: RankConfig, episodes: Source, plays: Callable[[list[_Task]], list[Played]]
) -> None:
    """Fit the score network to minus the shortest-first column (the log requested time for the
    simulator's jobs) on rows of real decisions."""
    column = episodes.warm_column if isinstance(episodes, ChoiceEpisodes) else JOB_INPUTS.index("log_limit_h")
    layers = _linear_sjf(agent, column)
    tasks = [_Task(episodes, layers, agent.spec, WARM_STREAM, i, 1.0, i) for i in range(2)]
    found = [r for played in plays(tasks) for r in played.rows]
    if not found:
        raise ConfigError(
            "rank training", "episodes", "no cycle offered a choice of jobs: use more jobs or a higher load"
        )
    rows = np.concatenate(found)
    x = torch.from_numpy(rows)
    target = -x[:, column]
    optimizer = torch.optim.Adam(agent.score.parameters(), lr=3e-3)
    generator = torch.Generator().manual_seed(config.seed)
    for _ in range(400):
        index = torch.randperm(len(x), generator=generator)[:1024]
        loss = torch.nn.functional.mse_loss(agent.score(x[index]).squeeze(1), target[index])
        optimizer.zero_grad()
        loss.backward()  # type: ignore[no-untyped-call]
        optimizer.step()


def _load_score(agent: Agent, checkpoint: str) -> None:
    """Copy ``checkpoint``'s score layers into ``agent``; a ConfigError if the shapes differ."""
    layers = load_policy(checkpoint).layers
    linear = [m for m in agent.score if isinstance(m, torch.nn.Linear)]
    shapes = [tuple(w.shape) for w, _ in layers]
    if shapes != [(m.in_features, m.out_features) for m in linear]:
        raise ConfigError(
            checkpoint, "score", f"layers {shapes} do not fit a {agent.hidden}-unit score network"
        )
    with torch.no_grad():
        for module, (weight, bias) in zip(linear, layers, strict=True):
            module.weight.copy_(torch.from_numpy(np.ascontiguousarray(weight.T)))
            module.bias.copy_(torch.from_numpy(bias))


def _linear_sjf(agent: Agent, column: int) -> Layers:
    weight = np.zeros((agent.width, 1), dtype=np.float32)
    weight[column, 0] = -1.0
    return ((weight, np.zeros(1, dtype=np.float32)),)


def _layers(agent: Agent) -> Layers:
    return tuple(agent.score_layers())


def train_ranking(
    config: RankConfig,
    episodes: Source,
    on_update: Callable[[RankLog, Agent], None] | None = None,
    on_start: Callable[[float], None] | None = None,
    ray: str | None = None,
) -> Agent:
    """Train; ``on_start`` sees the starting network's validation score, ``on_update`` each update's
    log and the agent. Returns the agent of the update with the lowest validation bounded slowdown
    (the starting network counts as update 0). ``ray`` (``auto``, ``local`` or an address) plays the
    rollouts on Ray workers instead of ``config.workers`` local processes: the same result."""
    torch.manual_seed(config.seed)
    torch.set_num_threads(1)
    spec = ObservationSpec()
    width = episodes.width if isinstance(episodes, ChoiceEpisodes) else None
    agent = Agent(spec, hidden=config.hidden, width=width)
    optimizer = torch.optim.Adam(agent.score.parameters(), lr=config.lr)
    with open_executor(config.workers, ray) as pool:

        def plays(tasks: list[_Task]) -> list[Played]:
            return pool.map(_play, tasks)

        def validate() -> float:
            tasks = [
                _Task(episodes, _layers(agent), spec, VALIDATION_STREAM, i, 0.0, 0)
                for i in range(config.validation)
            ]
            return float(np.mean([p.bsld for p in plays(tasks)]))

        if config.init is not None:
            _load_score(agent, config.init)
        elif config.warm_start:
            _warm_start(agent, config, episodes, plays)
        best = (validate(), {k: v.clone() for k, v in agent.state_dict().items()})
        if on_start is not None:
            on_start(best[0])
        started = time.perf_counter()
        for update in range(1, config.updates + 1):
            base = (update - 1) * config.sequences
            tasks = [
                _Task(episodes, _layers(agent), spec, config.seed, base + s, config.explore, k)
                for s in range(config.sequences)
                for k in range(config.samples)
            ]
            played = plays(tasks)
            losses = _optimise(agent, optimizer, played, config)
            score = validate()
            if score < best[0]:
                best = (score, {k: v.clone() for k, v in agent.state_dict().items()})
            log = RankLog(
                update=update,
                decisions=sum(len(p.rows) for p in played),
                sampled_bsld=float(np.mean([p.bsld for p in played])),
                validation_bsld=score,
                policy_loss=losses[0],
                approx_kl=losses[1],
                clip_fraction=losses[2],
                elapsed_s=time.perf_counter() - started,
            )
            if on_update is not None:
                on_update(log, agent)
    agent.load_state_dict(best[1])
    return agent


def _advantages(played: list[Played], samples: int) -> npt.NDArray[np.float64]:
    """Per decision: how much less bounded slowdown its episode accrued from that moment on than
    the same workload's other samples did from the same moment (> 0: better), relative to theirs.

    The same jobs in every sample make the moments comparable; counting only what is
    accrued after the decision leaves out the noise of the decisions before it."""
    out: list[npt.NDArray[np.float64]] = []
    for first in range(0, len(played), samples):
        group = played[first : first + samples]
        for i, mine in enumerate(group):
            times = np.asarray(mine.times, dtype=np.float64)
            own = to_go(mine, times)
            others = np.mean([to_go(p, times) for j, p in enumerate(group) if j != i], axis=0)
            out.append((others - own) / np.maximum(others, 1e-9) if len(times) else np.zeros(0))
    advantage = np.concatenate(out) if out else np.zeros(0)
    scaled: npt.NDArray[np.float64] = advantage / (advantage.std() + 1e-8) if len(advantage) else advantage
    return scaled


def _optimise(
    agent: Agent, optimizer: torch.optim.Optimizer, played: list[Played], config: RankConfig
) -> tuple[float, float, float]:
    advantage = _advantages(played, config.samples)
    rows = [r for p in played for r in p.rows]
    if not rows:
        return 0.0, 0.0, 0.0
    adv = torch.tensor(advantage, dtype=torch.float32)
    positions = torch.tensor([n for p in played for n in p.positions])
    x, valid = _stack(rows)
    with torch.no_grad():
        old = prefix_log_prob(_scores(agent, x, config.explore), valid, positions)
    generator = torch.Generator().manual_seed(config.seed)
    losses, kls, clipped = [], [], []
    n = len(rows)
    for _ in range(config.epochs):
        shuffled = torch.randperm(n, generator=generator)
        for first in range(0, n, config.minibatch):
            index = shuffled[first : first + config.minibatch]
            new = prefix_log_prob(_scores(agent, x[index], config.explore), valid[index], positions[index])
            ratio = torch.exp(new - old[index])
            a = adv[index]
            surrogate = torch.min(ratio * a, torch.clamp(ratio, 1 - config.clip, 1 + config.clip) * a)
            loss = -surrogate.mean()
            optimizer.zero_grad()
            loss.backward()  # type: ignore[no-untyped-call]
            torch.nn.utils.clip_grad_norm_(agent.score.parameters(), config.max_grad_norm)
            optimizer.step()
            losses.append(float(loss.detach()))
            kls.append(float((old[index] - new.detach()).mean()))
            clipped.append(float(((ratio.detach() - 1).abs() > config.clip).float().mean()))
    return float(np.mean(losses)), float(np.mean(kls)), float(np.mean(clipped))
