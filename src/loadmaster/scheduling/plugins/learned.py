"""learned: order the queue by a trained policy's scores (issue 5's learned scheduler).

The policy was trained with PPO in the simulator (``loadmaster rl train``);
its checkpoint holds a small network that scores each waiting job from the
job's own features and the cluster's context (see ``scheduling/policy_net``).
The plugin builds exactly the features the training environment built
(``scheduling/observe``), once per cycle, and ranks jobs by score, highest
first. With the default lax allocation the first job in that order that fits
starts, then the next: the same choice the agent made in training, where it
picked among the jobs that could start now.

Two differences from training, on purpose: the plugin ranks the whole queue,
not only the first ``window`` jobs in submission order (a deeper queue only
gives it more short jobs to pick), and it scores once per cycle rather than
after each start (the context changes little within one instant).

A checkpoint trained with user-history inputs (``meta.job_inputs``, see
``policy_net.HISTORY_INPUTS``) also reads each job's user's recent finished
jobs from the snapshot (``observe.history_features``); others never do.

For training by ranking (``loadmaster.rl.rank``), ``explore`` > 0 samples
the order instead: Gumbel noise of that scale on the scores, which draws a
ranking from the Plackett-Luce distribution of ``scores / explore``, seeded by
the cycle's generator; a trainer that sets :attr:`Learned.recorder` receives
every cycle's inputs and sampled order. Serving leaves both alone.

``starvation_s`` is the production fix for the learned policy's starvation
outliers (docs/design-principles.md): jobs that have waited that long go first, oldest
first, whatever their score. Combine it with ``backfill`` (whose own
``starvation_s`` then reserves for them) so that they are not overtaken.

Learned ordering and multi-queue do not combine: the policy was trained on
one queue and its scores compare jobs across sizes; splitting the queue by
size would throw that comparison away (see ``registry.INCOMPATIBLE``).
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.model import Job
from loadmaster.scheduling.framework import CycleContext, OrderPlugin
from loadmaster.scheduling.observe import (
    NodeRows,
    global_features,
    history_features,
    job_features,
    node_features,
)
from loadmaster.scheduling.policy_net import PolicyNet, load_policy


@dataclass(frozen=True, slots=True)
class LearnedArgs:
    checkpoint: str = "lab"
    """A shipped checkpoint (``policy_net.BUILTIN``: lab, lab-fair, lab-habits, ...) or the path of a
    ``.npz`` from ``loadmaster rl train`` or ``rl rank-train``."""
    starvation_s: float | None = None
    """Jobs that have waited at least this long go first, oldest first (None: never)."""
    strict: bool = False
    """Block the queue behind the highest-scored job that cannot start (with backfill: EASY)."""
    commit: bool = False
    """Keep the job chosen as head first until it starts, even if a job with a higher score
    arrives meanwhile (the RLScheduler protocol's agent commits to its pick; False: re-rank
    every cycle)."""
    explore: float = 0.0
    """Scale of Gumbel noise added to the scores (> 0: sample the order, for training; 0: rank)."""

    def __post_init__(self) -> None:
        if self.starvation_s is not None and not self.starvation_s > 0:
            raise ValueError(f"starvation_s must be > 0 or null, got {self.starvation_s}")
        if not self.explore >= 0:
            raise ValueError(f"explore must be >= 0, got {self.explore}")


@dataclass(frozen=True, eq=False)
class RankedCycle:
    """One cycle as the policy saw it: what a ranking trainer needs to score it again."""

    now: float
    job_ids: tuple[str, ...]
    inputs: npt.NDArray[np.float32]
    """The network's input rows, one per job (``PolicyNet.inputs``)."""
    order: npt.NDArray[np.int64]
    """Row indices in the order the cycle used, best first."""


class Learned(OrderPlugin):
    """Key = (not starving, -score, submit time, id); see the module docstring."""

    name = "learned"
    Args = LearnedArgs

    def __init__(self, args: LearnedArgs | None = None) -> None:
        super().__init__(args)
        self.settings = args or LearnedArgs()
        self.strict = self.settings.strict
        self.commits_head = self.settings.commit
        self.policy: PolicyNet = load_policy(self.settings.checkpoint)
        self.recorder: Callable[[RankedCycle], None] | None = None
        """Set by a trainer to receive every cycle of two or more jobs; None when serving."""
        self._node_rows = NodeRows()
        """Running jobs' placements as arrays for the node features, kept from cycle to cycle."""

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        return self.order_keys([job], ctx)[0]

    def order_keys(self, jobs: Sequence[Job], ctx: CycleContext) -> list[tuple[float | str, ...]]:
        spec, snapshot, now = self.policy.spec, ctx.snapshot, ctx.now
        inputs = self.policy.inputs(
            job_features(jobs, snapshot, now, spec),
            node_features(snapshot, now, spec, self._node_rows),
            global_features(snapshot, now, spec),
            history_features(jobs, snapshot) if self.policy.uses_history else None,
        )
        scores = self.policy.score_inputs(inputs)
        if self.settings.explore > 0:
            gumbel = -np.log(-np.log(ctx.rng.uniform(1e-12, 1.0, len(jobs))))
            scores = scores + self.settings.explore * gumbel
        if self.recorder is not None and len(jobs) > 1:
            order = np.argsort(-scores, kind="stable").astype(np.int64)
            self.recorder(RankedCycle(now, tuple(j.id for j in jobs), inputs, order))
        guard = self.settings.starvation_s
        keys: list[tuple[float | str, ...]] = []
        for job, score in zip(jobs, scores.astype(np.float64), strict=True):
            if guard is not None and now - job.submit_s >= guard:
                keys.append((0.0, job.submit_s, job.submit_s, job.id))
            else:
                keys.append((1.0, -float(score), job.submit_s, job.id))
        return keys
