"""The running jobs' serial numbers a simulated snapshot carries find the same rows as the jobs do.

The simulator numbers each run as it starts and hands the numbers to the scheduler in the
snapshot's running order, so that the books that keep running jobs' rows from cycle to cycle
(release plans, the learned policy's node features) find them with one gather. Each book, fed
the numbers, must give at every cycle exactly what it gives keyed by the jobs' objects, through
starts, ends and preemptions, and after it has dropped the jobs that no longer run.
"""

from __future__ import annotations

import numpy as np
import pytest

from builders import a_job
from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model import ClusterSnapshot, RunningJob, TaskPlacement
from loadmaster.model.running import RunningSerials, SerialSlots, next_serial
from loadmaster.scheduling import Scheduler
from loadmaster.scheduling.decisions import CycleResult
from loadmaster.scheduling.observe import NodeRows
from loadmaster.scheduling.reservation import ReleaseBook, ReleasePlan
from loadmaster.sim import SimOptions, simulate


def _estimate(running: RunningJob) -> float:
    return running.job.time_limit_s * 0.5


def _same_plans(a: ReleasePlan, b: ReleasePlan) -> None:
    assert a.times == b.times
    for left, right in (
        (a.gpu, b.gpu),
        (a.gpu_upto, b.gpu_upto),
        (a.node, b.node),
        (a.node_upto, b.node_upto),
    ):
        assert np.array_equal(left, right)
    assert a.fingerprint() == b.fingerprint()
    assert np.array_equal(a.tail_arrays()[1], b.tail_arrays()[1])


class _Checking(Scheduler):
    """A scheduler that checks, before each cycle, books fed serials against books fed objects."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.by_serial, self.by_object = ReleaseBook(), ReleaseBook()
        self.rows_by_serial, self.rows_by_object = NodeRows(), NodeRows()
        self.last: tuple[list[RunningJob], np.ndarray, ReleasePlan] | None = None
        self.checked = 0
        self.reused = 0

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        assert snapshot.running_serials is not None
        serials = snapshot.running_serials.array()
        assert snapshot.running_serials.array() is serials  # kept while no job starts or stops
        running = list(snapshot.running)
        assert len(serials) == len(running) == len(set(serials.tolist()))
        plan = self.by_serial.plan(snapshot.running, now, _estimate, serials)
        _same_plans(plan, self.by_object.plan(snapshot.running, now, _estimate))
        if self.last is not None and self.last[0] == running:
            assert np.array_equal(self.last[1], serials)  # the same runs: the same numbers
            self.reused += plan is self.last[2]
        self.last = (running, serials, plan)
        for left, right in zip(
            self.rows_by_serial.arrays(running, serials), self.rows_by_object.arrays(running), strict=True
        ):
            assert np.array_equal(left, right)
        self.checked += 1
        return super().cycle(snapshot, now, rng)


@pytest.mark.parametrize(("name", "count"), [("sds", 300), ("fair", 600)])
def test_books_by_serial_match_books_by_object_through_a_simulation(name: str, count: int) -> None:
    cluster = load_cluster("lab")
    jobs = load_workload("lab", cluster, jobs=count, load=1.2).jobs
    scheduler = _Checking(load_profiles()[name])
    result = simulate(cluster.nodes, scheduler, jobs, SimOptions())
    assert scheduler.checked > 100
    assert scheduler.reused > 0
    if name == "fair":  # reclaims borrowed GPUs: jobs are preempted and requeued
        assert result.jobs.preemptions.sum() > 0


def test_books_by_serial_match_after_dropping_ended_jobs() -> None:
    """Thousands of short runs beside a few long ones: both books drop ended jobs (more than
    1,024 beyond twice the running ones) and keep finding the rows of those still running."""
    rng = np.random.default_rng(7)
    keeper = RunningSerials()
    running: dict[str, RunningJob] = {}
    by_serial, by_object = ReleaseBook(), ReleaseBook()
    rows_by_serial, rows_by_object = NodeRows(), NodeRows()
    for step in range(3000):
        now = float(step)
        for job_id in [j for j in running if rng.random() < 0.3]:
            del running[job_id]
            keeper.stop(job_id)
        for k in range(int(rng.integers(0, 3))):
            job_id = f"j{step}-{k}" if rng.random() < 0.9 else "again"  # "again" may run already
            placement = TaskPlacement(
                node=int(rng.integers(0, 6)), gpu_indices=(0,), gpu_milli=1000, cpu_milli=0, memory_mib=0
            )
            job = a_job(job_id).limit(float(rng.choice([10.0, 60.0]))).build()
            running[job_id] = RunningJob(job, (placement,), now)
            keeper.start(job_id, next_serial())
        serials = keeper.array()
        assert len(serials) == len(running)
        _same_plans(
            by_serial.plan(running.values(), now, _estimate, serials),
            by_object.plan(running.values(), now, _estimate),
        )
        jobs = list(running.values())
        for left, right in zip(
            rows_by_serial.arrays(jobs, serials), rows_by_object.arrays(jobs), strict=True
        ):
            assert np.array_equal(left, right)
    assert len(by_serial) < 3000  # ended jobs were dropped


def test_running_serials_keep_the_order_of_a_dict() -> None:
    rng = np.random.default_rng(3)
    keeper = RunningSerials()
    expected: dict[str, int] = {}
    last = keeper.array()
    for step in range(2000):
        job_id = f"j{int(rng.integers(0, 300))}"
        if job_id in expected and rng.random() < 0.7:
            del expected[job_id]
            keeper.stop(job_id)
        else:
            expected[job_id] = serial = next_serial()
            keeper.start(job_id, serial)
        array = keeper.array()
        assert array.tolist() == list(expected.values()), step
        assert keeper.array() is array  # kept until the next change
        assert array is not last
        assert not array.flags.writeable
        last = array
    keeper.stop("no such job")
    assert keeper.array() is last


def test_serial_slots_grow_at_both_ends() -> None:
    slots = SerialSlots()
    assert slots.get(np.array([5, 6], dtype=np.int64)).tolist() == [-1, -1]
    held = {100: 0, 300: 1, 40: 2, 101: 3, 1000: 4}
    for serial, slot in held.items():
        slots.set(serial, slot)
    asked = np.array([1000, 40, 99, 100, 101, 300, 0, 5000], dtype=np.int64)
    assert slots.get(asked).tolist() == [held.get(s, -1) for s in asked.tolist()]
    assert slots.get(np.array([100, 101], dtype=np.int64)).tolist() == [0, 3]
