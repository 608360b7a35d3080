"""The owners a simulated snapshot carries, and what the running ones hold, are what its jobs say, at
every cycle.

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
from loadmaster.scheduling.framework import CycleContext
from loadmaster.scheduling.plugins.drf import DominantResourceFairness, DrfArgs
from loadmaster.scheduling.state import WorkingState
from loadmaster.sim import SimOptions, simulate


class _Checking(Scheduler):
    """A scheduler that checks each snapshot's counted owners against its jobs before deciding."""

    checked = 0

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        counted = snapshot.owners()
        read = dataclasses.replace(snapshot, active_owners=None).owners()
        assert counted == read, (now, counted, read)
        assert snapshot.active_owners is not None
        assert snapshot.running_held is not None
        users, groups = _summed(snapshot)
        assert {k: list(v) for k, v in snapshot.running_held[0].items() if any(v)} == users, now
        assert {k: list(v) for k, v in snapshot.running_held[1].items() if any(v)} == groups, now
        kept = DominantResourceFairness(DrfArgs(level="both"))
        read = DominantResourceFairness(DrfArgs(level="both"))
        state = WorkingState.from_snapshot(snapshot)
        ctx_kept = CycleContext(now=now, rng=rng, snapshot=snapshot, state=state)
        unkept = dataclasses.replace(snapshot, running_held=None)
        ctx_read = CycleContext(now=now, rng=rng, snapshot=unkept, state=state)
        assert kept.shares(ctx_kept) == read.shares(ctx_read), now  # the same floats, to the bit
        _Checking.checked += 1
        return super().cycle(snapshot, now, rng)


def _summed(snapshot: ClusterSnapshot) -> tuple[dict[str, list[int]], dict[str, list[int]]]:
    """What each user and group holds, summed from the running jobs (owners holding nothing left out)."""
    users: dict[str, list[int]] = {}
    groups: dict[str, list[int]] = {}
    for running in snapshot.running:
        held = [
            sum(p.gpu_milli * len(p.gpu_indices) for p in running.placements),
            sum(p.cpu_milli for p in running.placements),
            sum(p.memory_mib for p in running.placements),
        ]
        for sums, owner in ((users, running.job.user), (groups, running.job.group)):
            total = sums.setdefault(owner, [0, 0, 0])
            for i, amount in enumerate(held):
                total[i] += amount
    return (
        {k: v for k, v in users.items() if any(v)},
        {k: v for k, v in groups.items() if any(v)},
    )


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
