"""What happened in a run: the job table and the timeline, as typed column sets.

These are the contract between the simulator (which fills them) and the
metrics (which read them); both are plain numpy columns so that 100,000 jobs
stay cheap.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
StrArray = npt.NDArray[np.str_]


@dataclass(frozen=True, eq=False)
class JobTable:
    """One row per job. Times are seconds; ``start_s``/``end_s`` are NaN for a job that never ran.

    ``reason`` is empty for a job that ran, and otherwise says why it did not
    (rejected at arrival, or still pending when the run ended).
    ``held_idle_gpu_s`` counts GPU-seconds held by tasks of a partially bound
    gang while it waited for the rest (waste that gang scheduling prevents).
    ``preemptions`` counts evictions and ``lost_gpu_s`` the GPU-seconds of
    work they threw away (a requeued job restarts from the beginning).
    ``wait_reason`` is why the job was still waiting in the last cycle before
    it started, and ``estimated_start_s`` the first start a reservation
    promised it (NaN if none did). ``gpus`` counts a MIG instance a job ran on
    as its compute share (a 1g of 7 slices is 0.142), so that MIG jobs show
    and are charged the part of a GPU they held; a MIG job that never ran
    shows 0.
    """

    job_id: StrArray
    user: StrArray
    group: StrArray
    queue: StrArray
    pool: StrArray
    size_class: StrArray
    tasks: IntArray
    gpus: FloatArray
    submit_s: FloatArray
    start_s: FloatArray
    end_s: FloatArray
    duration_s: FloatArray
    time_limit_s: FloatArray
    nodes_used: IntArray
    node_names: StrArray
    held_idle_gpu_s: FloatArray
    reason: StrArray
    preemptions: IntArray
    lost_gpu_s: FloatArray
    wait_reason: StrArray
    estimated_start_s: FloatArray

    def __len__(self) -> int:
        return len(self.job_id)

    @property
    def ran(self) -> npt.NDArray[np.bool_]:
        """Mask of jobs that started."""
        return ~np.isnan(self.start_s)

    @property
    def wait_s(self) -> FloatArray:
        """Queue wait per job (NaN if it never started)."""
        return self.start_s - self.submit_s

    @property
    def jct_s(self) -> FloatArray:
        """Job completion time: submit to end (NaN if it never ended)."""
        return self.end_s - self.submit_s


@dataclass(frozen=True, eq=False)
class Timeline:
    """Cluster state after each scheduling cycle, one column per pool where it matters.

    ``allocated_gpus`` and ``queue_length`` have shape (samples, pools);
    ``fragmented_gpus`` counts free GPUs that no waiting job could use.
    """

    pools: tuple[str, ...]
    pool_gpus: IntArray
    time_s: FloatArray
    allocated_gpus: FloatArray
    queue_length: IntArray
    fragmented_gpus: FloatArray
    free_gpus: FloatArray
