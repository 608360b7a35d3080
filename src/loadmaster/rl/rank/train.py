"""The ranking trainer's loop: warm start, rollouts in workers, PPO updates, the best update kept."""

from __future__ import annotations

import time
from collections.abc import Callable

import numpy as np
import torch

from loadmaster.errors import ConfigError
from loadmaster.parallel import open_executor
from loadmaster.rl.agent import Agent
from loadmaster.rl.rank.config import VALIDATION_STREAM, WARM_STREAM, Layers, RankConfig, RankLog
from loadmaster.rl.rank.episodes import ChoiceEpisodes, Played, Source
from loadmaster.rl.rank.loss import ppo_update
from loadmaster.rl.rank.workers import RolloutTask, play_episode
from loadmaster.scheduling.observe import ObservationSpec
from loadmaster.scheduling.policy_net import load_policy


def _warm_start(
    agent: Agent, config: RankConfig, episodes: Source, plays: Callable[[list[RolloutTask]], list[Played]]
) -> None:
    """Fit the score network to minus the mean of the shortest-first columns (the log requested time
    for the simulator's jobs; with the history inputs, also the log predicted time) on rows of real
    decisions."""
    columns = _warm_columns(config, episodes)
    layers = _linear_sjf(agent, columns)
    tasks = [
        RolloutTask(episodes, layers, agent.spec, WARM_STREAM, i, 1.0, i, config.job_inputs) for i in range(2)
    ]
    found = [r for played in plays(tasks) for r in played.rows]
    if not found:
        raise ConfigError(
            "rank training", "episodes", "no cycle offered a choice of jobs: use more jobs or a higher load"
        )
    rows = np.concatenate(found)
    x = torch.from_numpy(rows)
    target = -x[:, columns].mean(dim=1)
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


def _warm_columns(config: RankConfig, episodes: Source) -> list[int]:
    """The inputs the warm start ranks by, smallest first. With the user-history inputs, the mean of
    log requested and log predicted time: the prediction shrunk halfway toward the limit (on
    ``lab-habits`` training seeds that order was 0-6% below shortest-requested-first with EASY
    backfill, while the prediction alone was worse: one user's past is a noisy guess)."""
    if isinstance(episodes, ChoiceEpisodes):
        return [episodes.warm_column]
    names = ["log_limit_h"] + (["log_predicted_h"] if "log_predicted_h" in config.job_inputs else [])
    return [config.job_inputs.index(name) for name in names]


def _linear_sjf(agent: Agent, columns: list[int]) -> Layers:
    weight = np.zeros((agent.width, 1), dtype=np.float32)
    weight[columns, 0] = -1.0 / len(columns)
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
    agent = Agent(spec, hidden=config.hidden, width=width, job_inputs=config.job_inputs)
    optimizer = torch.optim.Adam(agent.score.parameters(), lr=config.lr)
    with open_executor(config.workers, ray) as pool:

        def plays(tasks: list[RolloutTask]) -> list[Played]:
            return pool.map(play_episode, tasks)

        def validate() -> float:
            tasks = [
                RolloutTask(episodes, _layers(agent), spec, VALIDATION_STREAM, i, 0.0, 0, config.job_inputs)
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
                RolloutTask(
                    episodes,
                    _layers(agent),
                    spec,
                    config.seed,
                    base + s,
                    config.explore,
                    k,
                    config.job_inputs,
                )
                for s in range(config.sequences)
                for k in range(config.samples)
            ]
            played = plays(tasks)
            losses = ppo_update(agent, optimizer, played, config)
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
