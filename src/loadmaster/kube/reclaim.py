"""Reclaiming idle GPUs on a Kubernetes cluster: the scheduler's part of the closed loop.

Each look (every ``interval_s`` of the scheduler's clock, leader only), :class:`KubeReclaimer`:

1. reads the operators' actions that appeared in the ledger since its last look (``approve``,
   ``exempt``, ``undo``; serve's operator view writes them) and applies them to the tracker;
2. gathers the running jobs of this scheduler (their bound, live pods grouped by PodGroup, else
   the pod), with owner (``loadmaster.io/user``, else the namespace), pool (their node's
   ``loadmaster.io/pool``), namespace and labels, and asks the :class:`IdleSource` since when every
   GPU of each job has been idle (:class:`PrometheusIdle`: ``GPU_UTIL`` of the series dcgm-exporter
   or ``loadmaster agent`` label with the pod);
3. hands them to the pure :class:`~loadmaster.scheduling.reclaim.ReclaimTracker` and carries out
   what is due:

   * **notify**: annotation :data:`NOTICE_ANNOTATION` (the reason and when the action comes, which
     ``loadmaster status`` and ``jobs`` show the owner) on each pod and a ``Warning`` Event
     ``IdleGPUs`` (``kubectl describe pod`` and ``kubectl get events`` show it);
   * **act** after the grace: ``evict`` through the Eviction API (``policy/v1``: a
     PodDisruptionBudget is honoured: its 429 is recorded, ``evict (refused)`` when no pod went, and
     not retried), or ``mark`` (annotation
     :data:`MARK_ANNOTATION`); a dry run (the default) changes the notice to say what would have
     been done and touches nothing else; an Event ``Reclaimed``, ``ReclaimMarked`` or
     ``ReclaimDryRun`` says which;
   * a job busy again after its notice has the notice removed (``notice lifted`` in the ledger);

4. enters every step in the ledger (actor :data:`ACTOR`) and logs it.

Every write is fenced on the leader Lease as binds are. Exempt namespaces and labels come from
the policy; an operator's exemption lasts until the job ends. The ledger is read from its start when
the scheduler starts, so exemptions survive a restart, and so do notices: a job whose pods still carry
the notice of an earlier scheduler (or an earlier leader) is not told again, and its grace runs from
that notice (:meth:`ReclaimTracker.restore`); a job that worked since is told afresh.
"""

from __future__ import annotations

import logging
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np

from loadmaster.kube import translate as tr
from loadmaster.kube.api import REQUEST_TIMEOUT_S, ApiFailure
from loadmaster.kube.cluster import KubeCluster, pod_event
from loadmaster.kube.translate import utc_stamp
from loadmaster.scheduling.reclaim import (
    JobActivity,
    LedgerEntry,
    ReclaimAction,
    ReclaimDecision,
    ReclaimTracker,
    Step,
)
from loadmaster.telemetry.schema import field as telemetry_field
from loadmaster.telemetry.store import TelemetryStore

log = logging.getLogger(__name__)

ACTOR = "scheduler"
"""The ``actor`` of the ledger entries the scheduler makes on its own."""
NOTICE_ANNOTATION = tr.RECLAIM_NOTICE_ANNOTATION
"""On each pod of a job found idle: why, and what happens when (removed when the job works again)."""
MARK_ANNOTATION = tr.RECLAIM_MARK_ANNOTATION
"""On each pod of a job a ``mark`` policy acted on: why; an operator decides (``undo`` removes it)."""
OPERATOR_ACTIONS = frozenset({"approve", "exempt", "undo"})


class IdleSource(Protocol):
    """Since when a job's GPUs have all been idle."""

    def idle_since(self, pods: Mapping[str, Sequence[str]], now_s: float) -> Mapping[str, float | None]:
        """Job id -> the time since which every GPU of its pods (``namespace/name``) has been idle; None
        (or absent) when busy or unknown: a job without telemetry is never reclaimed."""
        ...


class Ledger(Protocol):
    """Where reclaim actions are entered and read back (serve's ``StateStore`` is one)."""

    def record(self, entry: LedgerEntry) -> LedgerEntry: ...

    def since(self, after_id: int, limit: int = 10_000) -> list[LedgerEntry]: ...

    def entry(self, entry_id: int) -> LedgerEntry | None: ...


@dataclass
class _Job:
    pods: list[str] = field(default_factory=list)
    owner: str = ""
    namespace: str = ""
    pool: str | None = None
    gpus: int = 0
    labels: dict[str, str] = field(default_factory=dict)
    first: bool = False
    noticed: bool = False
    """Some pod carries a notice (ours, from an earlier look or an earlier replica)."""


class KubeReclaimer:
    """The reclaim loop of ``kube run`` (module docstring)."""

    def __init__(
        self,
        cluster: KubeCluster,
        tracker: ReclaimTracker,
        idle: IdleSource,
        ledger: Ledger | None = None,
        interval_s: float = 60.0,
    ) -> None:
        self.cluster = cluster
        self.tracker = tracker
        self.idle = idle
        self.ledger = ledger
        self.interval_s = interval_s
        self._last_s = -float("inf")
        self._read_id = 0
        self._jobs: dict[str, _Job] = {}
        self._told: dict[str, tuple[float, bool]] = {}
        """Job -> (notice time, acted since) from our own entries read back (an earlier process's)."""

    # ------------------------------------------------------------------ look
    def step(self) -> list[ReclaimDecision]:
        """One look when ``interval_s`` has passed and this replica leads; the decisions carried out."""
        now = self.cluster.clock()
        if now - self._last_s < self.interval_s or not self.cluster.lease.holds_now():
            return []
        self._last_s = now
        self._jobs = self._running()
        self._read_operators()
        self._restore_notices()
        idle = self.idle.idle_since({j: job.pods for j, job in self._jobs.items()}, now)
        activity = [
            JobActivity(
                job_id,
                job.owner,
                job.pool,
                job.namespace,
                idle.get(job_id),
                job.gpus,
                job.labels,
                first=job.first,
            )
            for job_id, job in sorted(self._jobs.items())
        ]
        decisions = self.tracker.observe(now, activity)
        acted = {d.job for d in decisions}
        for a in activity:
            if a.idle_since_s is None and self._jobs[a.job].noticed and a.job not in acted:
                self._lift(a.job, "the GPUs are in use again: the reclaim notice is lifted")
        for decision in decisions:
            self._carry_out(decision, now)
        return decisions

    def _running(self) -> dict[str, _Job]:
        """This scheduler's running jobs that hold GPUs, from the informers' cache."""
        objects = self.cluster.state.objects
        names = self.cluster.state.scheduler_names
        jobs: dict[str, _Job] = {}
        for key, pod in sorted(objects["pods"].items()):
            node = tr.node_name_of(pod)
            if not tr.is_ours(pod, names) or node is None or not tr.is_active(pod):
                continue
            if pod["metadata"].get("deletionTimestamp") or pod.get("status", {}).get("phase") != "Running":
                continue
            gpus = tr.pod_request(pod).whole_gpus
            if gpus <= 0:
                continue
            meta = pod["metadata"]
            labels = {str(k): str(v) for k, v in (meta.get("labels") or {}).items()}
            annotations = meta.get("annotations") or {}
            namespace = str(meta["namespace"])
            job = jobs.setdefault(tr.job_id_of(pod), _Job(owner=labels.get(tr.USER_LABEL, namespace),
                                                          namespace=namespace))  # fmt: skip
            job.pods.append(key)
            job.gpus += gpus
            job.labels.update(labels)
            job.first = job.first or annotations.get(tr.RECLAIM_ANNOTATION) == "first"
            job.noticed = job.noticed or NOTICE_ANNOTATION in annotations
            node_obj = objects["nodes"].get(node)
            if node_obj is not None and job.pool is None:
                job.pool = str((node_obj["metadata"].get("labels") or {}).get(tr.POOL_LABEL, "default"))
        return jobs

    # ------------------------------------------------------------- operators
    def _read_operators(self) -> None:
        """Apply the ledger's new entries: operators' actions, and our own acts (an approval is spent)."""
        if self.ledger is None:
            return
        for entry in self.ledger.since(self._read_id):
            self._read_id = max(self._read_id, entry.id or 0)
            if entry.actor == ACTOR:
                if entry.action in {ReclaimAction.EVICT.value, ReclaimAction.MARK.value}:
                    self.tracker.approved.discard(entry.job)
                self._remember_own(entry)
                continue
            if entry.action not in OPERATOR_ACTIONS:
                continue
            self._apply(entry)

    def _remember_own(self, entry: LedgerEntry) -> None:
        """Keep a notice an earlier scheduler entered (and whether it acted since; a lifted notice is
        forgotten). Entries this process made are never read back (``_enter`` skips past them)."""
        action = entry.action.removesuffix(" (dry run)")
        if action == "notify":
            self._told[entry.job] = (entry.at_s, False)
        elif action in {"evict", "evict (refused)", "mark"} and entry.job in self._told:
            self._told[entry.job] = (self._told[entry.job][0], True)
        elif action == "notice lifted":
            self._told.pop(entry.job, None)

    def _restore_notices(self) -> None:
        """Hand the tracker the notices read back whose job still runs with our notice on its pods
        (a job of the same name started since carries none, and is told afresh)."""
        for job_id, (notified_s, acted) in self._told.items():
            job = self._jobs.get(job_id)
            if job is not None and job.noticed:
                self.tracker.restore(job_id, notified_s, acted)
        self._told.clear()

    def _apply(self, entry: LedgerEntry) -> None:
        job = entry.job
        if entry.action == "exempt":
            self.tracker.exempt(job)
            if job in self._jobs and self._jobs[job].noticed:
                self._lift(job, f"exempted from reclaim by {entry.actor}: the notice is lifted")
        elif entry.action == "approve":
            if not self.tracker.approve(job):
                log.warning("approval of %s by %s: nothing pending for it now", job, entry.actor)
        else:
            ref = self.ledger.entry(entry.ref) if self.ledger is not None and entry.ref is not None else None
            undone = ref.action if ref is not None else "exempt"
            if undone == "exempt":
                self.tracker.exempted.discard(job)
            elif undone == "approve":
                self.tracker.approved.discard(job)
            elif undone == "mark" and job in self._jobs:
                self._annotate(job, {MARK_ANNOTATION: None})
        log.info("reclaim %s of %s by %s applied", entry.action, job, entry.actor, extra={"job": job})

    # ------------------------------------------------------------- carry out
    def _carry_out(self, d: ReclaimDecision, now: float) -> None:
        job = self._jobs[d.job]
        dry = " (dry run)" if d.dry_run else ""
        if d.step is Step.NOTIFY:
            grace = self.tracker.policy_for(job.pool)
            when = now + (grace.grace_s if grace is not None else 0.0)
            text = f"{dry.strip()} {d.reason}; {d.action.value} at {utc_stamp(when)}".strip()
            self._annotate(d.job, {NOTICE_ANNOTATION: text})
            self._event(d.job, "IdleGPUs", text)
            self._record(d, "notify" + dry, d.reason, now)
            log.info("reclaim notice for %s: %s", d.job, text, extra={"job": d.job})
            return
        if d.dry_run:
            text = f"(dry run) would {d.action.value} now: {d.reason}"
            self._annotate(d.job, {NOTICE_ANNOTATION: text})
            self._event(d.job, "ReclaimDryRun", text)
            self._record(d, d.action.value + dry, d.reason, now)
        elif d.action is ReclaimAction.MARK:
            self._annotate(d.job, {MARK_ANNOTATION: d.reason})
            self._event(d.job, "ReclaimMarked", f"marked for reclaim: {d.reason}")
            self._record(d, "mark", d.reason, now)
        else:
            self._event(d.job, "Reclaimed", f"evicting its pods: {d.reason}")
            refused = [f"{key}: {why}" for key in job.pods if (why := self._evict(key)) is not None]
            done = len(job.pods) - len(refused)
            reason = f"{d.reason}; {done} of {len(job.pods)} pods evicted" + (
                f"; refused: {'; '.join(refused)}" if refused else ""
            )
            self._record(d, "evict" if done else "evict (refused)", reason, now)
        log.info("reclaim %s%s of %s: %s", d.action.value, dry, d.job, d.reason, extra={"job": d.job})

    def _lift(self, job_id: str, reason: str) -> None:
        self._annotate(job_id, {NOTICE_ANNOTATION: None})
        self._jobs[job_id].noticed = False
        job = self._jobs[job_id]
        self._enter(LedgerEntry(self.cluster.clock(), job_id, job.owner, job.namespace, "notice lifted",
                                reason, ACTOR, job.gpus, 0.0))  # fmt: skip
        log.info("reclaim notice of %s lifted: %s", job_id, reason, extra={"job": job_id})

    def _record(self, d: ReclaimDecision, action: str, reason: str, now: float) -> None:
        job = self._jobs[d.job]
        self._enter(LedgerEntry(now, d.job, d.owner, job.namespace, action, reason, ACTOR, job.gpus,
                                round(d.idle_gpu_hours, 3)))  # fmt: skip

    def _enter(self, entry: LedgerEntry) -> None:
        if self.ledger is not None:
            made = self.ledger.record(entry)
            self._read_id = max(self._read_id, made.id or 0)

    # ------------------------------------------------------------ API writes
    def _annotate(self, job_id: str, annotations: Mapping[str, str | None]) -> None:
        for key in self._jobs[job_id].pods:
            if not self.cluster.lease.holds_now():
                self.cluster.stats.add("fenced")
                return
            namespace, name = key.split("/", 1)
            try:
                self.cluster.core.patch_namespaced_pod(
                    name, namespace, {"metadata": {"annotations": dict(annotations)}},
                    _request_timeout=REQUEST_TIMEOUT_S,
                )  # fmt: skip
            except ApiFailure as exc:
                self.cluster._api_error(f"annotate {key} for reclaim", exc)

    def _event(self, job_id: str, reason: str, message: str) -> None:
        """One Event on the job's first pod (the owner's ``kubectl get events`` shows it)."""
        key = self._jobs[job_id].pods[0]
        if not self.cluster.lease.holds_now():
            self.cluster.stats.add("fenced")
            return
        namespace = key.split("/", 1)[0]
        event = pod_event(key, reason, message[:1024], self.cluster.clock())
        try:
            self.cluster.core.create_namespaced_event(namespace, event, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiFailure as exc:
            self.cluster._api_error(f"create reclaim event for {key}", exc)

    def _evict(self, key: str) -> str | None:
        """Evict one pod through the Eviction API; None when done, else why not."""
        if not self.cluster.lease.holds_now():
            self.cluster.stats.add("fenced")
            return "this replica no longer leads"
        try:
            self.cluster.post_eviction(key)
        except ApiFailure as exc:
            self.cluster.stats.add("eviction_failures")
            self.cluster._api_error(f"evict {key} for reclaim", exc)
            return f"{getattr(exc, 'status', '')} {getattr(exc, 'reason', exc)}".strip()
        self.cluster.stats.add("reclaim_evictions")
        return None


class PrometheusIdle:
    """Idle times from GPU telemetry: the series labelled with a job's pods (``namespace``, ``pod``, as
    dcgm-exporter and ``loadmaster agent`` label them), ``GPU_UTIL`` over ``lookback_s`` in steps of
    ``step_s``. A GPU is idle since just after its last sample above ``idle_max_util_pct`` (gaps are
    skipped, as the dashboard's reclaim report does); a job is idle since the latest of its GPUs, and
    only when every one of its GPUs has series and is idle now."""

    def __init__(
        self,
        store: TelemetryStore,
        *,
        step_s: float = 30.0,
        lookback_s: float = 6 * 3600.0,
        idle_max_util_pct: float = 0.0,
    ) -> None:
        self.store = store
        self.step_s = step_s
        self.lookback_s = lookback_s
        self.idle_max_util_pct = idle_max_util_pct

    def idle_since(self, pods: Mapping[str, Sequence[str]], now_s: float) -> dict[str, float | None]:
        by_pod: dict[str, list[int]] = {}
        for s in self.store.series():
            namespace, pod = s.labels.get("namespace"), s.labels.get("pod")
            if s.scope == "gpu" and namespace and pod and "GPU_I_ID" not in s.labels:
                by_pod.setdefault(f"{namespace}/{pod}", []).append(s.id)
        wanted = {job: [i for p in keys for i in by_pod.get(p, [])] for job, keys in pods.items()}
        ids = sorted({i for found in wanted.values() for i in found})
        if not ids:
            return {}
        util = telemetry_field("GPU_UTIL")
        start = math.floor((now_s - self.lookback_s) / self.step_s) * self.step_s  # a grid that stays put
        rows = self.store.range(util, ids, start, now_s, self.step_s)
        row_of = {s: k for k, s in enumerate(rows.series)}
        since_gpu = {s: self._since(rows.peak[row_of[s]], rows.times_s) for s in ids if s in row_of}
        out: dict[str, float | None] = {}
        for job, found in wanted.items():
            starts = [since_gpu.get(s) for s in found]
            out[job] = max(t for t in starts if t is not None) if found and None not in starts else None
        return out

    def _since(self, peak: np.ndarray[Any, Any], times: np.ndarray[Any, Any]) -> float | None:
        seen = np.isfinite(peak)
        if not seen.any() or peak[np.flatnonzero(seen)[-1]] > self.idle_max_util_pct:
            return None  # no sample, or busy at the last one
        busy = np.flatnonzero(seen & (peak > self.idle_max_util_pct))
        first = int(busy[-1]) + 1 if busy.size else int(np.argmax(seen))
        return float(times[first])
