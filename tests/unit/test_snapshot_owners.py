"""The owners a simulated snapshot carries are those of its running and pending jobs, at every cycle.

The simulator counts users and groups as jobs arrive, start, end, are preempted and
are evicted, so that a fair-share order need not read every running job of a
large cluster to find them; the counts must say what reading them would.
"""

from __future__ import annotations

import dataclasses

import numpy as np
import pytest

from builders import a_cluster, a_job, a_snapshot
from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model import ClusterSnapshot
from loadmaster.scheduling import Scheduler
from loadmaster.scheduling.decisions import CycleResult
from loadmaster.sim import SimOptions, simulate


class _Checking(Scheduler):
    """A scheduler that checks each snapshot's counted owners against its jobs before deciding."""

    checked = 0

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        counted = snapshot.owners()
        read = dataclasses.replace(snapshot, active_owners=None).owners()
        assert counted == read, (now, counted, read)
        assert snapshot.active_owners is not None
        _Checking.checked += 1
        return super().cycle(snapshot, now, rng)


@pytest.mark.parametrize(("name", "count"), [("slurm", 300), ("fair", 600)])
def test_counted_owners_match_the_jobs_through_starts_ends_and_preemptions(name: str, count: int) -> None:
    cluster = load_cluster("lab")
    jobs = load_workload("lab", cluster, jobs=count, load=1.2).jobs
    _Checking.checked = 0
    result = simulate(cluster.nodes, _Checking(load_profiles()[name]), jobs, SimOptions())
    assert _Checking.checked > 100
    if name == "fair":  # reclaims borrowed GPUs: jobs are preempted and requeued
        assert result.jobs.preemptions.sum() > 0


def test_a_snapshot_without_counts_reads_its_jobs() -> None:
    cluster = a_cluster().nodes(1, gpus=8).build()
    running = a_job("r").gpus(2).user("ann", "lab-a").build()
    waiting = a_job("w").gpus(2).user("bob", "lab-b").build()
    snapshot = a_snapshot(cluster).running(running, "n0", since=0.0).pending(waiting).build()
    assert snapshot.active_owners is None
    assert snapshot.owners() == (frozenset({"ann", "bob"}), frozenset({"lab-a", "lab-b"}))
