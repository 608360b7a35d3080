"""multifactor: Slurm's multifactor priority as a queue order.

Priority is a weighted sum of factors, each in [0, 1]:

    priority = w_age * age + w_size * size + w_fairshare * fairshare
             + w_queue * queue + w_class * class

``age`` grows with the wait up to ``max_age_s``; ``size`` is the job's share
of the cluster's GPUs (or one minus it with ``favor_small``); ``fairshare`` is
Slurm's classic ``2^(-usage / shares)``, so an owner who used less than its
share of the decayed past GPU-seconds ranks higher; ``queue`` and ``class``
come from tables. One number lets a site trade waiting time against fairness
and size by weights alone, which is why Slurm sites use it.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Iterable, Iterator, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Annotated, Literal

import numpy as np
from pydantic import Field

from loadmaster.model import MILLI_PER_GPU, Job
from loadmaster.model.job import job_group, job_submit, job_user
from loadmaster.model.usage import usage_now
from loadmaster.scheduling.framework import CycleContext, FloatArray, OrderPlugin

Weight = Annotated[float, Field(ge=0)]
Unit = Annotated[float, Field(ge=0, le=1)]
FairshareLevel = Literal["user", "group", "both"]
OwnerKey = Annotated[str, Field(pattern=r"^(user|group)/.+")]
"""An owner as the snapshot's usage names it: ``user/<name>`` or ``group/<name>``."""

WEEK_S = 7 * 24 * 3600.0
UNKNOWN_FACTOR = 0.5
"""Factor of a queue or class that the tables do not name (the middle of the range)."""


def default_classes() -> dict[str, float]:
    """The priority plugin's default class values (-1000 .. 1000) mapped linearly onto [0, 1]."""
    return {"critical": 1.0, "high": 0.55, "normal": 0.5, "low": 0.45, "best-effort": 0.0}


@dataclass(frozen=True, slots=True)
class MultifactorArgs:
    age_weight: Weight = 1000.0
    """Weight of the age factor ``min(wait / max_age_s, 1)``."""
    fairshare_weight: Weight = 10000.0
    """Weight of the fair-share factor ``2^(-usage / shares)`` (Slurm examples make it the largest)."""
    size_weight: Weight = 1000.0
    """Weight of the size factor ``job GPUs / cluster GPUs`` (one minus that with ``favor_small``)."""
    queue_weight: Weight = 1000.0
    """Weight of the queue factor from ``queue_weights``."""
    class_weight: Weight = 1000.0
    """Weight of the priority-class factor from ``classes``."""
    max_age_s: Annotated[float, Field(gt=0)] = WEEK_S
    """Wait at which the age factor reaches 1 and stops growing (Slurm's PriorityMaxAge, 7 days)."""
    favor_small: bool = False
    """Rank small jobs higher instead of large ones (Slurm's PriorityFavorSmall)."""
    fairshare_level: FairshareLevel = "user"
    """Whose usage counts: "user", "group", or "both" (the product of the group and user factors)."""
    shares: Mapping[OwnerKey, Annotated[float, Field(ge=0)]] = field(default_factory=dict)
    """Raw shares keyed ``user/<name>`` or ``group/<name>``; owners not named get 1 (equal shares).

    An owner's share is its raw share over the sum for the owners of its level
    that are named here or have jobs running or pending.
    """
    queue_weights: Mapping[str, Unit] = field(default_factory=dict)
    """Queue factor (0..1) of each queue name; unnamed queues get 0.5."""
    classes: Mapping[str, Unit] = field(default_factory=default_classes)
    """Class factor (0..1) of each priority class; unnamed classes get 0.5 (like "normal")."""


@dataclass(frozen=True, slots=True)
class CycleFactors:
    """What one cycle's factors need, computed once: cluster GPUs and each owner's fair-share factor."""

    cluster_gpus: float
    user_fairshare: Mapping[str, float]
    group_fairshare: Mapping[str, float]


def fairshare_factors(
    level: str, owners: Iterable[str], usage_gpu_s: Mapping[str, float], shares: Mapping[str, float]
) -> dict[str, float]:
    """``2^(-U/S)`` per owner of ``level`` ("user" or "group").

    ``U`` is the owner's decayed usage over the level's total (0 when nobody
    used anything), ``S`` its normalised share; an owner with no share gets 0.
    """
    prefix = f"{level}/"
    named = {key[len(prefix) :]: value for key, value in shares.items() if key.startswith(prefix)}
    # Sorted: a set's order follows string hashes (per process), and the float sums below
    # must add the same numbers in the same order on every run.
    raw = {owner: named.get(owner, 1.0) for owner in sorted({*owners, *named})}
    total_share = sum(raw.values())
    total_usage = sum(v for k, v in usage_gpu_s.items() if k.startswith(prefix))
    factors: dict[str, float] = {}
    for owner, share in raw.items():
        used = usage_gpu_s.get(prefix + owner, 0.0) / total_usage if total_usage > 0 else 0.0
        normalised = share / total_share if total_share > 0 else 0.0
        factors[owner] = 2.0 ** (-used / normalised) if normalised > 0 else 0.0
    return factors


def cycle_factors(ctx: CycleContext, shares: Mapping[str, float]) -> CycleFactors:
    """Fair-share factors of every user and group with running or pending jobs, and the cluster's GPUs."""
    snapshot = ctx.snapshot
    users, groups = snapshot.owners()
    # Decayed once per key for the cycle (the snapshot's view decays on every access), in the
    # view's own order: the same values summed in the same order.
    usage = usage_now(snapshot.usage_gpu_s)
    return CycleFactors(
        cluster_gpus=float(snapshot.nodes.total_gpus),
        user_fairshare=fairshare_factors("user", users, usage, shares),
        group_fairshare=fairshare_factors("group", groups, usage, shares),
    )


class Multifactor(OrderPlugin):
    """Key = (-priority, submit time, id): the highest weighted sum of factors first.

    Per-cycle normalisations (cluster GPUs, fair-share factors) are computed
    on the first key of a cycle and kept in ``ctx.data["multifactor"]``.
    """

    name = "multifactor"
    Args = MultifactorArgs

    def __init__(self, args: MultifactorArgs | None = None) -> None:
        super().__init__(args)
        self.config = args or MultifactorArgs()
        self.queue_factors = dict(self.config.queue_weights)
        self.class_factors = dict(self.config.classes)
        self.shares = dict(self.config.shares)

    def factors(self, ctx: CycleContext) -> CycleFactors:
        """This cycle's normalisations, computed on first use."""
        cached = ctx.data.get(self.name)
        if not isinstance(cached, CycleFactors):
            cached = cycle_factors(ctx, self.shares)
            ctx.data[self.name] = cached
        return cached

    def fairshare(self, job: Job, factors: CycleFactors) -> float:
        """The job's fair-share factor at the configured level."""
        level = self.config.fairshare_level
        user = factors.user_fairshare.get(job.user, 1.0)
        group = factors.group_fairshare.get(job.group, 1.0)
        return user if level == "user" else group if level == "group" else group * user

    def priority(self, job: Job, ctx: CycleContext) -> float:
        """The weighted sum of the job's five factors."""
        c = self.config
        factors = self.factors(ctx)
        age = min(max(ctx.now - job.submit_s, 0.0) / c.max_age_s, 1.0)
        size = min(job.gpus / factors.cluster_gpus, 1.0) if factors.cluster_gpus > 0 else 0.0
        if c.favor_small:
            size = 1.0 - size
        return (
            c.age_weight * age
            + c.size_weight * size
            + c.fairshare_weight * self.fairshare(job, factors)
            + c.queue_weight * self.queue_factors.get(job.queue, UNKNOWN_FACTOR)
            + c.class_weight * self.class_factors.get(job.priority_class, UNKNOWN_FACTOR)
        )

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        return (-self.priority(job, ctx), job.submit_s, job.id)

    def order_keys(self, jobs: Sequence[Job], ctx: CycleContext) -> list[tuple[float | str, ...]]:
        """The same keys as :meth:`order_key`, the priorities computed as arrays (the same float
        operations in the same order, so every key is equal to the one-job computation)."""
        priority = self.priorities(jobs, ctx)
        return [(-p, job.submit_s, job.id) for p, job in zip(priority.tolist(), jobs, strict=True)]

    def order_prefixes(self, jobs: Sequence[Job], ctx: CycleContext) -> FloatArray:
        """Each key's first part, ``-priority``, as one array: the rest is ``(submit_s, id)``."""
        return -self.priorities(jobs, ctx)

    def priorities(self, jobs: Sequence[Job], ctx: CycleContext) -> FloatArray:
        """:meth:`priority` of every job, as an array. Each factor is read for all jobs by ``map``
        with attribute getters and dict lookups (C loops: a long queue is thousands of jobs at
        every cycle), then summed with the same float operations in the same order."""
        c, factors = self.config, self.factors(ctx)
        n = len(jobs)
        submit = np.fromiter(map(job_submit, jobs), dtype=np.float64, count=n)
        age = np.minimum(np.maximum(ctx.now - submit, 0.0) / c.max_age_s, 1.0)
        if factors.cluster_gpus > 0:
            tasks = np.fromiter(map(_TASKS, jobs), dtype=np.int64, count=n)
            per_task = np.fromiter(map(_REQUEST_MILLI, jobs), dtype=np.int64, count=n)
            size = np.minimum((tasks * per_task) / MILLI_PER_GPU / factors.cluster_gpus, 1.0)
        else:
            size = np.zeros(n)
        if c.favor_small:
            size = 1.0 - size
        fairshare = self._fairshares(jobs, factors)
        queue = _looked_up(self.queue_factors, map(_QUEUE, jobs), UNKNOWN_FACTOR)
        klass = _looked_up(self.class_factors, map(_CLASS, jobs), UNKNOWN_FACTOR)
        priority: FloatArray = (
            c.age_weight * age
            + c.size_weight * size
            + c.fairshare_weight * fairshare
            + c.queue_weight * queue
            + c.class_weight * klass
        )
        return priority

    def _fairshares(self, jobs: Sequence[Job], factors: CycleFactors) -> FloatArray:
        """:meth:`fairshare` of every job."""
        level = self.config.fairshare_level
        user = _looked_up(factors.user_fairshare, map(job_user, jobs), 1.0) if level != "group" else None
        group = _looked_up(factors.group_fairshare, map(job_group, jobs), 1.0) if level != "user" else None
        if user is None:
            assert group is not None
            return group
        return user if group is None else group * user


_TASKS = operator.attrgetter("tasks")
_REQUEST_MILLI = operator.attrgetter("request.gpu_milli")
_QUEUE = operator.attrgetter("queue")
_CLASS = operator.attrgetter("priority_class")


def _looked_up(table: Mapping[str, float], keys: Iterator[str], default: float) -> FloatArray:
    """``table.get(key, default)`` for every key, as an array (one C loop)."""
    return np.array(list(map(table.get, keys, itertools.repeat(default))), dtype=np.float64)
