"""Per-job outcome columns, filled as a simulation runs, and the job table built from them."""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np

from loadmaster.model import MILLI_PER_GPU, JobTable, TraceJob


class JobLog:
    """What happened to each job, by its index in submission order."""

    def __init__(self, count: int) -> None:
        self.start = np.full(count, np.nan)
        self.end = np.full(count, np.nan)
        self.nodes_used = np.zeros(count, dtype=np.int64)
        self.node_names = [""] * count
        self.held_idle_gpu_s = np.zeros(count)
        self.reason = [""] * count
        self.preemptions = np.zeros(count, dtype=np.int64)
        self.lost_gpu_s = np.zeros(count)
        self.wait_reason = [""] * count
        self.estimated_start = np.full(count, np.nan)
        self.mig_milli = np.zeros(count)
        """Compute share (milli-GPU) of the MIG instances a job ran on; 0 for whole or shared GPUs."""

    def table(self, traces: Sequence[TraceJob]) -> JobTable:
        """The job table of ``traces`` (in the order the log was indexed)."""
        jobs = [t.job for t in traces]
        return JobTable(
            job_id=np.array([j.id for j in jobs], dtype=str),
            user=np.array([j.user for j in jobs], dtype=str),
            group=np.array([j.group for j in jobs], dtype=str),
            queue=np.array([j.queue for j in jobs], dtype=str),
            pool=np.array([j.pool or "*" for j in jobs], dtype=str),
            size_class=np.array([j.size_class for j in jobs], dtype=str),
            tasks=np.array([j.tasks for j in jobs], dtype=np.int64),
            gpus=np.array([j.gpus for j in jobs], dtype=float) + self.mig_milli / MILLI_PER_GPU,
            submit_s=np.array([j.submit_s for j in jobs], dtype=float),
            start_s=self.start,
            end_s=self.end,
            duration_s=np.array([t.duration_s for t in traces], dtype=float),
            time_limit_s=np.array([j.time_limit_s for j in jobs], dtype=float),
            nodes_used=self.nodes_used,
            node_names=np.array(self.node_names, dtype=str),
            held_idle_gpu_s=self.held_idle_gpu_s,
            reason=np.array(self.reason, dtype=str),
            preemptions=self.preemptions,
            lost_gpu_s=self.lost_gpu_s,
            wait_reason=np.array(self.wait_reason, dtype=str),
            estimated_start_s=self.estimated_start,
        )
