"""Reclaiming idle GPUs, closed loop: a policy per pool and the tracker that applies it over time.

Diagnostics finds the waste (a job whose GPUs did nothing for a while); the
policy says what to do: tell the owner once the job has been idle for
``idle_after_s``, then, if it is still idle ``grace_s`` later, act (evict it,
or only mark it). A job that works again in between is left alone and its
clock starts over. Namespaces and job labels can be exempt. A policy is a
dry run by default: it decides and records, and does nothing to the job.

:class:`ReclaimTracker` is pure (no clock, no I/O): each :meth:`observe`
gets the time and the jobs' idle state and returns the decisions due; the
caller (the live dashboard, ``kube run``, the simulator) carries them out and
enters them in the ledger.
"""

from __future__ import annotations

from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass, field
from enum import StrEnum

from loadmaster.errors import ModelError


class ReclaimAction(StrEnum):
    """What is done to a job still idle after its grace period."""

    EVICT = "evict"
    """Evict its pods (the Eviction API; in the simulator the job ends)."""
    MARK = "mark"
    """Only mark it (an annotation the dashboard and CLI show); an operator decides."""


class Step(StrEnum):
    """The stages of the loop."""

    NOTIFY = "notify"
    ACT = "act"


@dataclass(frozen=True)
class ReclaimPolicy:
    """One pool's rule (``pool`` None: every pool without a rule of its own)."""

    pool: str | None = None
    idle_after_s: float = 1800.0
    """Idle this long (every GPU of the job; diagnostics' idle rule) before the owner is told."""
    grace_s: float = 3600.0
    """Then this long to start using the GPUs or release them before the action."""
    action: ReclaimAction = ReclaimAction.EVICT
    dry_run: bool = True
    """Decide and record, but leave the job alone (the default: turn a policy on knowingly)."""
    exempt_namespaces: frozenset[str] = frozenset()
    exempt_labels: Mapping[str, str] = field(default_factory=dict)
    """A job with any of these label values is exempt (``loadmaster.io/reclaim: never``)."""
    first_idle_after_s: float = 900.0
    """Idle time before the owner of a job marked ``reclaim_first`` (an interactive session,
    ``loadmaster submit --interactive``) is told: sessions are the first candidates, since a
    notebook left open holds its GPU for nothing while a training job's idle spell is often a
    checkpoint or a data stall. Never later than ``idle_after_s``."""

    def __post_init__(self) -> None:
        if not self.idle_after_s > 0 or not self.grace_s >= 0 or not self.first_idle_after_s > 0:
            raise ModelError(
                f"reclaim policy for pool {self.pool or '*'}: idle_after_s and first_idle_after_s must be "
                f"> 0 and grace_s >= 0, got {self.idle_after_s}, {self.first_idle_after_s} and {self.grace_s}"
            )

    @property
    def delay_s(self) -> float:
        """From the start of an idle stretch to the action, if nothing changes."""
        return self.idle_after_s + self.grace_s

    def idle_after_for(self, job: JobActivity) -> float:
        """How long this job may sit idle before its owner is told (sessions first)."""
        return min(self.first_idle_after_s, self.idle_after_s) if job.first else self.idle_after_s

    def exempts(self, job: JobActivity) -> bool:
        """Whether the job is out of this policy's reach (namespace or label)."""
        return job.namespace in self.exempt_namespaces or any(
            job.labels.get(k) == v for k, v in self.exempt_labels.items()
        )


@dataclass(frozen=True)
class JobActivity:
    """One job as the loop sees it: where it runs and since when it has been idle (None: busy)."""

    job: str
    owner: str
    pool: str | None
    namespace: str | None
    idle_since_s: float | None
    gpus: int = 0
    labels: Mapping[str, str] = field(default_factory=dict)
    first: bool = False
    """An interactive session (``Job.reclaim_first``): told after ``first_idle_after_s``."""


@dataclass(frozen=True)
class ReclaimDecision:
    """A step due for a job: notify its owner, or act; with the reason in words and whether for real."""

    job: str
    owner: str
    step: Step
    at_s: float
    action: ReclaimAction
    dry_run: bool
    reason: str
    idle_gpu_hours: float


@dataclass(frozen=True)
class LedgerEntry:
    """One reclaim action: who (actor) did what (action) to which job (and its owner), when, why.

    The ledger is where the policy's decisions and operators' actions meet: the dashboard lists it, an
    operator's ``approve``, ``exempt`` or ``undo`` is an entry (``ref``: the entry it acts on), and the
    scheduler reads those entries back to carry them out."""

    at_s: float
    job: str
    owner: str
    namespace: str | None
    action: str
    """``notify``, ``evict``, ``mark`` (each maybe ``(dry run)``), ``exempt``, ``approve``, ``undo``..."""
    reason: str
    actor: str
    """``scheduler`` or ``reclaim policy`` for the policy's own actions, else the operator's name."""
    gpus: int
    idle_gpu_hours: float
    id: int | None = None
    ref: int | None = None
    """The entry an operator's action refers to (the notice approved, the exemption undone)."""


@dataclass
class _Seen:
    idle_since_s: float
    looked_s: float = -float("inf")
    """When the loop last saw the job idle: a stretch that began after it is a new one."""
    notified_s: float | None = None
    acted: bool = False


class ReclaimTracker:
    """Applies the policies over time (module docstring); remembers who was told and when."""

    def __init__(self, policies: Sequence[ReclaimPolicy]) -> None:
        pools = [p.pool for p in policies]
        if len(set(pools)) != len(pools):
            raise ModelError(f"one reclaim policy per pool, got pools {pools}")
        self.policies = {p.pool: p for p in policies}
        self._seen: dict[str, _Seen] = {}
        self.exempted: set[str] = set()
        """Jobs an operator exempted (until they end)."""
        self.approved: set[str] = set()
        """Jobs whose pending action an operator approved: carried out, for real, at the next look."""
        self._restored: dict[str, tuple[float, bool]] = {}
        """Job -> (when its owner was told, whether acted on since), from a ledger written before."""

    def policy_for(self, pool: str | None) -> ReclaimPolicy | None:
        """The pool's policy, else the catch-all one, else None."""
        return self.policies.get(pool) or self.policies.get(None)

    def observe(self, now_s: float, jobs: Iterable[JobActivity]) -> list[ReclaimDecision]:
        """The decisions due at ``now_s``; jobs not listed have ended and are forgotten."""
        out: list[ReclaimDecision] = []
        listed: set[str] = set()
        for job in jobs:
            listed.add(job.job)
            policy = self.policy_for(job.pool)
            if policy is None or job.idle_since_s is None or job.job in self.exempted or policy.exempts(job):
                self._seen.pop(job.job, None)  # busy again (or exempt): the clock starts over
                self.approved.discard(job.job)
                continue
            seen = self._seen.get(job.job)
            # The same stretch unless it began after the last look (the job worked in between): telemetry
            # read over a moving window puts the start of one stretch a little differently each look.
            if seen is None or job.idle_since_s > seen.looked_s:
                seen = self._seen[job.job] = self._fresh(job.job, job.idle_since_s)
            seen.looked_s = now_s
            decision = self._next(now_s, job, seen, policy)
            if decision is not None:
                out.append(decision)
        for gone in set(self._seen) - listed:
            del self._seen[gone]
        self._restored.clear()  # only the first look after a restore can continue a told stretch
        self.exempted &= listed
        self.approved &= listed
        return out

    def _fresh(self, job: str, idle_since_s: float) -> _Seen:
        """A stretch seen for the first time: one the ledger says the owner was told of goes on from
        that notice (the stretch began before it), else it starts untold."""
        told = self._restored.pop(job, None)
        if told is not None and idle_since_s <= told[0]:
            return _Seen(idle_since_s, notified_s=told[0], acted=told[1])
        return _Seen(idle_since_s)

    def restore(self, job: str, notified_s: float, acted: bool) -> None:
        """The job's owner was told at ``notified_s`` (and the action taken, when ``acted``) before this
        tracker began (a restarted scheduler, a new leader: the ledger says so). At the next look, if
        the job is still in the idle stretch that began before that notice, it is not told again and
        the grace runs from that notice; a job that worked since starts over."""
        self._restored[job] = (notified_s, acted)

    def _next(
        self, now_s: float, job: JobActivity, seen: _Seen, policy: ReclaimPolicy
    ) -> ReclaimDecision | None:
        idle_s = now_s - seen.idle_since_s
        hours = job.gpus * idle_s / 3600.0
        idle_after_s = policy.idle_after_for(job)
        if seen.notified_s is None and idle_s >= idle_after_s:
            seen.notified_s = now_s
            session = "interactive session, " if job.first else ""
            reason = (
                f"every GPU idle for {_dur(idle_s)} ({session}policy: {_dur(idle_after_s)}); "
                f"{policy.action.value} in {_dur(policy.grace_s)} unless the GPUs are used"
            )
            return ReclaimDecision(
                job.job, job.owner, Step.NOTIFY, now_s, policy.action, policy.dry_run, reason, hours
            )
        if seen.notified_s is not None and not seen.acted and job.job in self.approved:
            seen.acted = True
            self.approved.discard(job.job)
            reason = (
                f"approved by an operator {_dur(now_s - seen.notified_s)} after notice "
                f"(idle {_dur(idle_s)}, {hours:.1f} GPU-hours)"
            )
            return ReclaimDecision(job.job, job.owner, Step.ACT, now_s, policy.action, False, reason, hours)
        if seen.notified_s is not None and not seen.acted and now_s - seen.notified_s >= policy.grace_s:
            seen.acted = True
            reason = (
                f"still idle {_dur(now_s - seen.notified_s)} after notice "
                f"(idle {_dur(idle_s)}, {hours:.1f} GPU-hours)"
            )
            return ReclaimDecision(
                job.job, job.owner, Step.ACT, now_s, policy.action, policy.dry_run, reason, hours
            )
        return None

    def exempt(self, job: str) -> None:
        """An operator exempts a job from reclaim (until it ends)."""
        self.exempted.add(job)
        self.approved.discard(job)
        self._seen.pop(job, None)

    def approve(self, job: str) -> bool:
        """An operator approves the job's pending action: it is carried out at the next :meth:`observe`,
        for real even under a dry-run policy (the operator decided). False when nothing is pending."""
        seen = self._seen.get(job)
        if seen is None or seen.notified_s is None or seen.acted:
            return False
        self.approved.add(job)
        return True

    def notified(self, job: str) -> float | None:
        """When the job's owner was told (None: not told, or busy since)."""
        seen = self._seen.get(job)
        return seen.notified_s if seen is not None else None


def _dur(seconds: float) -> str:
    """A duration as a reason says it: seconds under a minute (short test policies), else minutes."""
    return f"{seconds:.0f} s" if seconds < 60 else f"{seconds / 60:.0f} min"
