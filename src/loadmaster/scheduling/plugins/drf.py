"""drf: Dominant Resource Fairness (Ghodsi et al., NSDI'11) as a queue order.

A job's owner holds some share of the cluster's GPUs, CPU and memory through
its running jobs; the largest of those shares is its dominant share. Serving
the owner with the smallest dominant share first equalises dominant shares,
so a user who holds little of the scarcest resource is not starved by one
who holds much of it, whichever resource that is. On a GPU cluster the
dominant resource is usually GPUs, but CPU- or memory-heavy jobs count too.
"""

from __future__ import annotations

from collections import defaultdict
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass
from typing import Literal

import numpy as np
import numpy.typing as npt

from loadmaster.model import MILLI_PER_GPU, Job, NodeTable, RunningJob
from loadmaster.scheduling.framework import CycleContext, OrderPlugin

Level = Literal["user", "group", "both"]


@dataclass(frozen=True, slots=True)
class DrfArgs:
    level: Level = "user"
    """Whose share decides: "user", "group", or "both" (group share first, then user share within it)."""
    strict: bool = False
    """Block the queue behind a head job that cannot start (False: later jobs may pass it)."""


@dataclass(frozen=True, slots=True)
class DominantShares:
    """One cycle's dominant share of every user and group holding resources (others hold 0)."""

    user: Mapping[str, float]
    group: Mapping[str, float]


def cluster_totals(nodes: NodeTable) -> npt.NDArray[np.float64]:
    """The cluster's capacity as (milli-GPU, milli-CPU, memory MiB)."""
    return np.array(
        [nodes.total_gpus * MILLI_PER_GPU, nodes.cpu_milli.sum(), nodes.memory_mib.sum()], dtype=float
    )


def held(job: RunningJob) -> tuple[float, float, float]:
    """What a running job holds, as (milli-GPU, milli-CPU, memory MiB)."""
    gpu = sum(p.gpu_milli * len(p.gpu_indices) for p in job.placements)
    cpu = sum(p.cpu_milli for p in job.placements)
    memory = sum(p.memory_mib for p in job.placements)
    return float(gpu), float(cpu), float(memory)


def dominant(usage: Mapping[str, Sequence[float]], totals: npt.NDArray[np.float64]) -> dict[str, float]:
    """Each owner's largest share over the resources the cluster has (a resource it lacks is skipped)."""
    # Plain floats: a few owners of three numbers each, where numpy's per-call cost dominates
    # (the same IEEE divisions, so the same shares).
    have = [float(total) for total in totals.tolist() if total > 0]
    index = [i for i, total in enumerate(totals.tolist()) if total > 0]
    shares: dict[str, float] = {}
    for owner, amounts in usage.items():
        shares[owner] = max((amounts[i] / t for i, t in zip(index, have, strict=True)), default=0.0)
    return shares


def dominant_shares(
    running: Collection[RunningJob], nodes: NodeTable, memo: HeldMemo | None = None
) -> DominantShares:
    """Sum what each user and group holds, then take each one's dominant share.

    ``memo`` remembers what each running job holds across calls (the same sums, in the same order).
    """
    by_user: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    by_group: dict[str, list[float]] = defaultdict(lambda: [0.0, 0.0, 0.0])
    amounts_of = memo.held if memo is not None else held
    for job in running:
        amounts = amounts_of(job)
        for owner in (by_user[job.job.user], by_group[job.job.group]):
            for i, amount in enumerate(amounts):
                owner[i] += amount
    totals = cluster_totals(nodes)
    return DominantShares(user=dominant(by_user, totals), group=dominant(by_group, totals))


class HeldMemo:
    """:func:`held` of each running job, remembered by job id while its placements stay the same
    object; kept to about the jobs running now, so a long run does not grow it."""

    def __init__(self) -> None:
        self._by_id: dict[str, tuple[object, tuple[float, float, float]]] = {}

    def held(self, running: RunningJob) -> tuple[float, float, float]:
        hit = self._by_id.get(running.job.id)
        if hit is not None and hit[0] is running.placements:
            return hit[1]
        value = held(running)
        self._by_id[running.job.id] = (running.placements, value)
        return value

    def prune(self, running: Collection[RunningJob]) -> None:
        """Forget jobs no longer running once the memo is twice as large as it needs to be."""
        if len(self._by_id) > 2 * len(running) + 1024:
            alive = {r.job.id for r in running}
            self._by_id = {k: v for k, v in self._by_id.items() if k in alive}


class DominantResourceFairness(OrderPlugin):
    """Key = (dominant share of the job's owner, submit time, id); with level "both", group then user.

    Shares are computed once per cycle from ``snapshot.running`` and kept in
    ``ctx.data["drf"]``; they are not updated by binds within the cycle.
    """

    name = "drf"
    Args = DrfArgs

    def __init__(self, args: DrfArgs | None = None) -> None:
        super().__init__(args)
        chosen = args or DrfArgs()
        self.strict = chosen.strict
        self.level: Level = chosen.level
        self._held = HeldMemo()
        self._totals: tuple[NodeTable, npt.NDArray[np.float64]] | None = None
        """The last node table's :func:`cluster_totals` (a simulated cluster keeps one table)."""

    def _cluster_totals(self, nodes: NodeTable) -> npt.NDArray[np.float64]:
        kept = self._totals
        if kept is None or kept[0] is not nodes:
            kept = self._totals = (nodes, cluster_totals(nodes))
        return kept[1]

    def shares(self, ctx: CycleContext) -> DominantShares:
        """This cycle's shares, computed on first use."""
        cached = ctx.data.get(self.name)
        if not isinstance(cached, DominantShares):
            snapshot = ctx.snapshot
            if snapshot.running_held is not None:
                # The driver's sums: integers, so the floats the jobs' sums would give (below 2**53)
                users, groups = snapshot.running_held
                totals = self._cluster_totals(snapshot.nodes)
                cached = DominantShares(user=dominant(users, totals), group=dominant(groups, totals))
            else:
                self._held.prune(snapshot.running)
                cached = dominant_shares(snapshot.running, snapshot.nodes, self._held)
            ctx.data[self.name] = cached
        return cached

    def order_prefixes(self, jobs: Sequence[Job], ctx: CycleContext) -> list[tuple[float | str, ...]]:
        """The shares part of :meth:`order_key`, one tuple per owner (a queue has a few owners)."""
        shares = self.shares(ctx)
        users, groups, level = shares.user, shares.group, self.level
        by_owner: dict[tuple[str, str], tuple[float | str, ...]] = {}
        out = []
        for job in jobs:
            owner = (job.group, job.user)
            prefix = by_owner.get(owner)
            if prefix is None:
                user, group = users.get(job.user, 0.0), groups.get(job.group, 0.0)
                prefix = (user,) if level == "user" else (group,) if level == "group" else (group, user)
                by_owner[owner] = prefix
            out.append(prefix)
        return out

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        shares = self.shares(ctx)
        user = shares.user.get(job.user, 0.0)
        group = shares.group.get(job.group, 0.0)
        if self.level == "user":
            return (user, job.submit_s, job.id)
        if self.level == "group":
            return (group, job.submit_s, job.id)
        return (group, user, job.submit_s, job.id)
