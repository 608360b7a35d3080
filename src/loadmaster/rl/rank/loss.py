"""The ranking trainer's objective: Plackett-Luce log-probability of the recorded orders, leave-one-out
advantages, and one PPO update of clipped surrogate steps."""

from __future__ import annotations

import numpy as np
import numpy.typing as npt
import torch

from loadmaster.rl.agent import Agent
from loadmaster.rl.rank.config import F32, RankConfig
from loadmaster.rl.rank.episodes import Played, to_go


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


def stack_rows(rows: list[F32]) -> tuple[torch.Tensor, torch.Tensor]:
    """Decisions' rows padded to one (decisions, rows, inputs) tensor, and the mask of real rows."""
    width = max(len(r) for r in rows)
    x = np.zeros((len(rows), width, rows[0].shape[1]), dtype=np.float32)
    valid = np.zeros((len(rows), width), dtype=bool)
    for i, r in enumerate(rows):
        x[i, : len(r)] = r
        valid[i, : len(r)] = True
    return torch.from_numpy(x), torch.from_numpy(valid)


def sampled_scores(agent: Agent, x: torch.Tensor, explore: float) -> torch.Tensor:
    """The score network's logits of ``x`` at the sampling temperature ``explore``."""
    out: torch.Tensor = agent.score(x).squeeze(2) / explore
    return out


def advantages(played: list[Played], samples: int) -> npt.NDArray[np.float64]:
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


def ppo_update(
    agent: Agent, optimizer: torch.optim.Optimizer, played: list[Played], config: RankConfig
) -> tuple[float, float, float]:
    """One update: ``config.epochs`` passes of PPO's clipped surrogate over minibatches of the
    decisions of ``played``; returns the mean policy loss, approximate KL and clip fraction."""
    advantage = advantages(played, config.samples)
    rows = [r for p in played for r in p.rows]
    if not rows:
        return 0.0, 0.0, 0.0
    adv = torch.tensor(advantage, dtype=torch.float32)
    positions = torch.tensor([n for p in played for n in p.positions])
    x, valid = stack_rows(rows)
    with torch.no_grad():
        old = prefix_log_prob(sampled_scores(agent, x, config.explore), valid, positions)
    generator = torch.Generator().manual_seed(config.seed)
    losses, kls, clipped = [], [], []
    n = len(rows)
    for _ in range(config.epochs):
        shuffled = torch.randperm(n, generator=generator)
        for first in range(0, n, config.minibatch):
            index = shuffled[first : first + config.minibatch]
            new = prefix_log_prob(
                sampled_scores(agent, x[index], config.explore), valid[index], positions[index]
            )
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
