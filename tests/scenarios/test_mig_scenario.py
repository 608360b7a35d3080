"""MISSION.md's MIG case: seven small training jobs on one A100, one after another versus on seven 1g slices.

The speed model is explicit (:func:`loadmaster.model.mig.mig_speedup`): a small
job keeps only ``USED`` of a whole GPU's SMs busy (what it measured there); a
1g instance has 1/7 of the SMs, so on it the job runs at ``min(1/7, USED) / USED``
of its whole-GPU speed. Sequentially the seven jobs take ``7 * D``; in parallel
each takes ``D * USED * 7``, so the throughput gain is ``1 / USED``: 3x for a
job that uses a third of a GPU, the figure MISSION.md reports.
"""

from __future__ import annotations

import numpy as np
import pytest

from builders import profile
from loadmaster.model import Job, MigPoolConfig, Node, NodeTable, ResourceType, TaskRequest, TraceJob
from loadmaster.model.mig import MIG_MODELS, mig_speedup
from loadmaster.scheduling import Scheduler
from loadmaster.sim import SimOptions, simulate
from loadmaster.sim.mig import MigSimOptions

D_S = 3600.0
"""Each job's run time alone on a whole A100."""
USED = 1 / 3
"""Share of a whole A100's SMs a small job keeps busy."""
JOBS = 7


def a100_node() -> NodeTable:
    rtype = ResourceType("a100", "A100-SXM4-80GB", 81_920, 0, 0)
    return NodeTable.build([Node("n0", "small", "z", "r", "a100", 1, 8000, 64_000)], {"a100": rtype})


def small_jobs(request: TaskRequest, duration_s: float) -> list[TraceJob]:
    return [
        TraceJob(Job(f"j{i}", "u", "g", 0.0, 1, request, time_limit_s=10 * D_S), duration_s)
        for i in range(JOBS)
    ]


def makespan(jobs: list[TraceJob], mig: MigSimOptions | None) -> float:
    result = simulate(a100_node(), Scheduler(profile("fifo", "first-fit")), jobs, SimOptions(mig=mig))
    assert not np.isnan(result.jobs.end_s).any()
    return float(result.jobs.end_s.max())


def test_seven_1g_slices_give_about_three_times_the_throughput_of_one_whole_gpu() -> None:
    whole = makespan(small_jobs(TaskRequest(gpu_milli=1000), D_S), None)
    one_g = MIG_MODELS["A100-80GB"].profile("1g.10gb")
    slice_s = D_S / mig_speedup(USED, one_g.compute_slices, MIG_MODELS["A100-80GB"].compute_slices)
    mig = MigSimOptions(pools=(MigPoolConfig("small", "1g.10gb x7"),))
    sliced = makespan(small_jobs(TaskRequest(gpu_milli=0, mig_profile="1g.10gb"), slice_s), mig)
    assert whole == pytest.approx(JOBS * D_S)
    assert sliced == pytest.approx(D_S * USED * 7)
    assert whole / sliced == pytest.approx(1 / USED)
    assert whole / sliced == pytest.approx(3.0)


def test_a_job_that_fills_a_whole_gpu_gains_nothing_from_slices() -> None:
    one_g = MIG_MODELS["A100-80GB"].profile("1g.10gb")
    slice_s = D_S / mig_speedup(1.0, one_g.compute_slices)
    mig = MigSimOptions(pools=(MigPoolConfig("small", "1g.10gb x7"),))
    sliced = makespan(small_jobs(TaskRequest(gpu_milli=0, mig_profile="1g.10gb"), slice_s), mig)
    assert sliced == pytest.approx(JOBS * D_S)
