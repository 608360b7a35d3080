"""Timeline recording: allocation, queue length and fragmentation after each cycle."""

from __future__ import annotations

from collections import Counter

import numpy as np

from loadmaster.model import MILLI_PER_GPU, NodeTable, PendingJob, Timeline
from loadmaster.scheduling.mig_pool import MigPool


class TimelineRecorder:
    """Samples the cluster after every cycle; keeps per-pool counters up to date in O(1).

    Fragmentation at a sample is the number of wholly free GPUs sitting on
    nodes with fewer free GPUs than the smallest task any job waiting for
    that pool needs: GPUs that are free yet useless to the queue because they
    are scattered. A pool with nobody waiting has none.
    """

    def __init__(self, nodes: NodeTable) -> None:
        self.nodes = nodes
        self.pool_count = len(nodes.pools)
        self.pool_gpus = np.bincount(nodes.pool_index, weights=nodes.gpus, minlength=self.pool_count)
        self.queued = np.zeros(self.pool_count, dtype=np.int64)
        self.smallest_task: list[Counter[int]] = [Counter() for _ in nodes.pools]
        self.pool_rows = [np.flatnonzero(nodes.pool_index == p) for p in range(self.pool_count)]
        self._times: list[float] = []
        self._allocated: list[np.ndarray] = []
        self._queue: list[np.ndarray] = []
        self._fragmented: list[float] = []
        self._free: list[float] = []

    def _pools_of(self, pending: PendingJob) -> range | tuple[int]:
        pool = pending.job.pool
        if pool is None or pool not in self.nodes.pools:
            return range(self.pool_count)
        return (self.nodes.pools.index(pool),)

    def enqueue(self, pending: PendingJob) -> None:
        for pool in self._pools_of(pending):
            self.queued[pool] += 1
            self.smallest_task[pool][pending.job.request.whole_gpus] += 1

    def dequeue(self, pending: PendingJob) -> None:
        for pool in self._pools_of(pending):
            self.queued[pool] -= 1
            counts = self.smallest_task[pool]
            key = pending.job.request.whole_gpus
            counts[key] -= 1
            if not counts[key]:
                del counts[key]

    def sample(
        self,
        time_s: float,
        gpu_free: np.ndarray,
        free_milli: np.ndarray,
        mig: MigPool | None = None,
        whole_free: np.ndarray | None = None,
    ) -> None:
        """Record the state after a cycle at ``time_s``; with ``mig``, a MIG-mode GPU counts as allocated
        only as far as its instances in use go (the per-GPU arrays show it as never free).
        ``whole_free``: the wholly free GPUs per node, where the caller keeps them (else counted)."""
        free = free_milli if mig is None else free_milli + mig.idle_gpus() * MILLI_PER_GPU
        free_per_pool = np.bincount(self.nodes.pool_index, weights=free, minlength=self.pool_count)
        self._times.append(time_s)
        self._allocated.append(self.pool_gpus - free_per_pool / MILLI_PER_GPU)
        self._queue.append(self.queued.copy())
        self._free.append(float(free_per_pool.sum()) / MILLI_PER_GPU)
        self._fragmented.append(self._fragmentation(gpu_free, whole_free))

    def _fragmentation(self, gpu_free: np.ndarray, whole_free: np.ndarray | None) -> float:
        total = 0.0
        for pool, counts in enumerate(self.smallest_task):
            smallest = min(counts) if counts else 0
            if smallest <= 1:
                continue  # nobody waits here, or a 1-GPU (or smaller) task can use any free GPU
            rows = self.pool_rows[pool]
            if whole_free is None:
                whole = np.count_nonzero(gpu_free[rows] == MILLI_PER_GPU, axis=1)
            else:
                whole = whole_free[rows]  # the same counts, kept by the caller node by node
            total += float(whole[whole < smallest].sum())
        return total

    def timeline(self) -> Timeline:
        pools = len(self.nodes.pools)
        return Timeline(
            pools=self.nodes.pools,
            pool_gpus=self.pool_gpus.astype(np.int64),
            time_s=np.asarray(self._times, dtype=float),
            allocated_gpus=np.asarray(self._allocated, dtype=float).reshape(-1, pools),
            queue_length=np.asarray(self._queue, dtype=np.int64).reshape(-1, pools),
            fragmented_gpus=np.asarray(self._fragmented, dtype=float),
            free_gpus=np.asarray(self._free, dtype=float),
        )
