"""The DeepJS policy interface: what a chooser sees (machines, waiting tasks) and what it returns."""

from __future__ import annotations

from collections.abc import Iterator
from dataclasses import dataclass
from typing import Protocol

import numpy as np

from loadmaster.validation.deepjs.trace import MACHINE_CPU, MACHINE_DISK, MACHINE_MEMORY


@dataclass(frozen=True, slots=True)
class MachineView:
    """A machine as a chooser sees it: free resources now (floats, as the reference keeps them)."""

    index: int
    cpu: float
    memory: float
    disk: float
    cpu_capacity: float = MACHINE_CPU
    memory_capacity: float = MACHINE_MEMORY
    disk_capacity: float = MACHINE_DISK


@dataclass(frozen=True, slots=True)
class TaskView:
    """A task with instances still waiting; all its instances are alike, so a chooser picks the task.

    ``waited`` is now - the job's submit time, in trace time units.
    """

    index: int
    job_id: int
    task_id: int
    cpu: float
    memory: float
    disk: float
    duration: float
    instances: int
    waiting_instances: int
    running_instances: int
    submit: int
    waited: float


def fits(machine: MachineView, task: TaskView) -> bool:
    """Whether one instance of ``task`` fits the free resources of ``machine`` (``Machine.accommodate``)."""
    return machine.cpu >= task.cpu and machine.memory >= task.memory and machine.disk >= task.disk


@dataclass(frozen=True, slots=True)
class Snapshot:
    """What a chooser may look at: the time, every machine, and the tasks with waiting instances.

    Tasks come in the reference's order: jobs by arrival, tasks in file order.
    """

    now: float
    machines: tuple[MachineView, ...]
    tasks: tuple[TaskView, ...]

    def pairs(self) -> Iterator[tuple[MachineView, TaskView]]:
        """Every fitting (machine, task) pair, machine-major as the reference enumerates them."""
        for machine in self.machines:
            for task in self.tasks:
                if fits(machine, task):
                    yield machine, task


@dataclass(frozen=True, slots=True)
class Decision:
    """Start one instance of ``snapshot.tasks[task]`` on ``snapshot.machines[machine]`` (indices)."""

    machine: int
    task: int


class Chooser(Protocol):
    """A DeepJS policy: called again and again at each tick until it returns None.

    Every call after a decision sees the resources that decision took. It
    must return a pair that fits (checked; a misfit raises
    :class:`SimulationError`). ``rng`` is a legacy ``RandomState`` seeded per
    run, because the reference's Random draws from ``np.random`` after
    ``np.random.seed(41)``; a chooser that needs no randomness ignores it.
    """

    @property
    def name(self) -> str:
        """The name in result tables."""
        ...

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The next instance to start, or None to wait for the next tick."""
        ...
