"""The non-strict walk over the scheduler's queue index is the full walk, visit for visit.

``scheduling.queue_index`` keeps the queue by verdict class from the driver's log of pending
changes (``model.PendingLog``), and ``allocate._walk_indexed`` walks it. Each case compares a
scheduler that uses the index with one that never does (``StatusLog``/``same_cycles`` with the
index off): the decisions, every pending job's status and the random stream, cycle by cycle. Then
what the index must survive: a driver without a log, a reorder, a reader that fell behind, a
broken promise; and a result read after later cycles changed the index.
"""

from __future__ import annotations

import copy
import dataclasses
from collections.abc import Iterator

import numpy as np
import pytest

from builders import (
    SHORTCUT_RUNS,
    a_cluster,
    a_job,
    a_snapshot,
    assert_same_tables,
    lab_runs_with_and_without,
    same_cycles,
)
from loadmaster.config import load_profiles
from loadmaster.model import ClusterSnapshot, Job, PendingJob, PendingLog
from loadmaster.scheduling import Scheduler
from loadmaster.scheduling.queue_index import QueueIndex
from loadmaster.sim.cluster import SimCluster

CLUSTER = a_cluster().nodes(2, gpus=8).build()


def _index(scheduler: Scheduler) -> QueueIndex:
    assert scheduler._index is not None
    return scheduler._index


@pytest.mark.parametrize(("name", "load"), SHORTCUT_RUNS)
def test_a_simulation_that_walks_the_index_is_the_same_run(name: str, load: float) -> None:
    (indexed_table, indexed), (full_table, full) = lab_runs_with_and_without(name, load, ("_index",))
    index = _index(indexed)
    assert index.rebuilds - index.compactions == 1  # built once, then kept from the log alone
    if name == "kube-default":  # no gang: jobs bound pod by pod, loose (visited each cycle) meanwhile
        assert (indexed_table.held_idle_gpu_s > 0).any()
    assert indexed.cycles == full.cycles  # every cycle: the same binds, every job's status
    assert_same_tables(indexed_table, full_table)


def _logged(log: PendingLog, snapshot: ClusterSnapshot) -> ClusterSnapshot:
    return dataclasses.replace(snapshot, pending_log=log)


def _snapshot(log: PendingLog, pending: list[PendingJob], used: int = 4) -> ClusterSnapshot:
    base = a_snapshot(CLUSTER).used("n0", 8).used("n1", used).build()
    return _logged(log, dataclasses.replace(base, pending=tuple(pending)))


def _jobs(count: int, start: int = 0) -> list[Job]:
    return [a_job(f"j{i:03d}").gpus(1 + i % 8).submitted(10 + i).build() for i in range(start, start + count)]


def _changing_queue(log: PendingLog) -> Iterator[tuple[ClusterSnapshot, float]]:
    """Cycles of a driver that writes its changes to ``log`` between them (a generator, so that
    each snapshot is taken when its cycle runs, with the log at its version)."""
    gang = a_job("gang").tasks(2).gpus(4).submitted(5).build()
    queue = [PendingJob(job) for job in [gang, *_jobs(40)]]
    for pending in queue:
        log.add(pending)
    yield _snapshot(log, queue), 0.0
    # Two jobs leave, three arrive, a partly bound job keeps its place, and the cluster frees GPUs.
    log.remove(queue[3].job.id)
    log.remove(queue[10].job.id)
    later = [PendingJob(job) for job in _jobs(3, start=40)]
    for pending in later:
        log.add(pending)
    queue = [p for i, p in enumerate(queue) if i not in (3, 10)] + later
    yield _snapshot(log, queue, used=1), 1.0
    placed = a_snapshot(CLUSTER).running(a_job("x").gpus(4).build(), "n1").build().running
    bound = PendingJob(gang, next(iter(placed)).placements)
    queue[0] = bound
    log.replace(bound)
    yield _snapshot(log, queue, used=0), 2.0


def test_cycles_on_a_logged_queue_agree_with_the_full_walk() -> None:
    chosen = load_profiles()["kube-default"]
    fast, seen, _ = same_cycles(chosen, _changing_queue(PendingLog()), off=("_index",))
    assert _index(fast).rebuilds == 1
    assert seen[1][0]  # something started on the freed GPUs


def _rebuilding_queue(log: PendingLog) -> Iterator[tuple[ClusterSnapshot, float]]:
    queue = [PendingJob(job) for job in _jobs(6)]
    for pending in queue:
        log.add(pending)
    yield _snapshot(log, queue), 0.0
    log.reorder()  # a preempted job went back to its place
    yield _snapshot(log, queue), 1.0
    for pending in [PendingJob(job) for job in _jobs(5, start=6)]:  # more than the log keeps
        log.add(pending)
        queue.append(pending)
    yield _snapshot(log, queue), 2.0
    yield _snapshot(log, queue[:-1]), 3.0  # the queue says one thing, the log another


def test_a_reorder_a_reader_left_behind_or_a_broken_promise_rebuilds() -> None:
    chosen = load_profiles()["kube-default"]
    fast, _, _ = same_cycles(chosen, _rebuilding_queue(PendingLog(kept=2)), off=("_index",))
    assert _index(fast).rebuilds == 4


def test_a_driver_without_a_log_walks_the_whole_queue() -> None:
    chosen = load_profiles()["kube-default"]
    plain = a_snapshot(CLUSTER).used("n0", 8).pending(*_jobs(10)).build()
    fast, _, _ = same_cycles(chosen, [(plain, 0.0)], off=("_index",))
    assert _index(fast).rebuilds == 0


def test_a_result_answers_for_its_own_cycle_after_later_ones() -> None:
    chosen = load_profiles()["kube-default"]
    scheduler = Scheduler(chosen)
    rng = np.random.default_rng(0)
    log = PendingLog()
    queue = [PendingJob(job) for job in _jobs(12)]
    for pending in queue:
        log.add(pending)
    first = scheduler.cycle(_snapshot(log, queue), 0.0, rng)
    answered = {job_id: str(status) for job_id, status in first.statuses.items()}
    bound = {d.job_id for d in first.decisions}
    assert set(answered) | bound == {p.job.id for p in queue}
    # Later: the first job leaves, a new one arrives, and its class's verdict changes.
    log.remove(queue[0].job.id)
    late = PendingJob(a_job("late").gpus(2).submitted(500).build())
    log.add(late)
    scheduler.cycle(_snapshot(log, [*queue[1:], late], used=0), 1.0, rng)
    assert {job_id: str(status) for job_id, status in first.statuses.items()} == answered
    assert "late" not in first.statuses  # it was not in that cycle's queue
    assert first.status_of("late", "default") is None


def test_the_log_keeps_its_last_entries_and_says_when_it_lost_some() -> None:
    log = PendingLog(kept=3)
    jobs = [PendingJob(job) for job in _jobs(8)]
    for pending in jobs[:3]:
        log.add(pending)
    assert log.version == 3
    assert log.since(1) == [("add", jobs[1]), ("add", jobs[2])]
    for pending in jobs[3:]:
        log.add(pending)
    assert log.version == 8
    assert log.since(0) is None  # dropped: the reader must read the whole queue
    assert log.since(8) == []
    assert log.since(9) is None
    with pytest.raises(ValueError, match="kept must be at least 1"):
        PendingLog(kept=0)


def test_the_simulator_writes_every_change_of_its_queue() -> None:
    cluster = SimCluster(CLUSTER)
    first, second = (PendingJob(job) for job in _jobs(2))
    cluster.add_pending(first)
    cluster.add_pending(second)
    cluster.replace_pending(PendingJob(first.job, ()))
    cluster.remove_pending(second.job.id)
    cluster.requeue(second)
    kinds = [kind for kind, _ in cluster.pending_log.since(0) or []]
    assert kinds == ["add", "add", "replace", "remove", "add", "reorder"]
    with pytest.raises(KeyError, match="is not pending"):
        cluster.replace_pending(PendingJob(a_job("ghost").build()))
    assert cluster.snapshot(0.0).pending_log is cluster.pending_log


def test_the_simulators_queue_changes_only_through_its_logged_operations() -> None:
    cluster = SimCluster(CLUSTER)
    cluster.add_pending(PendingJob(_jobs(1)[0]))
    with pytest.raises(TypeError):
        cluster.pending["j000"] = PendingJob(_jobs(1)[0])  # type: ignore[index]
    cluster.requeue(PendingJob(_jobs(2)[1]))
    with pytest.raises(TypeError):
        cluster.pending["j001"] = PendingJob(_jobs(2)[1])  # type: ignore[index]
    assert list(cluster.pending) == ["j000", "j001"]
    copied = copy.deepcopy(cluster)  # a cluster copies whole (the RL environment's tests do)
    assert list(copied.pending) == ["j000", "j001"] and copied.pending_log.version == 3


def _unlogged_removal(log: PendingLog) -> Iterator[tuple[ClusterSnapshot, float]]:
    big = PendingJob(a_job("big").gpus(6).submitted(20).build())
    bigger = PendingJob(a_job("bigger").gpus(7).submitted(30).build())
    for pending in (big, bigger):
        log.add(pending)
    yield _snapshot(log, [big, bigger]), 0.0
    yield _snapshot(log, [bigger]), 1.0  # "big" left, and the driver wrote nothing


def test_a_queue_changed_without_a_log_entry_is_not_handed_the_last_failures() -> None:
    # The last cycle's failures hold only for a queue that starts with the last one: with a log,
    # that is every change since being an addition *and* the queue having grown by as many.
    chosen = load_profiles()["kube-default"]
    fast, seen, _ = same_cycles(chosen, _unlogged_removal(PendingLog()), off=("_index", "_carried"))
    assert fast._carried is not None and fast._carried.carried == 0
    assert "want 7" in dict(seen[1][1])["bigger"]  # its own failure, not "as for a smaller request"
