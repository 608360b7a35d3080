"""A mixed-driver cluster in the simulator: each job runs only where NVIDIA's rules let its CUDA run.

The built-in cluster ``mixed-driver`` has A100 servers on driver 535 (R535,
data-center), V100 servers on 470 (R470, data-center) and RTX 4090 cards on
550 (consumer). A CUDA 11.8 job fills the A100s for an hour; then:

* CUDA 12.4 without cuda-compat cannot use R470 (12.x needs >= 525.60.13),
  so it takes an RTX card (550.54.15 >= 550.54.14, its own driver);
* CUDA 12.4 with cuda-compat runs on the V100s through forward compatibility;
* CUDA 13.0 with cuda-compat may use only the A100s (R535 is a forward-compatible
  branch for 13.x; the RTX is consumer, R470 too old) and waits for them
  although a V100 is free;
* CUDA 13.0 without cuda-compat needs driver >= 580.65.06: no node has it, so
  it is rejected when it arrives, with that reason.
"""

from __future__ import annotations

from dataclasses import replace

from builders import RecordingScheduler, a_job, by_id, profile
from loadmaster.config import load_cluster
from loadmaster.model import TraceJob
from loadmaster.model.cuda import CudaVersion
from loadmaster.sim import SimOptions, simulate


def cuda_job(job_id: str, cuda: str, tasks: int, gpus: int, at_s: float, compat: bool = False) -> TraceJob:
    job = a_job(job_id).tasks(tasks).gpus(gpus).submitted(at_s).limit(3600).build()
    return TraceJob(replace(job, cuda=CudaVersion.parse(cuda), cuda_compat=compat), 3600.0)


def test_each_job_lands_where_its_driver_rules_allow() -> None:
    cluster = load_cluster("mixed-driver")
    nodes = cluster.nodes
    jobs = [
        cuda_job("fill", "11.8", 4, 8, 0.0),
        cuda_job("cu124", "12.4", 1, 4, 10.0),
        cuda_job("cu124-compat", "12.4", 1, 8, 20.0, compat=True),
        cuda_job("cu130-compat", "13.0", 1, 8, 30.0, compat=True),
        cuda_job("cu130", "13.0", 1, 8, 40.0),
    ]
    scheduler = RecordingScheduler(profile("fifo", "gang", "cuda-compat", "first-fit", strict=False))
    result = simulate(nodes, scheduler, jobs, SimOptions(seed=0))

    def where(job_id: str) -> tuple[float, list[str]]:
        (bind,) = scheduler.binds_of(job_id)
        return bind.time_s, [nodes.nodes[p.node].name for p in bind.bind.placements]

    assert where("fill") == (0.0, ["a100-000", "a100-001", "a100-002", "a100-003"])
    assert where("cu124") == (10.0, ["rtx-000"])
    assert where("cu124-compat") == (20.0, ["v100-000"])
    start, placed = where("cu130-compat")
    assert start == 3600.0 and placed[0].startswith("a100-")
    assert scheduler.binds_of("cu130") == []
    reason = by_id(result.jobs, "reason")["cu130"]
    assert "CUDA 13.0 needs driver >= 580.65.06" in reason
    assert "535.104.05" in reason and "470.82.01" in reason and "550.54.15" in reason
