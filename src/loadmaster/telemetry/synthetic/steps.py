"""A training job's steps: randomness as a hash of (seed, stream, keys), the per-job parameters drawn
from it, and the step schedule with the cumulative time each rank spent stalled, computing and
communicating."""

from __future__ import annotations

from dataclasses import dataclass
from functools import cached_property

import numpy as np
import numpy.typing as npt

from loadmaster.telemetry.buckets import FloatArray, IntArray
from loadmaster.telemetry.synthetic.plan import PlannedJob

Matrix = npt.NDArray[np.float64]


def mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser: a bijective scramble of 64-bit keys."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def uniform(seed: int, stream: int, a: npt.ArrayLike, b: npt.ArrayLike = 0) -> FloatArray:
    """Uniform [0, 1) numbers that depend only on (seed, stream, a, b), elementwise."""
    with np.errstate(over="ignore"):
        key = np.asarray(a, dtype=np.int64).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        key = mix(key ^ (np.asarray(b, dtype=np.int64).astype(np.uint64) + np.uint64(0x632BE59BD9B4E019)))
        key = mix(key ^ np.uint64((seed * 1_000_003 + stream) & 0xFFFFFFFFFFFFFFFF))
    return (key >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


@dataclass(frozen=True)
class StepSchedule:
    """A training job's steps: start times (K + 1 edges), and per step the stall, per-rank compute,
    the slowest compute and the communication time. Ranks are the job's GPUs in order."""

    edges: FloatArray
    stall: FloatArray
    compute: Matrix
    slowest: FloatArray
    comm: FloatArray

    @cached_property
    def _sums(self) -> tuple[FloatArray, Matrix, FloatArray]:
        """Running totals of stall, compute and comm before each step, made once per schedule."""
        cs = np.concatenate(([0.0], np.cumsum(self.stall)))
        cm = np.concatenate(([0.0], np.cumsum(self.comm)))
        cc = np.concatenate((np.zeros((self.compute.shape[0], 1)), np.cumsum(self.compute, axis=1)), axis=1)
        return cs, cc, cm

    def cumulative(self, x: FloatArray) -> tuple[Matrix, Matrix, Matrix]:
        """Seconds of (stall, compute per rank, comm) since the job started, at each time in ``x``.

        ``compute`` has one row per rank, or a single row shared by every rank when no fault sets
        a rank apart (the caller broadcasts it).
        """
        k = np.clip(np.searchsorted(self.edges, x, side="right") - 1, 0, self.stall.size - 1)
        off = np.clip(x - self.edges[0], 0.0, None) - (self.edges[k] - self.edges[0])
        off = np.minimum(off, self.edges[k + 1] - self.edges[k])
        cs, cc, cm = self._sums
        stall = cs[k] + np.clip(off, 0.0, self.stall[k])
        after = off - self.stall[k]
        compute = cc[:, k] + np.clip(after[None, :], 0.0, self.compute[:, k])
        comm = cm[k] + np.clip(after - self.slowest[k], 0.0, self.comm[k])
        return stall, compute, comm


@dataclass(frozen=True)
class JobParams:
    index: int
    spec: PlannedJob
    rows: IntArray
    """Rows (GPU series ids) of the job's GPUs, in rank order."""
    step_s: float
    compute_share: float
    tensor_share: float
    memory_fraction: float
    ramp_s: float
