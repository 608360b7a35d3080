"""The PPO agent's networks in PyTorch, and their round trip to the numpy checkpoint.

The score network is exactly :class:`loadmaster.scheduling.policy_net.PolicyNet`
(same inputs, layers and tanh), so a trained agent exports to a ``.npz`` that
the ``learned`` plugin runs without torch. The value network (PPO's critic)
reads the context and the mean of the window's job inputs; it is saved in the
checkpoint too, so training can resume, but serving never uses it.
"""

from __future__ import annotations

import io
from dataclasses import dataclass
from typing import Any

import numpy as np
import numpy.typing as npt
import torch
from torch import nn

from loadmaster.scheduling.observe import ObservationSpec
from loadmaster.scheduling.policy_net import (
    JOB_INPUTS,
    JOBS,
    PolicyNet,
    context_inputs,
    context_size,
    job_inputs,
    read_policy,
    save_policy,
)

F32 = npt.NDArray[np.float32]


@dataclass(frozen=True, slots=True)
class Batch:
    """Network inputs of several decisions, padded to the window: jobs (B, K, J), present (B, K)
    (1 where a slot holds a job), mask (B, K + 1) (slot K is wait), context (B, C)."""

    jobs: torch.Tensor
    present: torch.Tensor
    mask: torch.Tensor
    context: torch.Tensor


def prepare(obs: dict[str, Any]) -> tuple[F32, F32, F32]:
    """One observation as network inputs: job inputs (K, J), present (K,), context (C,)."""
    jobs = obs["jobs"]
    return job_inputs(jobs), jobs[:, 0].copy(), context_inputs(obs["nodes"], obs["global"])


def _mlp(sizes: list[int]) -> nn.Sequential:
    layers: list[nn.Module] = []
    for i in range(len(sizes) - 1):
        layers.append(nn.Linear(sizes[i], sizes[i + 1]))
        if i < len(sizes) - 2:
            layers.append(nn.Tanh())
    return nn.Sequential(*layers)


class Agent(nn.Module):
    """Score network (per job, shared weights), a learned score for waiting, and the critic."""

    def __init__(
        self,
        spec: ObservationSpec,
        hidden: int = 64,
        width: int | None = None,
        job_inputs: tuple[str, ...] = JOB_INPUTS,
    ) -> None:
        super().__init__()
        self.spec = spec
        self.hidden = hidden
        self.job_inputs = job_inputs
        """The job inputs the score network reads (``policy_net``), recorded in the checkpoint."""
        self.jobs_rows = width is None
        """Whether the score network reads job rows (the plugin's), not another trainer's rows."""
        context = context_size(spec)
        self.width = width or len(job_inputs) + context
        """Inputs of the score network: a job's and the context's, unless another row is given."""
        self.score = _mlp([self.width, hidden, hidden, 1])
        self.wait = _mlp([context, hidden, 1])
        self.value = _mlp([context + len(job_inputs), hidden, hidden, 1])

    def logits(self, batch: Batch) -> torch.Tensor:
        """(B, K + 1) masked logits: job scores, then the wait score; invalid actions at -1e9."""
        k = batch.jobs.shape[1]
        ctx = batch.context.unsqueeze(1).expand(-1, k, -1)
        scores = self.score(torch.cat([batch.jobs, ctx], dim=2)).squeeze(2)
        wait = self.wait(batch.context)
        raw = torch.cat([scores, wait], dim=1)
        return torch.where(batch.mask, raw, torch.full_like(raw, -1e9))

    def values(self, batch: Batch) -> torch.Tensor:
        """(B,) state values: the context and the mean inputs of the jobs present."""
        present = batch.present.unsqueeze(2)
        pooled = (batch.jobs * present).sum(1) / present.sum(1).clamp(min=1.0)
        value: torch.Tensor = self.value(torch.cat([batch.context, pooled], dim=1))
        return value.squeeze(1)

    def score_layers(self) -> list[tuple[F32, F32]]:
        """The score network as (weight (in, out), bias) numpy pairs, as PolicyNet holds them."""
        linear = [m for m in self.score if isinstance(m, nn.Linear)]
        return [(m.weight.detach().numpy().T.copy(), m.bias.detach().numpy().copy()) for m in linear]

    def inputs_meta(self) -> dict[str, Any]:
        """What a checkpoint records of the job inputs: ``job_inputs`` where they are not the
        original :data:`JOB_INPUTS` (so files written before the history inputs stay as they were)."""
        return (
            {"job_inputs": list(self.job_inputs)} if self.jobs_rows and self.job_inputs != JOB_INPUTS else {}
        )

    def to_policy(self, meta: dict[str, Any] | None = None) -> PolicyNet:
        """The numpy policy the plugin would run (for tests and evaluation without a file)."""
        layers = tuple((w.astype(np.float32), b.astype(np.float32)) for w, b in self.score_layers())
        return PolicyNet(layers, self.spec, {**(meta or {}), **self.inputs_meta()})

    def save(self, target: io.BufferedIOBase | io.BytesIO, meta: dict[str, Any]) -> None:
        """Write the checkpoint: score layers for serving, wait and value heads for resuming."""
        extra = {f"train.{key}": value.detach().numpy() for key, value in self.state_dict().items()}
        full = {**meta, "hidden": self.hidden, **self.inputs_meta()}
        save_policy(target, self.score_layers(), self.spec, full, extra)

    @classmethod
    def load(cls, data: bytes, source: str) -> Agent:
        """An agent from checkpoint bytes (every head restored when the file has them)."""
        policy, arrays = read_policy(data, source)
        width = policy.meta.get("input_width") if policy.meta.get("inputs", JOBS) != JOBS else None
        agent = cls(
            policy.spec,
            hidden=int(policy.meta.get("hidden", 64)),
            width=width,
            job_inputs=policy.job_input_names,
        )
        state = {
            key[len("train.") :]: torch.from_numpy(v) for key, v in arrays.items() if key.startswith("train.")
        }
        if state:
            agent.load_state_dict(state)
        return agent
