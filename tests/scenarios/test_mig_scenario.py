"""The MIG case of docs/design-principles.md: seven small training jobs on one A100, in turn or on 1g slices.

The speed model is explicit (:func:`loadmaster.model.mig.mig_speedup`): a small
job keeps only ``USED`` of a whole GPU's SMs busy (what it measured there); a
1g instance has 1/7 of the SMs, so on it the job runs at ``min(1/7, USED) / USED``
of its whole-GPU speed. Sequentially the seven jobs take ``7 * D``; in parallel
each takes ``D * USED * 7``, so the throughput gain is ``1 / USED``: 3x for a
job that uses a third of a GPU, the figure docs/design-principles.md reports.

Then the other half of the production move: notebooks in a pool configured so
(``interactive_default: smallest-fit``) land on the smallest MIG slice that
holds their GPU memory, and nothing changes where the pool does not opt in.
"""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builders import profile
from loadmaster.config import load_cluster, load_workload
from loadmaster.model import (
    Job,
    MigPoolConfig,
    Node,
    NodeTable,
    ResourceType,
    TaskPlacement,
    TaskRequest,
    TraceJob,
)
from loadmaster.model.mig import MIG_MODELS, mig_speedup
from loadmaster.scheduling import Scheduler
from loadmaster.scheduling.mig_plan import with_interactive_default
from loadmaster.sim import SimOptions, Simulator, simulate
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


# Interactive jobs default to MIG slices where the pool says so (issue 8, "Requests").

FIXTURES = Path(__file__).parent.parent / "fixtures" / "mig"


def held_placements(cluster_file: Path) -> tuple[list[TraceJob], dict[str, tuple[TaskPlacement, ...]]]:
    """The lab workload on ``cluster_file`` as ``simulate`` gets it, and what each job held when it ran."""
    cluster = load_cluster(str(cluster_file))
    jobs = with_interactive_default(
        load_workload(str(FIXTURES / "workload.yaml"), cluster).jobs, cluster.mig, cluster.nodes
    )
    options = SimOptions(mig=MigSimOptions(cluster.mig))
    sim = Simulator(cluster.nodes, Scheduler(profile("fifo", "first-fit")), jobs, options)
    held: dict[str, tuple[TaskPlacement, ...]] = {}
    sim.start()
    while sim.events:
        sim.step()
        for job_id, running in sim.cluster.running.items():
            held.setdefault(job_id, running.placements)
    assert len(held) == len(jobs)  # every job ran: none asked for what the pool cannot give
    return jobs, held


def test_notebooks_land_on_the_smallest_mig_slice_that_holds_them() -> None:
    jobs, held = held_placements(FIXTURES / "interactive-smallest-fit.yaml")
    landed: dict[str, int] = {}
    for trace in jobs:
        job = trace.job
        placement = held[job.id][0]
        memory = job.request.gpu_memory_mib  # kept when the request becomes a profile
        if job.pool != "interactive":
            assert placement.mig is None  # training keeps whole GPUs
            continue
        expected = "1g.6gb" if memory <= 6 * 1024 else "2g.12gb" if memory <= 12 * 1024 else None
        if expected is None:  # too big for any slice of the layout: a whole GPU of the non-MIG half
            assert placement.mig is None and placement.gpu_indices[0] >= 2
        else:
            assert placement.mig is not None and placement.mig.profile == expected
            assert placement.mig.gpu < 2 and placement.gpu_indices == ()
        landed[expected or "whole GPU"] = landed.get(expected or "whole GPU", 0) + 1
    assert landed == {"1g.6gb": 60, "2g.12gb": 39, "whole GPU": 46}


def test_without_the_setting_notebooks_keep_whole_gpus(tmp_path: Path) -> None:
    plain = tmp_path / "plain.yaml"
    text = (FIXTURES / "interactive-smallest-fit.yaml").read_text()
    plain.write_text("\n".join(line for line in text.splitlines() if "interactive_default" not in line))
    _, held = held_placements(plain)
    assert all(p.mig is None for placements in held.values() for p in placements)


def test_the_job_table_counts_a_mig_job_as_its_compute_share() -> None:
    """Seven 1g jobs on one A100 each held a seventh of it: the table says so, not 0 GPUs."""
    mig = MigSimOptions(pools=(MigPoolConfig("small", "1g.10gb x7"),))
    jobs = small_jobs(TaskRequest(gpu_milli=0, mig_profile="1g.10gb"), D_S)
    table = simulate(a100_node(), Scheduler(profile("fifo", "first-fit")), jobs, SimOptions(mig=mig)).jobs
    assert np.allclose(table.gpus, 142 / 1000)
    whole = simulate(
        a100_node(), Scheduler(profile("fifo", "first-fit")), small_jobs(TaskRequest(1000), D_S)
    ).jobs
    assert np.allclose(whole.gpus, 1.0)
