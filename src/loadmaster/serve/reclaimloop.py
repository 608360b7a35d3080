"""The reclaim loop in the dashboard: diagnostics finds idle jobs, the policy decides, the ledger records.

Every ``interval_s`` of the dashboard's clock, :class:`ReclaimLoop` reads the
reclaim report (jobs whose GPUs are all idle, and since when), hands them to
the :class:`~loadmaster.scheduling.reclaim.ReclaimTracker` and enters each
decision in the ledger: ``notify`` (the owner is told), then ``evict`` or
``mark`` after the grace, each marked ``dry run`` unless the policy is on.
Operators can exempt a job, approve a pending action (carried out at the
next look, for real even under a dry-run policy) or undo an exemption or an
approval not yet carried out; each is a ledger entry with the operator's name
and the entry it acts on.

On a Kubernetes cluster the scheduler carries reclaim out
(:mod:`loadmaster.kube.reclaim`, ``kube run --reclaim``): there serve runs no
loop of its own; the operators' entries it records are read back by the
scheduler from the shared ledger (:func:`operator_entry`).
"""

from __future__ import annotations

import logging
from collections.abc import Sequence

from loadmaster.diagnostics.reclaim import ReclaimRule, reclaim_report
from loadmaster.scheduling.reclaim import (
    JobActivity,
    ReclaimAction,
    ReclaimDecision,
    ReclaimPolicy,
    ReclaimTracker,
    Step,
)
from loadmaster.serve.config import ReclaimConfig
from loadmaster.serve.dashboard import Dashboard
from loadmaster.serve.state import LedgerEntry, StateStore
from loadmaster.serve.views import NotFoundError, job_namespace

LOG = logging.getLogger("loadmaster.serve.reclaim")

POLICY_ACTOR = "reclaim policy"
"""The ``actor`` of the ledger entries the policy makes on its own."""


class ReclaimLoop:
    """Runs the tracker over the dashboard's reclaim report and records the decisions."""

    def __init__(
        self, policies: Sequence[ReclaimPolicy], state: StateStore, interval_s: float = 60.0
    ) -> None:
        self.tracker = ReclaimTracker(policies)
        self.state = state
        self.interval_s = interval_s
        self._last_s = -float("inf")

    def step(self, board: Dashboard) -> list[ReclaimDecision]:
        """Look again when ``interval_s`` of the dashboard's time has passed; returns the decisions made."""
        now = board.now_s
        if now - self._last_s < self.interval_s:
            return []
        self._last_s = now
        rule = ReclaimRule(sample_s=max(ReclaimRule().sample_s, board.options.telemetry_step_s))
        starts = {job_id: record.start_s for job_id, record in board.sim.records.items()}
        report = reclaim_report(board.store, now, rule, job_starts=starts)
        jobs = board.sim.cluster.running
        activity = []
        for row in report.jobs:
            running = jobs.get(row.job)
            if running is None or len(row.idle) < row.gpus:
                continue  # only a job idle on every GPU is reclaimed; partly idle ones are asked to shrink
            job = running.job
            activity.append(
                JobActivity(
                    row.job,
                    row.user,
                    job.pool,
                    job_namespace(job),
                    now - row.idle_for_s,
                    row.gpus,
                    first=job.reclaim_first,
                )
            )
        decisions = self.tracker.observe(now, activity)
        for d in decisions:
            action = "notify" if d.step.value == "notify" else d.action.value
            self._record(now, d.job, d.owner, board, action + (" (dry run)" if d.dry_run else ""), d.reason,
                         POLICY_ACTOR, d.idle_gpu_hours)  # fmt: skip
            if d.step is Step.ACT and d.action is ReclaimAction.EVICT and not d.dry_run:
                board.evict(d.job, d.reason)  # the job ends; a mark leaves it running
            LOG.info("reclaim %s %s: %s", action, d.job, d.reason)
        return decisions

    def operator(
        self, board: Dashboard, job_id: str, what: str, who: str, ref: LedgerEntry | None = None
    ) -> LedgerEntry:
        """An operator's ``exempt``, ``approve`` or ``undo`` on a job (``ref``: the ledger entry it acts
        on), entered in the ledger."""
        job = board.sim.cluster.running.get(job_id)
        if job is None:
            raise NotFoundError(f"no running job {job_id!r}")
        if what == "exempt":
            self.tracker.exempt(job_id)
            reason = "exempted from reclaim by an operator"
        elif what == "undo" and ref is not None and ref.action == "approve":
            self.tracker.approved.discard(job_id)
            reason = "approval undone before it was carried out: the policy's grace applies again"
        elif what == "undo":
            self.tracker.exempted.discard(job_id)
            reason = "exemption undone: the policy applies again"
        elif what == "approve":
            if not self.tracker.approve(job_id):
                raise NotFoundError(f"{job_id} has no pending reclaim action to approve")
            reason = "the pending action approved by an operator: carried out at the next look"
        else:
            raise NotFoundError(f"unknown reclaim action {what!r}; known: exempt, approve, undo")
        entry = self._record(board.now_s, job_id, job.job.user, board, what, reason, who, 0.0, ref)
        LOG.info("reclaim %s %s by %s", what, job_id, who)
        return entry

    def _record(  # noqa: PLR0917 - the fields of one ledger entry
        self, now: float, job_id: str, owner: str, board: Dashboard, action: str, reason: str, actor: str,
        hours: float, ref: LedgerEntry | None = None,
    ) -> LedgerEntry:  # fmt: skip
        running = board.sim.cluster.running.get(job_id)
        namespace = job_namespace(running.job) if running is not None else None
        gpus = int(running.job.gpus) if running is not None else 0
        return self.state.record(
            LedgerEntry(
                now,
                job_id,
                owner,
                namespace,
                action,
                reason,
                actor,
                gpus,
                hours,
                ref=ref.id if ref is not None else None,
            )
        )


OPERATOR_ACTIONS = ("approve", "exempt", "undo")
"""What an operator may do to a ledger entry."""


def check_operator_action(entry: LedgerEntry, what: str) -> str | None:
    """Why ``what`` cannot be done to ``entry`` (None: it can): approve a notice, exempt any job,
    undo an exemption, an approval or a mark; an eviction cannot be undone (the pods are gone)."""
    action = entry.action.removesuffix(" (dry run)")
    if what not in OPERATOR_ACTIONS:
        return f"unknown reclaim action {what!r}; known: {', '.join(OPERATOR_ACTIONS)}"
    if what == "approve" and action != "notify":
        return f"only a notice can be approved; entry {entry.id} is {entry.action!r}"
    if what == "undo" and (action not in {"exempt", "approve", "mark"} or entry.action != action):
        evicted = " (an eviction cannot: its pods are gone, their controller recreates them)"
        return (
            f"entry {entry.id} is {entry.action!r}: only an exemption, an approval or a mark can be undone"
            + (evicted if action == "evict" else "")
        )
    return None


def operator_entry(entry: LedgerEntry, what: str, who: str, now_s: float) -> LedgerEntry:
    """The ledger entry an operator's action on ``entry`` makes when serve runs no loop of its own (a
    Kubernetes cluster: the scheduler reads it back from the shared ledger and carries it out)."""
    reasons = {
        "approve": "the pending action approved by an operator: the scheduler carries it out next",
        "exempt": "exempted from reclaim by an operator",
        "undo": f"{entry.action} (entry {entry.id}) undone by an operator",
    }
    return LedgerEntry(now_s, entry.job, entry.owner, entry.namespace, what, reasons[what], who, entry.gpus,
                       0.0, ref=entry.id)  # fmt: skip


def loop_from_config(config: ReclaimConfig, state: StateStore) -> ReclaimLoop:
    """The loop serve.yaml's ``reclaim`` section describes, recording into ``state``."""
    return ReclaimLoop(policies_from_config(config), state, interval_s=config.interval_s)


def policies_from_config(config: ReclaimConfig) -> list[ReclaimPolicy]:
    """The policies of serve.yaml's ``reclaim`` section (``serve --demo`` and ``kube run --reclaim``)."""
    return [
        ReclaimPolicy(
            pool=p.pool,
            idle_after_s=p.idle_after_s,
            grace_s=p.grace_s,
            action=ReclaimAction(p.action),
            dry_run=p.dry_run,
            exempt_namespaces=frozenset(p.exempt_namespaces),
            exempt_labels=dict(p.exempt_labels),
            first_idle_after_s=p.first_idle_after_s,
        )
        for p in config.policies
    ]
