"""Failed placements kept across cycles by the free resources they were tried on (``view_failures``).

The memo is exact only if a failure is a function of what its key holds: the free resources, the
node table, the allowed nodes and what fit reads of the job. The runs below compare, cycle by
cycle, every decision and every waiting job's status of a backfilling profile with the memo and
without it, on the lab cluster where thousands of placements fail on shadows that come back.
"""

from __future__ import annotations

import random
from typing import Any

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import StatusLog, assert_same_tables, lab_runs_with_and_without, profile
from loadmaster.model import Job, Node, NodeTable, ResourceType, TaskRequest, TraceJob
from loadmaster.model.cuda import CudaVersion
from loadmaster.scheduling.status import unschedulable
from loadmaster.scheduling.view_failures import PER_VIEW, VIEWS, ViewFailures
from loadmaster.sim import SimOptions, simulate

RUNS = [("sds", 1.1), ("slurm", 1.1), ("nsml", 1.6), ("learned", 1.1)]


@pytest.mark.parametrize(("name", "load"), RUNS)
def test_every_cycle_decides_and_explains_as_without_the_memo(name: str, load: float) -> None:
    (jobs, kept), (jobs_off, off) = lab_runs_with_and_without(name, load, ["_view_failures"])
    remembered, tried = kept.placements_remembered
    assert remembered > 0 and tried > 0, "the memo answered nothing: this run would prove nothing"
    assert off.placements_remembered == (0, 0)
    assert len(kept.cycles) == len(off.cycles)
    for number, (with_memo, without) in enumerate(zip(kept.cycles, off.cycles, strict=True)):
        assert with_memo == without, f"cycle {number} differs"
    assert_same_tables(jobs, jobs_off)


def test_a_failure_is_answered_only_for_the_same_view_and_key() -> None:
    memo = ViewFailures()
    failure = unschedulable("0 of 4 nodes have a free GPU", "fit")
    memo.put(("nodes", b"\x00\x01"), ("mask", 1000), failure)
    assert memo.get(("nodes", b"\x00\x01"), ("mask", 1000)) is failure
    assert memo.get(("nodes", b"\x00\x02"), ("mask", 1000)) is None  # one byte of free resources
    assert memo.get(("nodes", b"\x00\x01"), ("mask", 2000)) is None  # another request
    assert (memo.hits, memo.misses) == (1, 1)


def test_the_memo_keeps_the_newest_views_and_a_bounded_number_of_failures_each() -> None:
    memo = ViewFailures()
    failure = unschedulable("no room", "fit")
    for view in range(VIEWS + 5):
        memo.put(view, "key", failure)
    assert memo.get(0, "key") is None  # the oldest views are dropped
    assert memo.get(VIEWS + 4, "key") is failure
    for key in range(PER_VIEW + 1):
        memo.put("busy", key, failure)
    assert memo.get("busy", 0) is None  # a full view starts afresh
    assert memo.get("busy", PER_VIEW) is failure


def _small_cluster(draw: random.Random) -> NodeTable:
    """2-5 nodes of 2-8 GPUs, some with little CPU or memory, a task limit or a CUDA driver label."""
    nodes = []
    for i in range(draw.randint(2, 5)):
        labels = {}
        if draw.random() < 0.5:
            major = str(draw.choice([470, 525, 535, 550]))
            labels = {
                f"nvidia.com/cuda.driver.{k}": v for k, v in (("major", major), ("minor", "0"), ("rev", "0"))
            }
        nodes.append(
            Node(
                name=f"n{i}",
                pool="default",
                zone="z0",
                rack=f"r{i % 2}",
                resource_type="gpu",
                gpus=draw.choice([2, 4, 8]),
                cpu_milli=draw.choice([16_000, 64_000]),
                memory_mib=draw.choice([65_536, 262_144]),
                labels=labels,
                max_pods=draw.choice([None, None, 3, 6]),
            )
        )
    kind = ResourceType(
        name="gpu", gpu_model="A100", gpu_memory_mib=80_000, cpu_milli_per_gpu=0, memory_mib_per_gpu=0
    )
    return NodeTable.build(nodes, {"gpu": kind})


def _small_trace(draw: random.Random) -> list[TraceJob]:
    """20-60 jobs: gangs, whole, shared and CPU-only requests, partial minimums, CUDA versions."""
    trace, submit_s = [], 0.0
    for i in range(draw.randint(20, 60)):
        submit_s += draw.expovariate(1 / 20)
        tasks = draw.choice([1, 1, 1, 2, 3, 4])
        gpu = draw.choice([0, 250, 500, 1000, 1000, 2000, 4000, 8000])
        cpu, memory = draw.choice([0, 1000, 4000, 8000]), draw.choice([0, 4096, 32_768])
        run_s = draw.choice([30, 60, 200, 600, 1500])
        job = Job(
            id=f"j{i}",
            user=f"u{draw.randint(0, 2)}",
            group="g",
            submit_s=round(submit_s, 1),
            tasks=tasks,
            request=TaskRequest(
                gpu_milli=gpu, cpu_milli=cpu or (0 if gpu or memory else 1000), memory_mib=memory
            ),
            time_limit_s=run_s * draw.choice([1, 1.5, 3]),
            min_available=draw.choice([0, 0, tasks, max(1, tasks - 1), 1]),
            cuda=draw.choice([None, None, CudaVersion(11, 4), CudaVersion(12, 2), CudaVersion(12, 4)]),
            cuda_compat=draw.random() < 0.3,
            priority_value=draw.choice([0, 10, 100]),
        )
        trace.append(TraceJob(job, run_s))
    return trace


def _backfilling_profile(draw: random.Random) -> tuple[list[str], dict[str, Any]]:
    """A backfilling profile: either order, any score, gangs or not, CUDA filter, EASY or
    conservative with any of the backfill options, lanes, partial gangs, preemption."""
    plugins = [draw.choice(["fifo", "multifactor"])]
    plugins.append(draw.choice(["binpack", "first-fit", "spread", "fgd", "random", "tetris", "best-fit"]))
    plugins += [name for name, odds in (("gang", 0.6), ("cuda-compat", 0.5)) if draw.random() < odds]
    backfill: dict[str, Any] = {"mode": draw.choice(["easy", "conservative"])}
    for option, value, odds in (
        ("interval_s", 50.0, 0.3),
        ("end_before_reservation", True, 0.3),
        ("max_job_test", draw.choice([3, 10]), 0.2),
        ("starvation_s", 300.0, 0.2),
        ("submission_order", True, 0.2),
        ("estimate", "history", 0.2),
        ("early_ends", 2.0, 0.2),
        ("depth", draw.choice([1, 2, 4]), 0.2),
    ):
        if draw.random() < odds:
            backfill[option] = value
    args: dict[str, Any] = {"backfill": backfill}
    plugins.append("backfill")
    if draw.random() < 0.3:
        plugins.append("yarn")
    if draw.random() < 0.3:
        plugins.append("multi-queue")
        args["multi-queue"] = {"queues": [{"name": "small", "max_gpus": 2}, {"name": "large"}]}
    if draw.random() < 0.3:
        plugins.append("priority-preempt")
    return plugins, args


@settings(max_examples=20, deadline=None)
@given(seed=st.integers(0, 2**32 - 1))
def test_random_backfilling_runs_decide_and_explain_as_without_the_memo(seed: int) -> None:
    """Small random clusters, workloads and backfilling profiles: with the memo and without it, every
    cycle's decisions and every waiting job's status are the same (``make fuzz`` explores more)."""
    draw = random.Random(seed)
    nodes, trace = _small_cluster(draw), _small_trace(draw)
    plugins, args = _backfilling_profile(draw)
    chosen = profile(*plugins, strict=draw.random() < 0.5, args=args)
    runs = []
    for off in ((), ("_view_failures",)):
        scheduler = StatusLog(chosen, off=off)
        runs.append((simulate(nodes, scheduler, trace, SimOptions(seed=seed)).jobs, scheduler))
    (jobs, kept), (jobs_off, without) = runs
    assert kept.cycles == without.cycles, (plugins, args)
    assert_same_tables(jobs, jobs_off)
