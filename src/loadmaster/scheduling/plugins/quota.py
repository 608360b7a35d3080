"""quota: GPU quotas per organisation and group, with borrowing, lending and reclaim (Kueue cohorts).

Lab A holds 20 GPUs and lab B 10: each group is guaranteed its ``nominal``
GPUs. A group may go above its nominal only by borrowing what other groups
of its organisation leave unused and are willing to lend (``lending_limit``),
up to its own ``borrowing_limit``, plus any part of the organisation's
nominal that no group holds. A group that wants its nominal back reclaims it:
``select_victims`` offers the running jobs of groups that are borrowing.

Quota counts GPUs that are bound, never GPUs that are merely admitted: a job
is admitted right before it is placed, and its GPUs count only once
``on_bind`` reports them, so a job that does not fit the cluster uses no
quota and quota is never mistaken for capacity.
"""

from __future__ import annotations

import math
import operator
from collections.abc import Hashable, Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Literal

from pydantic import NonNegativeFloat

from loadmaster.model import MILLI_PER_GPU, Job, PendingJob, RunningJob, TaskPlacement
from loadmaster.scheduling.framework import AdmitPlugin, CycleContext, VictimPlugin
from loadmaster.scheduling.plugins.priority import default_classes, priority_value
from loadmaster.scheduling.status import SUCCESS, Status, unresolvable, wait

EPSILON_GPUS = 1e-6
"""Slack in quota comparisons, far below the smallest share of a GPU (1 milli-GPU)."""


@dataclass(frozen=True, slots=True)
class GroupQuota:
    """One group's share of its organisation's GPUs."""

    nominal: NonNegativeFloat
    """GPUs the group is guaranteed; a job that keeps the group within it is always admitted."""
    borrowing_limit: NonNegativeFloat | None = None
    """Most GPUs the group may use above its nominal; None: as many as the organisation can lend."""
    lending_limit: NonNegativeFloat | None = None
    """Most of its unused nominal GPUs other groups may borrow; None: all of them."""


@dataclass(frozen=True, slots=True)
class OrgQuota:
    """An organisation (a cohort): its groups, and optionally its own total."""

    groups: Mapping[str, GroupQuota]
    """Group name (``Job.group``) -> its quota."""
    nominal: NonNegativeFloat | None = None
    """GPUs of the whole organisation; None: the sum of its groups' nominals.

    Must be at least that sum (a nominal is a guarantee). Any surplus is
    held by no group, and every group of the organisation may borrow it.
    """

    def __post_init__(self) -> None:
        if not self.groups:
            raise ValueError("groups: an organisation needs at least one group")
        held = sum(g.nominal for g in self.groups.values())
        if self.nominal is not None and self.nominal < held - EPSILON_GPUS:
            raise ValueError(
                f"nominal {self.nominal:g} is below the sum of its groups' nominal quotas ({held:g}); "
                "a group's nominal is guaranteed, so the organisation must hold at least their sum"
            )

    @property
    def total(self) -> float:
        """GPUs of the whole organisation."""
        return self.nominal if self.nominal is not None else sum(g.nominal for g in self.groups.values())

    @property
    def unassigned(self) -> float:
        """GPUs of the organisation that no group holds: borrowable by any of its groups."""
        return self.total - sum(g.nominal for g in self.groups.values())


@dataclass(frozen=True, slots=True)
class QuotaArgs:
    orgs: Mapping[str, OrgQuota] = field(default_factory=dict)
    """Organisation name -> its groups and total. A group belongs to one organisation only."""
    min_runtime_s: NonNegativeFloat = 600.0
    """Reclaim never evicts a job that has run less than this (seconds), so borrowers make progress."""
    unknown_group: Literal["reject", "allow"] = "reject"
    """A job whose group has no quota: "reject" holds it (unresolvable), "allow" admits it uncounted."""

    def __post_init__(self) -> None:
        owner: dict[str, str] = {}
        for org, quota in self.orgs.items():
            for group in quota.groups:
                if group in owner:
                    raise ValueError(
                        f"orgs: group {group!r} is listed under both {owner[group]!r} and {org!r}; "
                        "a group belongs to one organisation"
                    )
                owner[group] = org


@dataclass(eq=False)
class _Ledger:
    """GPUs each group holds in this cycle: the snapshot's, plus the binds of the cycle."""

    held: dict[str, float]
    snapshot_held: dict[str, float] = field(default_factory=dict)
    """``held`` as the cycle began (the snapshot's running jobs and bound tasks), before its binds."""
    bound_in_cycle: dict[str, float] = field(default_factory=dict)
    bound_pending: list[tuple[str, str, float]] = field(default_factory=list)
    """(job id, group, GPUs) of the snapshot's pending jobs with bound tasks (the same all cycle)."""
    reclaim_memo: tuple[object, dict[str, float], list[RunningJob]] | None = None
    """For the last ``running`` list reclaim was asked about (kept, so its id stays its own): each
    group's GPUs and the jobs old enough to evict in victim order. Preemption passes one list
    object per set of running jobs, so every waiting job of a cycle shares one count and one sort."""

    def of(self, group: str) -> float:
        return self.held.get(group, 0.0)

    admitted: dict[tuple[str, float], Status] = field(default_factory=dict)
    """Verdicts of :meth:`Quota.admit` by (group, GPUs needed) while ``held`` stays the same: a
    queue of thousands asks the same few questions every cycle."""

    victims: dict[tuple[str, float], list[RunningJob]] = field(default_factory=dict)
    """:meth:`Quota.select_victims` by (group, GPUs needed) for the running list of
    ``reclaim_memo`` while no bind changes ``bound_in_cycle``."""

    def add(self, group: str, gpus: float) -> None:
        self.held[group] = self.of(group) + gpus
        self.admitted.clear()
        self.victims.clear()
        self.bound_in_cycle[group] = self.bound_in_cycle.get(group, 0.0) + gpus


def placed_gpus(placements: Iterable[TaskPlacement]) -> float:
    """GPUs held by ``placements`` (a share of a GPU counts as that share)."""
    return sum(p.gpu_milli * len(p.gpu_indices) for p in placements) / MILLI_PER_GPU


def gpus_left(pending: PendingJob) -> float:
    """GPUs the tasks still to be placed will hold (every task not yet bound)."""
    job = pending.job
    return job.request.gpu_milli * (job.tasks - len(pending.bound)) / MILLI_PER_GPU


class _HeldMemo:
    """GPUs each running job holds (:func:`placed_gpus`), remembered by job id while its placements
    stay the same object; kept to about the jobs running now, so a long run does not grow it."""

    def __init__(self) -> None:
        self._by_id: dict[str, tuple[tuple[TaskPlacement, ...], float]] = {}

    def gpus(self, running: RunningJob) -> float:
        hit = self._by_id.get(running.job.id)
        if hit is not None and hit[0] is running.placements:
            return hit[1]
        value = placed_gpus(running.placements)
        self._by_id[running.job.id] = (running.placements, value)
        return value

    def prune(self, running: Iterable[RunningJob]) -> None:
        """Forget jobs no longer running once the memo is twice as large as it needs to be."""
        alive = {r.job.id for r in running}
        if len(self._by_id) > 2 * len(alive) + 1024:
            self._by_id = {k: v for k, v in self._by_id.items() if k in alive}


_VERDICTS_KEPT = 65_536
"""Admission verdicts kept across cycles before the memo is emptied (a long run must not grow)."""


def _gpus(value: float) -> str:
    return f"{round(value, 3):g}"


class Quota(AdmitPlugin, VictimPlugin):
    """admit: keep each group within its nominal plus what it may borrow; select_victims: reclaim."""

    name = "quota"
    keyed = True
    Args = QuotaArgs

    def __init__(self, args: QuotaArgs | None = None) -> None:
        super().__init__(args)
        self.settings: QuotaArgs = args or QuotaArgs()
        self.org_of = {group: org for org, quota in self.settings.orgs.items() for group in quota.groups}
        self._held = _HeldMemo()
        self._verdicts: dict[tuple[str, float, tuple[float, ...]], Status] = {}
        """:meth:`_admit` by (group, GPUs needed, what each group of its organisation holds)."""

    def admit(self, pending: PendingJob, ctx: CycleContext) -> Status:
        job = pending.job
        org = self.org_of.get(job.group)
        if org is None:
            return self._unknown(job)
        need = gpus_left(pending)
        if need <= 0:
            return SUCCESS  # a job without GPUs takes no quota
        ledger = self._ledger(ctx)
        found = ledger.admitted.get((job.group, need))
        if found is None:
            # The verdict reads only what the organisation's groups hold: kept across cycles by
            # that, since most cycles start no job of the organisation and ask the same again.
            held = tuple(ledger.held.get(group, 0.0) for group in self.settings.orgs[org].groups)
            key = (job.group, need, held)
            found = self._verdicts.get(key)
            if found is None:
                if len(self._verdicts) > _VERDICTS_KEPT:
                    self._verdicts.clear()
                found = self._verdicts[key] = self._admit(org, job.group, need, ledger.held)
            ledger.admitted[job.group, need] = found
        return found

    def admit_key(self, pending: PendingJob) -> Hashable:
        """The verdict depends on the job's group and the GPUs it still needs, and on the ledger,
        which changes only at binds."""
        return (pending.job.group, gpus_left(pending))

    def _admit(self, org: str, name: str, need: float, held: Mapping[str, float]) -> Status:
        """:meth:`admit`'s verdict for ``need`` GPUs of group ``name`` given what each group holds."""
        group = self.settings.orgs[org].groups[name]
        if held.get(name, 0.0) + need <= group.nominal + EPSILON_GPUS:
            return SUCCESS
        ceiling = self._most_ever(org, name)
        if need > ceiling + EPSILON_GPUS:
            return unresolvable(
                f"quota {name}: the job needs {_gpus(need)} GPUs, more than the group can ever "
                f"hold ({_gpus(ceiling)}: nominal {_gpus(group.nominal)} plus what it may borrow "
                f"in org {org})",
                self.name,
            )
        return self._borrow(org, name, need, held)

    def _unknown(self, job: Job) -> Status:
        if self.settings.unknown_group == "allow":
            return SUCCESS
        known = ", ".join(sorted(self.org_of)) or "none"
        return unresolvable(
            f"quota: group {job.group!r} has no quota (groups with quota: {known}; unknown_group=reject)",
            self.name,
        )

    def _borrow(self, org: str, name: str, need: float, held: Mapping[str, float]) -> Status:
        """Admit a job that takes ``name`` above its nominal only if it may borrow the excess now.

        The organisation's total is then respected too: whatever a group
        borrows is covered by unused nominal of others or by the unassigned
        part of the total, so the organisation's usage stays within it.
        """
        group = self.settings.orgs[org].groups[name]
        used = held.get(name, 0.0)
        borrowed = max(0.0, used - group.nominal)
        excess = used + need - group.nominal
        limit = math.inf if group.borrowing_limit is None else group.borrowing_limit
        lendable = self._lendable(org, name, held)
        if excess <= limit + EPSILON_GPUS and excess <= lendable + EPSILON_GPUS:
            return SUCCESS
        may = (
            "any amount (no borrowing limit)"
            if group.borrowing_limit is None
            else f"{_gpus(max(0.0, limit - borrowed))} more (borrowing limit {_gpus(limit)})"
        )
        lend = _gpus(max(0.0, lendable - borrowed))
        return wait(
            f"quota {name}: uses {_gpus(used)} of nominal {_gpus(group.nominal)} GPUs, needs "
            f"{_gpus(need)}; may borrow {may}, org {org} can lend {lend} more",
            self.name,
        )

    def _lendable(self, org: str, borrower: str, held: Mapping[str, float]) -> float:
        """GPUs the other groups of ``org`` and its unassigned part can lend now, net of their borrowing."""
        quota = self.settings.orgs[org]
        total = quota.unassigned
        for name, group in quota.groups.items():
            if name == borrower:
                continue
            used = held.get(name, 0.0)
            lend_limit = group.nominal if group.lending_limit is None else group.lending_limit
            total += min(lend_limit, max(0.0, group.nominal - used)) - max(0.0, used - group.nominal)
        return max(0.0, total)

    def _most_ever(self, org: str, name: str) -> float:
        """The most GPUs group ``name`` could hold with every other group of ``org`` idle."""
        quota = self.settings.orgs[org]
        group = quota.groups[name]
        lendable = quota.unassigned + sum(
            g.nominal if g.lending_limit is None else min(g.lending_limit, g.nominal)
            for other, g in quota.groups.items()
            if other != name
        )
        limit = math.inf if group.borrowing_limit is None else group.borrowing_limit
        return group.nominal + min(limit, lendable)

    def on_bind(self, job: Job, gpus: float, ctx: CycleContext) -> None:
        self._ledger(ctx).add(job.group, gpus)

    def _ledger(self, ctx: CycleContext) -> _Ledger:
        """This cycle's ledger, computed from the snapshot the first time it is asked for."""
        found = ctx.data.get(self.name)
        if not isinstance(found, _Ledger):
            snapshot = ctx.snapshot
            bound = [(p.job.id, p.job.group, placed_gpus(p.bound)) for p in snapshot.pending if p.bound]
            held = self._held_by_group(snapshot.running, bound)
            found = _Ledger(held, snapshot_held=dict(held), bound_pending=bound)
            ctx.data[self.name] = found
            self._held.prune(snapshot.running)
        return found

    def _held_by_group(
        self, running: Iterable[RunningJob], bound_pending: Sequence[tuple[str, str, float]]
    ) -> dict[str, float]:
        """GPUs each group holds: ``running`` jobs, then the bound tasks of the snapshot's pending
        jobs (``bound_pending``) not among them (a driver may list a partial gang in both). Always
        summed in that order, so the same jobs give the same floats; each running job's GPUs are
        remembered across calls and cycles."""
        held: dict[str, float] = {}
        seen: set[str] = set()
        gpus = self._held.gpus
        for job in running:
            held[job.job.group] = held.get(job.job.group, 0.0) + gpus(job)
            seen.add(job.job.id)
        for job_id, group, bound in bound_pending:
            if job_id not in seen:
                held[group] = held.get(group, 0.0) + bound
        return held

    def victims_key(self, pending: PendingJob) -> tuple[str, float]:
        """Reclaim reads the job's group and the GPUs it still needs (see :meth:`select_victims`)."""
        return (pending.job.group, gpus_left(pending))

    def select_victims(
        self, pending: PendingJob, running: Sequence[RunningJob], ctx: CycleContext
    ) -> Sequence[RunningJob]:
        """Reclaim: running jobs of other groups of the same org that borrow, while they borrow.

        Only a job that stays within its group's nominal may reclaim. Usage
        is counted from ``running`` (which leaves out jobs already evicted in
        the cycle) plus the cycle's binds, so a group that stopped borrowing
        is not evicted further. Victims have run ``min_runtime_s``; lower
        priority goes first, then the youngest (least work lost). A group's
        jobs are offered only while it would still borrow without the ones
        offered before them.
        """
        org = self.org_of.get(pending.job.group)
        if org is None:
            return []
        quota = self.settings.orgs[org]
        ledger = self._ledger(ctx)
        memo = ledger.reclaim_memo
        if memo is None or memo[0] is not running:
            old_enough = [r for r in running if ctx.now - r.start_s >= self.settings.min_runtime_s]
            old_enough.sort(key=_victim_order)
            snapshot_running = ctx.snapshot.running
            if len(running) == len(snapshot_running) and all(map(operator.is_, running, snapshot_running)):
                held = ledger.snapshot_held  # the snapshot's jobs, in its order: the same sums
            else:
                held = self._held_by_group(running, ledger.bound_pending)
            memo = ledger.reclaim_memo = (running, held, old_enough)
            ledger.victims.clear()
        # The answer reads the job's group and GPUs, the running list and the cycle's binds only.
        key = self.victims_key(pending)
        found = ledger.victims.get(key)
        if found is None:
            found = ledger.victims[key] = self._reclaimable(pending, quota, ledger, memo)
        return found

    def _reclaimable(
        self,
        pending: PendingJob,
        quota: OrgQuota,
        ledger: _Ledger,
        memo: tuple[object, dict[str, float], list[RunningJob]],
    ) -> list[RunningJob]:
        """:meth:`select_victims` for ``pending`` from the counts and victim order in ``memo``."""
        held = dict(memo[1])
        for group, gpus in ledger.bound_in_cycle.items():
            held[group] = held.get(group, 0.0) + gpus
        mine = held.get(pending.job.group, 0.0) + gpus_left(pending)
        if mine > quota.groups[pending.job.group].nominal + EPSILON_GPUS:
            return []
        victims: list[RunningJob] = []
        for victim in memo[2]:
            group = victim.job.group
            if group not in quota.groups or group == pending.job.group:
                continue
            if held.get(group, 0.0) > quota.groups[group].nominal + EPSILON_GPUS:
                victims.append(victim)
                held[group] -= placed_gpus(victim.placements)
        return victims


_CLASS_VALUES = default_classes()


def _victim_order(running: RunningJob) -> tuple[float, float, float, str]:
    """Lower priority class first, then lower priority, then the most recently started."""
    job = running.job
    return (priority_value(job, _CLASS_VALUES), job.priority, -running.start_s, job.id)
