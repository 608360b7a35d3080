"""One rollout, run in a worker process (or on a Ray worker): play an episode with given weights and
record, when exploring, the decisions the update learns from."""

from __future__ import annotations

import dataclasses
from dataclasses import dataclass, field

import numpy as np
import numpy.typing as npt

from loadmaster.metrics.summary import bounded_slowdown
from loadmaster.rl.rank.config import BOUND_S, F32, MAX_POSITIONS, MAX_ROWS, Layers
from loadmaster.rl.rank.episodes import ChoiceEpisodes, Played, Source
from loadmaster.scheduling import Scheduler
from loadmaster.scheduling.observe import ObservationSpec
from loadmaster.scheduling.plugins.learned import Learned, RankedCycle
from loadmaster.scheduling.policy_net import JOB_INPUTS, PolicyNet
from loadmaster.sim import simulate


@dataclass(frozen=True, slots=True)
class RolloutTask:
    """One rollout to play (picklable): the source, the weights, which episode, and the noise."""

    episodes: Source
    layers: Layers
    spec: ObservationSpec
    stream: int
    index: int
    explore: float
    noise: int
    job_inputs: tuple[str, ...] = JOB_INPUTS
    """The score network's job inputs (``policy_net``)."""


@dataclass(frozen=True, eq=False)
class PlayedEpisode:
    """A simulator episode played: its mean bounded slowdown, per-job times and the decisions."""

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


def play_episode(task: RolloutTask) -> Played:
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
    meta = {} if task.job_inputs == JOB_INPUTS else {"job_inputs": list(task.job_inputs)}
    plugin.policy = PolicyNet(task.layers, task.spec, meta)
    cycles: list[RankedCycle] = []
    if task.explore > 0:
        plugin.recorder = cycles.append
    result = simulate(nodes, Scheduler(prof), list(jobs), dataclasses.replace(options, seed=task.noise))
    table = result.jobs
    ran = ~np.isnan(table.start_s)
    bsld = float(np.mean(bounded_slowdown(table.wait_s[ran], table.duration_s[ran])))
    end = np.where(np.isnan(table.end_s), np.nanmax(table.end_s, initial=0.0), table.end_s)
    rate = 1.0 / np.maximum(table.duration_s, BOUND_S)
    played = PlayedEpisode(bsld, table.submit_s.astype(np.float64), end.astype(np.float64), rate)
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
