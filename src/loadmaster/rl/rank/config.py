"""Settings of the ranking trainer, its per-update log, and the limits and seed streams it uses."""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ConfigError
from loadmaster.scheduling.policy_net import JOB_INPUTS, KNOWN_JOB_INPUTS

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
    job_inputs: tuple[str, ...] = JOB_INPUTS
    """The job inputs of the score network (``policy_net``; ``WITH_HISTORY`` adds the user's
    history), recorded in the checkpoint. Episodes that play themselves bring their own rows."""
    validation: int = 8
    """Held-back training sequences played greedily after each update; the best update is kept."""
    workers: int = 2

    def __post_init__(self) -> None:
        if not 0 <= self.seed < WARM_STREAM:
            raise ConfigError("RankConfig", "seed", f"must be in [0, {WARM_STREAM}), got {self.seed}")
        for name in ("updates", "sequences", "epochs", "minibatch", "workers", "hidden", "validation"):
            if getattr(self, name) < 1:
                raise ConfigError("RankConfig", name, f"must be >= 1, got {getattr(self, name)}")
        unknown = sorted(set(self.job_inputs) - KNOWN_JOB_INPUTS)
        if (
            unknown
            or len(set(self.job_inputs)) != len(self.job_inputs)
            or "log_limit_h" not in self.job_inputs
        ):
            raise ConfigError(
                "RankConfig", "job_inputs", f"distinct known inputs with log_limit_h, got {self.job_inputs}"
            )
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
