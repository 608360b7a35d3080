"""What the ranking trainer plays: simulator episodes in a profile or episodes that play themselves,
what a played episode gives the update, the built-in lab workload and a training family of it."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from functools import cache
from typing import Protocol, runtime_checkable

import numpy as np
import numpy.typing as npt

from loadmaster.config import Cluster, load_cluster, load_workload
from loadmaster.errors import ConfigError
from loadmaster.model import NodeTable, TraceJob
from loadmaster.rl.family import FamilyPoint, family, validation_seed
from loadmaster.rl.rank.config import F32, VALIDATION_STREAM, Layers
from loadmaster.scheduling import PluginSpec, Profile, build_profile
from loadmaster.sim import SimOptions

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
    """A built-in workload on the lab cluster, gang + bin packing + EASY backfill, as the
    ``learned`` profile with backfilling serves (the learned order in ``sjf-backfill``'s place)."""

    jobs: int = 512
    loads: tuple[float, ...] = (0.9, 1.1)
    commits: bool = False
    workload: str = "lab"
    """The built-in workload drawn (``lab``; ``lab-habits``: users who keep habits)."""

    def episode(self, stream: int, index: int) -> Episode:
        rng = np.random.default_rng([stream, index])
        cluster = _lab_cluster()
        load = self.loads[index % len(self.loads)]
        sample = load_workload(
            self.workload, cluster, jobs=self.jobs, load=load, seed=int(rng.integers(2**31 - 1))
        )
        return cluster.nodes, sample.jobs, SimOptions(seed=int(rng.integers(2**31 - 1)))

    def profile(self, checkpoint: str, explore: float) -> Profile:
        plugins = [
            PluginSpec("learned", {"checkpoint": checkpoint, "strict": True, "explore": explore}),
            PluginSpec("gang", {}),
            PluginSpec("binpack", {}),
            PluginSpec("backfill", {"mode": "easy"}),
        ]
        return build_profile("learned-lab", ["allocate", "backfill"], plugins, source="rl.rank")


@dataclass(frozen=True, slots=True)
class FamilyEpisodes:
    """A training family's workloads (:mod:`loadmaster.rl.family`) on the lab cluster, in the
    profile of :class:`LabEpisodes` (gang + bin packing + EASY backfill): every episode draws its
    own point of the family (the offered load and the model's parameters), then its jobs, so that
    a checkpoint trains on many workloads and cannot memorise one trace.

    The trainer's validation stream (:data:`~loadmaster.rl.rank.config.VALIDATION_STREAM`) plays the
    family's validation windows (:func:`~loadmaster.rl.family.validation_seed`, drawn as
    ``rl train --family`` draws them), which no training stream reaches; no draw comes near a
    held-out test workload (:func:`~loadmaster.rl.family.excluded`)."""

    family: str = "lab"
    jobs: int = 512
    commits: bool = False

    def __post_init__(self) -> None:
        family(self.family)  # a ConfigError naming the known families, before any worker starts
        if self.jobs < 1:
            raise ConfigError("FamilyEpisodes", "jobs", f"must be >= 1, got {self.jobs}")

    def draw(self, stream: int, index: int) -> tuple[FamilyPoint, int]:
        """The family point of episode ``index`` of ``stream`` and the seed of its jobs
        (deterministic; the validation stream draws from the family's validation seeds)."""
        seed = validation_seed(index) if stream == VALIDATION_STREAM else [stream, index]
        rng = np.random.default_rng(seed)
        workload_seed = int(rng.integers(2**31 - 1))
        return family(self.family).draw(rng), workload_seed

    def episode(self, stream: int, index: int) -> Episode:
        point, seed = self.draw(stream, index)
        cluster = _lab_cluster()
        sample = load_workload(
            family(self.family).workload,
            cluster,
            jobs=self.jobs,
            load=point.load,
            seed=seed,
            params=point.params(),
        )
        return cluster.nodes, sample.jobs, SimOptions(seed=seed)

    def profile(self, checkpoint: str, explore: float) -> Profile:
        return LabEpisodes().profile(checkpoint, explore)


@cache
def _lab_cluster() -> Cluster:
    return load_cluster("lab")
