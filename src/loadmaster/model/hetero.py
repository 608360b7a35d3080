"""A cluster of several GPU types, a job's speed on each, and a job measured in steps.

Gavel (Narayanan et al., "Heterogeneity-Aware Cluster Scheduling Policies for
Deep Learning Workloads", OSDI'20) models a job as a number of training steps
and a GPU type by how many steps per second each job type makes on it. The
event simulator's jobs have a duration instead; these types are the round
simulator's (``loadmaster.sim.rounds``), so runs that do not use them pay
nothing for them.
"""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field

from loadmaster.errors import ModelError


@dataclass(frozen=True)
class HeteroCluster:
    """GPUs by type (``{"v100": 8, "p100": 16, "k80": 24}``), each a one-GPU worker as Gavel has them."""

    gpus: Mapping[str, int]

    def __post_init__(self) -> None:
        if not self.gpus:
            raise ModelError("a heterogeneous cluster needs at least one GPU type")
        for name, count in self.gpus.items():
            if not name or count < 0 or count != int(count):
                raise ModelError(f"GPU type {name!r}: count must be a whole number >= 0, got {count!r}")

    @property
    def types(self) -> tuple[str, ...]:
        """The GPU types in name order (the columns of every allocation matrix, as Gavel sorts them)."""
        return tuple(sorted(self.gpus))

    def counts(self) -> tuple[int, ...]:
        """The GPU count of each type, in :attr:`types` order."""
        return tuple(int(self.gpus[t]) for t in self.types)

    @classmethod
    def parse(cls, spec: str) -> HeteroCluster:
        """``"v100=8,p100=16,k80=24"`` as a cluster; an error names the bad part."""
        gpus: dict[str, int] = {}
        for part in spec.split(","):
            name, sep, count = part.partition("=")
            if not sep or not name.strip() or not count.strip().isdigit():
                raise ModelError(f"cluster {spec!r}: {part!r} is not TYPE=COUNT (e.g. v100=8)")
            gpus[name.strip()] = int(count)
        return cls(gpus)


JobKey = tuple[str, int]
"""A job type and its worker count (``("ResNet-50 (batch size 64)", 4)``): how Gavel keys its throughputs."""


@dataclass(frozen=True)
class ThroughputTable:
    """Steps per second of each (job type, worker count) on each GPU type; 0 where the job does not run."""

    steps_per_s: Mapping[JobKey, Mapping[str, float]]
    source: str = "throughput table"

    def __post_init__(self) -> None:
        for key, row in self.steps_per_s.items():
            for gpu, rate in row.items():
                if not math.isfinite(rate) or rate < 0:
                    raise ModelError(f"{self.source}: {key} on {gpu}: steps/s must be >= 0, got {rate!r}")

    def rates(self, key: JobKey, types: tuple[str, ...]) -> tuple[float, ...]:
        """The job's steps/s on each of ``types``; an error names the missing job type or GPU type."""
        row = self.steps_per_s.get(key)
        if row is None:
            known = sorted({k[0] for k in self.steps_per_s})
            raise ModelError(
                f"{self.source}: no throughput for job type {key[0]!r} with {key[1]} workers"
                f" (known job types: {', '.join(known[:8])}{', ...' if len(known) > 8 else ''})"
            )
        missing = [t for t in types if t not in row]
        if missing:
            raise ModelError(f"{self.source}: {key}: no throughput on GPU type(s) {missing}")
        return tuple(row[t] for t in types)


@dataclass(frozen=True)
class StepJob:
    """A job of ``total_steps`` training steps on ``scale_factor`` GPUs of one type at a time."""

    job_id: int
    job_type: str
    scale_factor: int
    total_steps: int
    arrival_s: float
    priority_weight: float = 1.0
    key: JobKey = field(init=False)

    def __post_init__(self) -> None:
        if self.scale_factor < 1 or self.total_steps < 1 or self.arrival_s < 0 or self.priority_weight <= 0:
            raise ModelError(
                f"job {self.job_id}: scale_factor >= 1, total_steps >= 1, arrival_s >= 0 and"
                f" priority_weight > 0 needed, got {self.scale_factor}, {self.total_steps},"
                f" {self.arrival_s}, {self.priority_weight}"
            )
        object.__setattr__(self, "key", (self.job_type, self.scale_factor))
