"""The timeline's fragmentation reads the simulator's whole-GPU counts as it would count them itself.

The simulator keeps each node's wholly free GPUs up to date and hands them to the recorder, which
otherwise counts them from the per-GPU array at every sample; both must give the same timeline.
"""

from __future__ import annotations

import numpy as np
import pytest

from builders import a_cluster, a_job
from loadmaster.model import MILLI_PER_GPU, PendingJob, gpu_summary
from loadmaster.sim.recorder import TimelineRecorder


@pytest.mark.parametrize("seed", range(5))
def test_fragmentation_from_kept_counts_equals_counting(seed: int) -> None:
    rng = np.random.default_rng(seed)
    nodes = a_cluster().nodes(30, gpus=8).nodes(10, gpus=4, pool="small").build()
    counted, kept = TimelineRecorder(nodes), TimelineRecorder(nodes)
    for i, gpus in enumerate((2, 4, 8, 3)):
        for recorder in (counted, kept):
            recorder.enqueue(PendingJob(a_job(f"j{i}").gpus(gpus).build()))
    for step in range(20):
        free = rng.choice([0, 500, MILLI_PER_GPU], size=(len(nodes.nodes), 8)) * nodes.gpu_exists()
        whole, _, total = gpu_summary(free)
        counted.sample(float(step), free, total)
        kept.sample(float(step), free, total, whole_free=whole)
    assert counted.timeline().fragmented_gpus.tolist() == kept.timeline().fragmented_gpus.tolist()
    assert sum(counted.timeline().fragmented_gpus) > 0  # the case exercises the count
