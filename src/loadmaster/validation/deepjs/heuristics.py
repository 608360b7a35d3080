"""CloudSimPy's heuristics (Random, FirstFit, Tetris) with their quirks, and an SJF baseline."""

from __future__ import annotations

import math
from dataclasses import dataclass

import numpy as np

from loadmaster.validation.deepjs.chooser import Chooser, Decision, Snapshot, fits

RANDOM_THRESHOLD = 0.8
"""RandomAlgorithm's default ``threshold``: a fitting pair is taken when a draw exceeds it."""


@dataclass(frozen=True)
class FirstFitChooser:
    """CloudSimPy's FirstFitAlgorithm: for each machine, the first task that fits; the LAST such machine wins.

    Its loop only breaks out of the inner (task) loop, so later machines
    overwrite the pick: in effect "last machine with room, first task there".
    """

    name: str = "FirstFit"

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The reference's pick, quirk included."""
        picked = None
        for machine in snapshot.machines:
            task = next((t for t in snapshot.tasks if fits(machine, t)), None)
            if task is not None:
                picked = Decision(machine.index, task.index)
        return picked


@dataclass(frozen=True)
class RandomChooser:
    """CloudSimPy's RandomAlgorithm: one ``rng.rand()`` per fitting pair, machine-major.

    Within a machine the first pair whose draw exceeds ``threshold`` is taken
    and the rest of that machine skipped; later machines may overwrite it
    (inner break only). If no draw exceeded it, one ``rng.randint`` picks
    uniformly among all fitting pairs. The draws are the reference's, in its
    order, so the same seed gives its exact choices.
    """

    threshold: float = RANDOM_THRESHOLD
    name: str = "Random"

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The reference's pick with the reference's draws."""
        candidates: list[Decision] = []
        picked = None
        for machine in snapshot.machines:
            for task in snapshot.tasks:
                if fits(machine, task):
                    candidates.append(Decision(machine.index, task.index))
                    if rng.rand() > self.threshold:
                        picked = candidates[-1]
                        break
        if not candidates or picked is not None:
            return picked
        return candidates[int(rng.randint(0, len(candidates)))]


@dataclass(frozen=True)
class TetrisChooser:
    """CloudSimPy's Tetris: the fitting pair with the largest free-(cpu, memory) . task-(cpu, memory).

    Ties go to the first pair in machine-major order (``np.argmax``). Disk is
    not in the score, as in the reference.
    """

    name: str = "Tetris"

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The best-aligned pair, or None when nothing fits."""
        best, best_score = None, -math.inf
        for machine, task in snapshot.pairs():
            score = machine.cpu * task.cpu + machine.memory * task.memory
            if score > best_score:
                best, best_score = Decision(machine.index, task.index), score
        return best


@dataclass(frozen=True)
class SJFChooser:
    """Shortest instance duration first, on the first machine it fits (not a reference policy).

    Among tasks that fit somewhere, the one with the shortest duration (ties:
    earlier job, then file order) goes to the lowest-numbered machine with
    room. Tasks that fit nowhere do not block the others. It is the
    job-ordering baseline a learned policy should beat.
    """

    name: str = "SJF"

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The shortest task that fits, first fit."""
        for task in sorted(snapshot.tasks, key=lambda t: t.duration):
            machine = next((m for m in snapshot.machines if fits(m, task)), None)
            if machine is not None:
                return Decision(machine.index, task.index)
        return None


def heuristics() -> tuple[Chooser, ...]:
    """The reference's three heuristics and the SJF baseline, in table order."""
    return (RandomChooser(), FirstFitChooser(), TetrisChooser(), SJFChooser())
