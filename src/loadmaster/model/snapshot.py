"""The frozen, per-cycle view of a cluster that the scheduler decides on."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.model.job import PendingJob, RunningJob
from loadmaster.model.node import NodeTable


@dataclass(frozen=True, eq=False)
class ClusterSnapshot:
    """What the scheduler sees in one cycle.

    ``gpu_free_milli`` has shape (nodes, max_gpus): free milli-GPU of each GPU
    (1000 = wholly free, 0 = fully taken or no such GPU). ``cpu_free_milli``
    and ``memory_free_mib`` are per node. Arrays are read-only; the scheduler
    works on its own copies. ``pending`` is in submission order.
    """

    nodes: NodeTable
    gpu_free_milli: npt.NDArray[np.int64]
    cpu_free_milli: npt.NDArray[np.int64]
    memory_free_mib: npt.NDArray[np.int64]
    running: Sequence[RunningJob]
    pending: Sequence[PendingJob]

    @classmethod
    def empty(cls, nodes: NodeTable, pending: Sequence[PendingJob] = ()) -> ClusterSnapshot:
        """The cluster with nothing running: every resource free."""
        gpu_free = np.where(nodes.gpu_exists(), 1000, 0).astype(np.int64)
        return cls(
            nodes=nodes,
            gpu_free_milli=gpu_free,
            cpu_free_milli=nodes.cpu_milli.copy(),
            memory_free_mib=nodes.memory_mib.copy(),
            running=(),
            pending=tuple(pending),
        )
