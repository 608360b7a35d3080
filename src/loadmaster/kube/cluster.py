"""KubeCluster: the scheduler's loop body against a Kubernetes API server.

Each :meth:`KubeCluster.step` drains the informers' changes, checks that
this replica holds the leader Lease (a replica that does not binds nothing),
finishes any gang rollback recorded in the API, builds a snapshot, runs the
same ``Scheduler.cycle`` as the simulator and carries out its decisions:
evictions (Eviction API), then binds (Binding subresource), then the PodGroup
status and the pending reasons (the pod's ``PodScheduled`` condition and an
Event, only when the reason changed).

Safety, in the order the code enforces it:

* **Fencing.** Every bind and every rollback delete first checks
  :meth:`LeaderElector.holds_now` (the last renewal is younger than the renew
  deadline, which is shorter than the lease), so a replica whose lease may
  have passed to another writes nothing, even mid-cycle.
* **Nothing counted free too early.** Terminating pods and pods of other
  schedulers use their resources until they are gone (``state.view``).
  Binds are *assumed* (kube-scheduler's assume cache) before they are sent,
  so a stale or reordered watch event cannot make their room look free.
* **Preemption waits.** A bind onto a node where a victim is still
  Terminating is deferred (its reason says which pods it waits for), and no
  new victims are chosen while earlier ones are still terminating.
* **Gangs.** A gang's pods are assumed together and bound concurrently; a
  bind that fails for a reason that may pass (5xx, 429, timeout, conflict) is
  retried at the next step on the same node while the reservation holds. A
  gang still short of ``minMember`` bound pods after its PodGroup's
  ``scheduleTimeoutSeconds`` (default :data:`DEFAULT_GANG_TIMEOUT_S`) is
  released: the intent is first written on the PodGroup (annotation
  :data:`ROLLBACK_ANNOTATION`), so a successor finishes it; then its
  controller-owned pods are deleted gracefully (their controller recreates
  them) and bare pods, which nothing would recreate, get a condition and an
  Event instead. PodGroup status (phase, scheduled/running counts,
  ``scheduleStartTime``, a condition) follows scheduler-plugins' PodGroup API.

State lives in the API: a restarted scheduler lists everything, sees which
pods are bound, and completes a gang it left half bound or rolls it back.
:attr:`KubeCluster.stats` counts what happened and calls listeners with
latencies, for a metrics endpoint to read.
"""

from __future__ import annotations

import logging
import queue
import threading
import time
from collections import Counter
from collections.abc import Callable, Iterable, Mapping
from concurrent.futures import ThreadPoolExecutor
from dataclasses import dataclass, field, replace
from typing import Any

import numpy as np
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from loadmaster.kube import translate as tr
from loadmaster.kube.api import PODGROUP_API, REQUEST_TIMEOUT_S, ApiFailure, Event, Informer, LeaderElector
from loadmaster.kube.checkpoint import UsageCheckpoint
from loadmaster.kube.history import JobHistory
from loadmaster.kube.profiles import skipped_walks
from loadmaster.kube.semantics import kube_scheduler, scheduler_names
from loadmaster.kube.state import KubeState, View, drain
from loadmaster.model import Job, NodeTable
from loadmaster.scheduling import Bind, CycleResult, Preempt, Scheduler

log = logging.getLogger(__name__)

KINDS = ("nodes", "pods", "podgroups", "priorityclasses")
DEFAULT_GANG_TIMEOUT_S = 60.0
"""A gang's time to get ``minMember`` pods bound when its PodGroup sets no ``scheduleTimeoutSeconds``:
scheduler-plugins' coscheduling default (``permitWaitingTimeSeconds``, 60 s)."""
DEFAULT_BIND_WORKERS = 16
"""Binds in flight at once: enough to hide a 10 ms API round trip at hundreds of pods per second."""
ROLLBACK_ANNOTATION = "loadmaster.io/rollback"
"""On a PodGroup: why its bound pods are being released; removed when the release is done."""
TIMEOUT_CONDITION = "loadmaster.io/GangTimedOut"
"""Condition on a bare pod of a gang that timed out: nothing would recreate it, so it is not deleted."""

Outcome = str
"""What one bind attempt came to: ``bound``, ``retry`` (may pass), ``gone`` (pod deleted), ``taken``
(bound by someone else), ``fenced`` (this replica no longer leads: not sent)."""


@dataclass
class StepReport:
    """What one step did."""

    leader: bool
    bound: list[tuple[str, str]] = field(default_factory=list)
    """(pod key, node) bound this step."""
    evicted: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    """Job ids whose gang release started or went on this step."""
    waiting: dict[str, str] = field(default_factory=dict)
    """Job id -> why it still waits."""
    planned_binds: list[tuple[str, str]] = field(default_factory=list)
    """(pod key, node) the cycle decided to bind (written or, in a dry run, not)."""
    planned_evictions: list[str] = field(default_factory=list)
    """Pod keys the cycle decided to evict."""
    failed_binds: list[str] = field(default_factory=list)
    """Pod keys whose bind failed this step (retried while their reservation holds)."""
    bind_s: dict[str, float] = field(default_factory=dict)
    """Pod key -> seconds its Binding request took this step (sent ones only, accepted or not)."""
    fenced: int = 0
    """Writes not sent because the lease was no longer certainly held."""
    result: CycleResult | None = None
    view: View | None = None
    """The snapshot the cycle ran on (None when it did not run): what the metrics count pods in."""
    algorithm_s: float = 0.0
    """Seconds ``Scheduler.cycle`` took."""
    walks_skipped: int = 0
    """Profiles whose cycle skipped its backfill walk, the walk's ``interval_s`` not having passed
    since the last one (jobs then start in queue order only)."""


@dataclass
class Stats:
    """Counters of what the scheduler did, for a metrics module to read (thread-safe increments).

    ``listeners`` are called as ``listener(name, value)`` with ``bind_latency_s``
    (one per Binding request the API accepted), ``bind_error_latency_s`` (one per
    Binding request that failed), ``cycle_s`` (one per leading step) and
    ``leader`` (1.0 or 0.0 on each change).
    """

    counts: Counter[str] = field(default_factory=Counter)
    """binds, bind_failures, evictions, eviction_failures, rollbacks, deletes, api_errors, fenced,
    cycles, walks_skipped (periodic backfill walks not yet due), and ``attempts_<result>``
    (scheduled, unschedulable) per job examined."""
    listeners: list[Callable[[str, float], None]] = field(default_factory=list)
    _lock: threading.Lock = field(default_factory=threading.Lock, repr=False)

    def add(self, name: str, amount: int = 1) -> None:
        with self._lock:
            self.counts[name] += amount

    def emit(self, name: str, value: float) -> None:
        for listener in self.listeners:
            listener(name, value)


@dataclass
class _Assumed:
    """A bind decided and not yet seen in the API: its room stays taken meanwhile."""

    job_id: str
    node: str
    gpus: str
    deadline_s: float
    """Wall-clock time after which a bind that keeps failing is given up."""
    sent: bool = False
    """Tried at least once (a failed one is retried at the next step)."""
    accepted: bool = False
    """The API server accepted the bind; kept until the informer shows it (a stale event cannot undo it)."""


class KubeCluster:
    """The live side of the backend seam: informers in, Binding/Eviction/status writes out."""

    def __init__(
        self,
        api: client.ApiClient,
        scheduler: Scheduler,
        identity: str,
        *,
        seed: int = 0,
        lease: LeaderElector | None = None,
        clock: Callable[[], float] = time.time,
        write_reasons: bool = True,
        bind_workers: int = DEFAULT_BIND_WORKERS,
        gang_timeout_s: float = DEFAULT_GANG_TIMEOUT_S,
        history: JobHistory | None = None,
        checkpoint: UsageCheckpoint | None = None,
    ) -> None:
        self.api = api
        self.core = client.CoreV1Api(api)
        self.custom = client.CustomObjectsApi(api)
        self.scheduler = kube_scheduler(scheduler)
        self.identity = identity
        self.rng = np.random.default_rng(seed)
        self.lease = lease if lease is not None else LeaderElector(api, identity, clock=clock)
        self.clock = clock
        self.write_reasons = write_reasons
        self.gang_timeout_s = gang_timeout_s
        self.stats = Stats()
        self.state = KubeState(scheduler_names=scheduler_names(self.scheduler))
        self.history = history if history is not None else JobHistory()
        """Fair-share usage and run-time history of the jobs that ended, kept by every replica; with a
        checkpoint, a replica that becomes leader starts it again from the store first."""
        self._history_epoch = 0
        """How many times the history was started again from the checkpoint (part of its change mark)."""
        self.checkpoint = checkpoint
        """Where the history is kept across restarts: read before the first charge, written by the
        leader (None: in memory only)."""
        self.changes: queue.Queue[Event] = queue.Queue()
        self.informers = {kind: Informer(kind, api, self.changes) for kind in KINDS}
        self.assumed: dict[str, _Assumed] = {}
        """Pod key -> a bind decided and not yet confirmed by the informer."""
        self.victims: dict[str, str] = {}
        """Pod key -> node of a pod this replica evicted, until it is gone from the API."""
        self._pool = ThreadPoolExecutor(max_workers=max(bind_workers, 1), thread_name_prefix="bind")
        self._partial_since: dict[str, float] = {}
        self._reasons: dict[str, tuple[str, str]] = {}
        """Pod key -> (uid, reason) last written, for the pods still waiting: a reason is written once."""
        self._was_leader = False

    def start(self, renew_in_background: bool = False) -> None:
        """Start the informers and, with ``renew_in_background``, the Lease renewal thread."""
        for informer in self.informers.values():
            informer.start()
        if renew_in_background:
            self.lease.start()

    def stop(self) -> None:
        """Stop watching and renewing; a leader writes its fair-share checkpoint first (a clean stop)."""
        if self._was_leader and self.lease.holds_now() and self._cache_trusted() is None:
            try:
                self.save_checkpoint(self.clock(), force=True)
            except Exception:  # stopping goes on: the last periodic checkpoint stays
                log.exception("fair-share checkpoint on stop failed")
        for informer in self.informers.values():
            informer.stop()
        self.lease.stop()
        self._pool.shutdown(wait=False)

    def list_now(self) -> None:
        """List every kind once, without watching: for one-shot commands (dry run, snapshot)."""
        for informer in self.informers.values():
            informer.list_once()
        self.drain()

    def listed(self) -> bool:
        """True once every informer has listed its kind at least once."""
        self.drain()
        return all(i.version > 0 for i in self.informers.values())

    def synced_to(self, version: int) -> bool:
        """True once every informer has listed and seen the API up to ``version``."""
        self.drain()
        return all(i.version >= version for i in self.informers.values())

    @property
    def staleness_s(self) -> float:
        """Age of the oldest informer's last successful list or watch event, in seconds."""
        return max(i.staleness_s for i in self.informers.values())

    def drain(self) -> None:
        """Apply every change the informers have queued, stale events dropped (:func:`state.drain`)."""
        drain(self.changes, self.state)

    # ------------------------------------------------------------------ step
    def step(self, dry_run: bool = False) -> StepReport:
        """One cycle: sync, lead, decide, act. ``dry_run``: decide only, write nothing."""
        started = time.perf_counter()
        self.drain()
        now = self.clock()
        restored = self.read_history(now)
        if not dry_run and not self.lead():
            return StepReport(leader=False)
        report = StepReport(leader=True)
        if not restored:
            assert self.checkpoint is not None
            report.waiting["*"] = (
                f"fair-share usage not read yet from ConfigMap {self.checkpoint.configmap} (see the log)"
            )
            return report
        self._settle()
        distrust = None if dry_run else self._cache_trusted()
        if distrust is not None:
            log.warning("not scheduling this step: %s", distrust)
            report.waiting["*"] = f"the scheduler's cache may be stale: {distrust}"
            return report
        if not dry_run:
            self.save_checkpoint(now)  # after the trust check: a stale cache must not move the watermark
        if not dry_run:
            self._finish_rollbacks(report)
            self._retry_binds(report)
        view = self._view()
        if view is None:
            return report
        view.snapshot = self.history.applied(view.snapshot, now)
        rolling = self._rolling_back()
        if rolling:
            pending = tuple(p for p in view.snapshot.pending if p.job.id not in rolling)
            view.snapshot = replace(view.snapshot, pending=pending)
        skipped = skipped_walks(self.scheduler)
        algorithm_started = time.perf_counter()
        result = self.scheduler.cycle(view.snapshot, self.clock(), self.rng)
        report.algorithm_s = time.perf_counter() - algorithm_started
        report.walks_skipped = skipped_walks(self.scheduler) - skipped
        if report.walks_skipped:
            self.stats.add("walks_skipped", report.walks_skipped)
            log.debug(
                "backfill walk skipped: its interval has not passed since the last walk; "
                "jobs start in queue order only",
                extra={"walks_skipped": report.walks_skipped, "pending": len(view.snapshot.pending)},
            )
        report.result, report.view = result, view
        self._explain(view, result, report)
        _plan(view, result, report)
        if dry_run:
            return report
        held = self._evict_all(view, result, report)
        self._bind_all(view, [d for d in result.decisions if isinstance(d, Bind)], held, report)
        self._time_out_gangs(report)
        self._write_group_statuses(view, report)
        if self.write_reasons:
            self._write_reasons(view, report.waiting)
        self.stats.add("cycles")
        self.stats.emit("cycle_s", time.perf_counter() - started)
        return report

    def read_history(self, now: float) -> bool:
        """Read the fair-share checkpoint if not yet read, then charge what ended since the last call;
        False (nothing charged) while the checkpoint cannot be read."""
        if self.checkpoint is not None and not self.checkpoint.restore(self.history, now):
            return False
        self._charge(now)
        return True

    def _charge(self, now: float) -> None:
        state = self.state
        charged = self.history.observe(
            state.objects["pods"],
            state.scheduler_names,
            now,
            nodes=state.objects["nodes"],
            default_time_limit_s=state.default_time_limit_s,
            requests=state.request_of,
        )
        if charged:
            self.stats.add("usage_charged", charged)

    def save_checkpoint(self, now: float, *, force: bool = False) -> None:
        """As the leader: write the fair-share checkpoint when due (``force``: whenever it changed, as on
        a clean stop), after starting the history again from the store where that is wanted."""
        checkpoint = self.checkpoint
        if checkpoint is None or not checkpoint.restored:
            return
        if checkpoint.reload_due():
            self._reload_history(checkpoint, now)
        changes = (self._history_epoch, self.history.changes)  # a history started again counts anew
        if not (checkpoint.due(changes) or (force and checkpoint.changed(changes))):
            return
        stale = self.informers["pods"].staleness_s
        if checkpoint.save(self.history, now, changes, stale_s=stale):
            self.stats.add("checkpoint_saves")
        else:
            self.stats.add("checkpoint_failures")

    def _reload_history(self, checkpoint: UsageCheckpoint, now: float) -> None:
        """Start the history again from the store, then charge what the store does not hold.

        A replica that has just become leader kept its own history from its start; the last leader
        may have charged pods since that this replica never saw end (removed before it looked). What
        the store holds plus the pods still in the API is the whole of what is known, so writing the
        replica's own history over the store would lose usage. On failure the current history stays
        and no write is made until a read succeeds (the next try waits the backoff).
        """
        fresh = JobHistory(self.history.usage.half_life_s, self.history.history_jobs)
        outcome = checkpoint.read_into(fresh, now)
        if outcome in {"forbidden", "failed"}:
            self.stats.add("checkpoint_failures")
            return
        checkpoint.reloaded()
        if outcome == "empty":  # nothing usable stored (deleted, or set aside): this history is all there is
            log.warning(
                "fair-share checkpoint ConfigMap %s holds no ledger: writing this replica's own",
                checkpoint.configmap,
            )
            return
        self.history = fresh
        self._history_epoch += 1
        self._charge(now)
        log.info("fair-share history started again from ConfigMap %s", checkpoint.configmap)

    def lead(self) -> bool:
        """True when this replica holds the lease now (trying to take or renew it unless a thread does;
        on becoming leader it lists everything afresh first)."""
        # With a renewal thread, the cycle only checks; it tries itself only when not leading (so a
        # fresh replica need not wait a retry period for its first try).
        leading = self.lease.holds_now() if self.lease.background else False
        leading = leading or self.lease.acquire_or_renew()
        if leading and not self._was_leader:
            leading = self._fresh_list()
            if leading and self.checkpoint is not None and self.checkpoint.restored:
                self.checkpoint.reload_wanted = True  # the last leader may have written since this read
        if leading != self._was_leader:
            self._was_leader = leading
            self.stats.emit("leader", float(leading))
            if not leading:  # the new leader decides afresh: binds not accepted by the API are void
                self.assumed = {k: a for k, a in self.assumed.items() if a.accepted}
        return leading

    def _fresh_list(self) -> bool:
        """On becoming leader: list every kind afresh (a consistent read), so that the binds the last
        leader made before its renew deadline are in the cache before this replica decides anything."""
        try:
            self.list_now()
        except Exception as exc:  # any failure: stay a follower this step, try again next step
            self._api_error("list on becoming leader", exc)
            return False
        return True

    def _cache_trusted(self) -> str | None:
        """Why the cache may be missing changes (an informer never listed, or failing now); None if fine."""
        for informer in self.informers.values():
            if informer.version == 0:
                return f"{informer.kind} not listed (or re-listing after 410 Gone)"
            if informer.failures_in_a_row > 0:
                return f"{informer.kind} informer reconnecting after {informer.failures_in_a_row} errors"
        return None

    def _reject(self, job: Job, table: NodeTable) -> str | None:
        verdict = self.scheduler.feasible(job, table)
        return None if verdict.ok else verdict.reason

    def _view(self) -> View | None:
        """The snapshot with every assumed bind applied over the cached pods (the cache itself untouched)."""
        cached = self.state.objects["pods"]
        if not self.assumed:
            return self.state.view(self._reject)
        overlaid = dict(cached)
        for key, assumed in self.assumed.items():
            pod = cached.get(key)
            if pod is not None and tr.node_name_of(pod) is None:
                overlaid[key] = _with_node(pod, assumed.node, assumed.gpus)
        self.state.objects["pods"] = overlaid
        try:
            return self.state.view(self._reject)
        finally:
            self.state.objects["pods"] = cached

    def _settle(self) -> None:
        """Forget assumptions the API has confirmed (pod bound, or gone) or that expired; gone victims."""
        pods = self.state.objects["pods"]
        now = self.clock()
        for key, assumed in list(self.assumed.items()):
            pod = pods.get(key)
            if pod is None or tr.node_name_of(pod) is not None:
                del self.assumed[key]  # the informer shows the bind (ours or another's), or the pod went
            elif now > assumed.deadline_s and not assumed.accepted:
                log.warning("bind of %s to %s given up: its reservation expired", key, assumed.node)
                del self.assumed[key]
        for key in [k for k in self.victims if k not in pods]:
            del self.victims[key]

    def _node_of(self, key: str) -> str | None:
        """The node a pod is bound to, in the cache or as assumed."""
        pod = self.state.objects["pods"].get(key)
        node = tr.node_name_of(pod) if pod is not None else None
        assumed = self.assumed.get(key)
        return node or (assumed.node if assumed is not None else None)

    def _explain(self, view: View, result: CycleResult, report: StepReport) -> None:
        report.waiting.update(view.incomplete)
        for job_id, job in view.jobs.items():
            if job_id in view.unbound:
                status = result.status_of(job_id, self.scheduler.profile.lane(job))
                if status is not None:
                    report.waiting[job_id] = status.reason
                    self.stats.add("attempts_unschedulable")
        for decision in result.decisions:  # a job bound whole this cycle no longer waits
            if isinstance(decision, Bind) and decision.starts:
                report.waiting.pop(decision.job_id, None)
                self.stats.add("attempts_scheduled")

    # ------------------------------------------------------------------ binds
    def _bind_all(
        self, view: View, binds: list[Bind], held: Mapping[str, list[str]], report: StepReport
    ) -> None:
        """Assume every bind of the cycle, then send them concurrently, each fenced on the lease."""
        work: list[tuple[str, str, str]] = []
        now = self.clock()
        for bind in binds:
            pods = view.unbound[bind.job_id][: len(bind.placements)]
            nodes = [view.node_names[p.node] for p in bind.placements]
            waits = sorted({k for n in nodes for k in held.get(n, [])})
            if waits:
                report.waiting[bind.job_id] = (
                    f"waiting for preempted pods to terminate: {', '.join(waits[:5])}"
                    + (f" and {len(waits) - 5} more" if len(waits) > 5 else "")
                )
                continue
            deadline = now + self._timeout_of(bind.job_id)
            for key, placement, node in zip(pods, bind.placements, nodes, strict=True):
                gpus = ",".join(str(g) for g in placement.gpu_indices)
                self.assumed[key] = _Assumed(bind.job_id, node, gpus, deadline)
                work.append((key, node, gpus))
        self._send_binds(work, report)

    def _retry_binds(self, report: StepReport) -> None:
        """Send again the binds that failed earlier and whose reservation still holds."""
        pods = self.state.objects["pods"]
        work = [
            (key, a.node, a.gpus)
            for key, a in self.assumed.items()
            if a.sent
            and not a.accepted
            and (pod := pods.get(key)) is not None
            and tr.node_name_of(pod) is None
        ]
        broken = _overfull_nodes(self.state, self.assumed)
        for key, node, _ in [w for w in work if w[1] in broken]:
            log.warning("bind of %s to %s dropped: the node filled up meanwhile", key, node)
            del self.assumed[key]
        work = [w for w in work if w[1] not in broken]
        if work:
            log.info("retrying %d binds whose reservation still holds", len(work))
        self._send_binds(work, report)

    def _send_binds(self, work: list[tuple[str, str, str]], report: StepReport) -> None:
        timed = list(self._pool.map(lambda w: self._fenced_bind(*w), work))
        for (key, node, _), (outcome, seconds) in zip(work, timed, strict=True):
            if outcome != "fenced":
                report.bind_s[key] = seconds
            assumed = self.assumed.get(key)
            if assumed is not None:
                assumed.sent = outcome != "fenced"
                assumed.accepted = outcome == "bound"
            if outcome == "bound":
                report.bound.append((key, node))
            elif outcome == "fenced":
                report.fenced += 1
                self.assumed.pop(key, None)
            elif outcome in {"gone", "taken"}:
                self.assumed.pop(key, None)
                report.failed_binds.append(key)
            else:
                report.failed_binds.append(key)

    def _fenced_bind(self, key: str, node: str, gpus: str) -> tuple[Outcome, float]:
        """The bind's outcome and how long its request took (0 when fenced: nothing was sent)."""
        if not self.lease.holds_now():
            self.stats.add("fenced")
            return "fenced", 0.0
        started = time.perf_counter()
        outcome = self._bind_pod(key, node, gpus)
        seconds = time.perf_counter() - started
        # Latency by outcome, as kube-scheduler labels its Bind extension point with the status code.
        self.stats.emit("bind_latency_s" if outcome == "bound" else "bind_error_latency_s", seconds)
        return outcome, seconds

    def _bind_pod(self, key: str, node: str, gpus: str) -> Outcome:
        namespace, name = key.split("/", 1)
        body = {  # a plain dict: the typed model's construction and serialization cost more than the bind
            "apiVersion": "v1",
            "kind": "Binding",
            "metadata": {"name": name, "namespace": namespace, "annotations": {tr.GPUS_ANNOTATION: gpus}},
            "target": {"apiVersion": "v1", "kind": "Node", "name": node},
        }
        try:
            # Raw answer: the server returns a Status, which the typed client cannot decode as a Binding.
            _release(
                self.core.create_namespaced_pod_binding(
                    name, namespace, body,  # type: ignore[arg-type]  # the client serializes dicts as they are
                    _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S,
                )
            )  # fmt: skip
        except ApiFailure as exc:
            self.stats.add("bind_failures")
            self._api_error(f"bind {key} to {node}", exc)
            status = getattr(exc, "status", None)
            if status == 404:
                return "gone"
            if status == 409 and "already assigned" in str(getattr(exc, "body", "")):
                return "taken"
            return "retry"
        self.stats.add("binds")
        log.debug("bound %s to %s (gpus %s)", key, node, gpus, extra={"pod": key, "node": node})
        return "bound"

    def _timeout_of(self, job_id: str) -> float:
        group = self.state.objects["podgroups"].get(job_id)
        seconds = (group or {}).get("spec", {}).get("scheduleTimeoutSeconds")
        return float(seconds) if seconds else self.gang_timeout_s

    # -------------------------------------------------------------- evictions
    def _evict_all(self, view: View, result: CycleResult, report: StepReport) -> dict[str, list[str]]:
        """Evict the cycle's victims unless earlier ones still terminate; node -> pods binds wait for."""
        held: dict[str, list[str]] = {}
        for key, node in self.victims.items():
            held.setdefault(node, []).append(key)
        waiting_earlier = bool(self.victims)
        for decision in result.decisions:
            if not isinstance(decision, Preempt):
                continue
            for key in view.bound.get(decision.job_id, []):
                node = self._node_of(key) or ""
                held.setdefault(node, []).append(key)
                if waiting_earlier:
                    continue  # one wave at a time: victims chosen before still hold their room
                if self._evict(key, decision.reason):
                    self.victims[key] = node
                    report.evicted.append(key)
        return held

    def post_eviction(self, key: str) -> None:
        """Ask the Eviction API to evict the pod ``key`` (it honours the pod's disruption budget: 429
        while the budget allows none); raises ApiFailure when refused."""
        namespace, name = key.split("/", 1)
        body = client.V1Eviction(
            api_version="policy/v1",
            kind="Eviction",
            metadata=client.V1ObjectMeta(name=name, namespace=namespace),
        )
        _release(
            self.core.create_namespaced_pod_eviction(
                name, namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
            )
        )

    def _evict(self, key: str, reason: str) -> bool:
        if not self.lease.holds_now():
            self.stats.add("fenced")
            return False
        try:
            self.post_eviction(key)
        except ApiFailure as exc:  # still running (429: its disruption budget): decided again next cycle
            self.stats.add("eviction_failures")
            self._api_error(f"evict {key}", exc)
            return False
        self.stats.add("evictions")
        log.info("evicted %s: %s", key, reason, extra={"pod": key, "reason": reason})
        return True

    # ------------------------------------------------------------ gang release
    def _rolling_back(self) -> set[str]:
        return {
            key
            for key, group in self.state.objects["podgroups"].items()
            if ROLLBACK_ANNOTATION in (group["metadata"].get("annotations") or {})
        }

    def _time_out_gangs(self, report: StepReport) -> None:
        """Start releasing every gang still short of ``minMember`` bound pods after its timeout."""
        now = self.clock()
        rolling = self._rolling_back()
        partial = set()
        for job_id, (bound, min_member) in self._gang_counts().items():
            if job_id in rolling or not 0 < bound < min_member:
                continue
            partial.add(job_id)
            since = self._partial_since.setdefault(job_id, self._schedule_start(job_id) or now)
            if now - since < self._timeout_of(job_id):
                continue
            reason = (
                f"gang {job_id} timed out: {bound} of minMember {min_member} pods bound "
                f"after {self._timeout_of(job_id):g} s; releasing them"
            )
            if self._patch_group(job_id, {"metadata": {"annotations": {ROLLBACK_ANNOTATION: reason}}}):
                log.warning(reason, extra={"job": job_id})
                self.stats.add("rollbacks")
                group = self.state.objects["podgroups"].get(job_id)
                if group is not None:
                    meta = {
                        **group["metadata"],
                        "annotations": {
                            **(group["metadata"].get("annotations") or {}),
                            ROLLBACK_ANNOTATION: reason,
                        },
                    }
                    self.state.objects["podgroups"][job_id] = {**group, "metadata": meta}
                self._release(job_id, reason, report)
        for job_id in set(self._partial_since) - partial:
            del self._partial_since[job_id]

    def _gang_counts(self) -> dict[str, tuple[int, int]]:
        """Gang job id -> (live pods bound, in the API or accepted; minMember), for every PodGroup.

        Judged on the cache, not on the cycle's view: a gang that lost a member is not offered to
        the scheduler, yet its bound members hold their room and must time out all the same."""
        counts: dict[str, int] = {}
        for key, pod in self.state.objects["pods"].items():
            if not tr.is_ours(pod) or tr.pod_group_of(pod) is None or not tr.is_active(pod):
                continue
            job_id = tr.job_id_of(pod)
            assumed = self.assumed.get(key)
            bound = tr.node_name_of(pod) is not None or (assumed is not None and assumed.accepted)
            counts[job_id] = counts.get(job_id, 0) + bound
        groups = self.state.objects["podgroups"]
        return {
            job_id: (bound, int(groups[job_id].get("spec", {}).get("minMember", 1)))
            for job_id, bound in counts.items()
            if job_id in groups
        }

    def _schedule_start(self, job_id: str) -> float | None:
        group = self.state.objects["podgroups"].get(job_id) or {}
        stamp = (group.get("status") or {}).get("scheduleStartTime")
        return tr.timestamp_s(stamp) if stamp else None

    def _finish_rollbacks(self, report: StepReport) -> None:
        """Go on releasing each gang whose PodGroup has the rollback annotation (ours or a predecessor's)."""
        for job_id in sorted(self._rolling_back()):
            group = self.state.objects["podgroups"][job_id]
            self._release(job_id, str(group["metadata"]["annotations"][ROLLBACK_ANNOTATION]), report)

    def _release(self, job_id: str, reason: str, report: StepReport) -> None:
        """Delete the gang's controller-owned bound pods (gracefully); flag bare ones; clear when done."""
        report.rolled_back.append(job_id)
        # A bind the API accepted but the watch has not shown yet is bound all the same: not done.
        left = any(a.accepted and a.job_id == job_id for a in self.assumed.values())
        for key, pod in sorted(self.state.objects["pods"].items()):
            if tr.job_id_of(pod) != job_id or tr.node_name_of(pod) is None:
                continue
            if pod["metadata"].get("deletionTimestamp"):
                left = True  # Terminating: wait until it is gone before declaring the gang free
            elif _controller_owned(pod):
                left = True
                self._delete(key, reason)
            elif not _has_condition(pod, TIMEOUT_CONDITION):
                self._flag_bare(key, reason)
        if not left and self._patch_group(job_id, {"metadata": {"annotations": {ROLLBACK_ANNOTATION: None}}}):
            log.info("gang %s released", job_id, extra={"job": job_id})
            self._partial_since.pop(job_id, None)
            group = self.state.objects["podgroups"].get(job_id)
            if group is not None:
                annotations = dict(group["metadata"].get("annotations") or {})
                annotations.pop(ROLLBACK_ANNOTATION, None)
                self.state.objects["podgroups"][job_id] = {
                    **group,
                    "metadata": {**group["metadata"], "annotations": annotations},
                }

    def _delete(self, key: str, reason: str) -> None:
        if not self.lease.holds_now():
            self.stats.add("fenced")
            return
        namespace, name = key.split("/", 1)
        try:  # no grace_period_seconds: the pod's own terminationGracePeriodSeconds applies
            self.core.delete_namespaced_pod(name, namespace, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiFailure as exc:
            if getattr(exc, "status", None) != 404:
                self._api_error(f"delete {key}", exc)
            return
        self.stats.add("deletes")
        log.info("deleted %s (its controller recreates it): %s", key, reason, extra={"pod": key})

    def _flag_bare(self, key: str, reason: str) -> None:
        text = (
            f"{reason}; this pod has no controller to recreate it, so it was left running: delete it to retry"
        )
        if self._condition(key, TIMEOUT_CONDITION, "True", "GangTimedOut", text):
            self._event(key, "GangTimedOut", text)

    # --------------------------------------------------------- PodGroup status
    def _write_group_statuses(self, view: View, report: StepReport) -> None:
        """PodGroup status as scheduler-plugins defines it, written only when it changed."""
        now = self.clock()
        groups = self.state.objects["podgroups"]
        members: dict[str, list[tr.Obj]] = {}
        for pod in self.state.objects["pods"].values():
            if tr.is_ours(pod) and tr.pod_group_of(pod) is not None:
                members.setdefault(tr.job_id_of(pod), []).append(pod)
        writes = []
        for job_id, pods in members.items():
            group = groups.get(job_id)
            if group is None:
                continue
            assumed = sum(1 for p in pods if tr.key_of(p) in self.assumed)
            status = _group_status(group, pods, assumed, report.waiting.get(job_id), now)
            old = group.get("status") or {}
            if all(old.get(k) == status[k] for k in ("phase", "scheduled", "running")) and _same_message(
                old, status
            ):
                continue
            if status["scheduleStartTime"] is not None and old.get("scheduleStartTime"):
                status["scheduleStartTime"] = old["scheduleStartTime"]
            writes.append((job_id, status))
        done = self._pool.map(lambda w: self._patch_group(w[0], {"status": w[1]}, sub="status"), writes)
        for (job_id, status), ok in zip(writes, done, strict=True):
            group = groups.get(job_id)
            if ok and group is not None:
                groups[job_id] = {**group, "status": {**(group.get("status") or {}), **status}}

    def _patch_group(self, job_id: str, body: dict[str, Any], sub: str = "") -> bool:
        namespace, name = job_id.split("/", 1)
        call = (
            self.custom.patch_namespaced_custom_object_status
            if sub
            else self.custom.patch_namespaced_custom_object
        )
        group, version, plural = PODGROUP_API
        try:
            _release(call(group, version, namespace, plural, name, body, _preload_content=False,
                          _request_timeout=REQUEST_TIMEOUT_S))  # fmt: skip
        except ApiFailure as exc:
            self._api_error(f"patch PodGroup {job_id}", exc)
            return False
        return True

    # ---------------------------------------------------------------- reasons
    def _write_reasons(self, view: View, waiting: Mapping[str, str]) -> None:
        """Write each waiting pod's reason when it changed; forget pods no longer waiting (bounded memory)."""
        written: dict[str, tuple[str, str]] = {}
        keys: list[tuple[str, str]] = []
        for job_id, reason in waiting.items():
            for key in view.unbound.get(job_id, []):
                pod = self.state.objects["pods"].get(key)
                noted = (str((pod or {}).get("metadata", {}).get("uid")), reason)
                if self._reasons.get(key) == noted:
                    written[key] = noted
                else:
                    keys.append((key, reason))
        for (key, reason), ok in zip(
            keys, self._pool.map(lambda kr: self._write_reason(*kr), keys), strict=True
        ):
            if ok:
                pod = self.state.objects["pods"].get(key)
                written[key] = (str((pod or {}).get("metadata", {}).get("uid")), reason)
        self._reasons = written

    def _write_reason(self, key: str, reason: str) -> bool:
        return self._condition(key, "PodScheduled", "False", "Unschedulable", reason) and self._event(
            key, "FailedScheduling", reason
        )

    def _condition(self, key: str, kind: str, status: str, reason: str, message: str) -> bool:
        namespace, name = key.split("/", 1)
        condition = {
            "type": kind,
            "status": status,
            "reason": reason,
            "message": message,
            "lastTransitionTime": tr.utc_stamp(self.clock()),
        }
        try:
            self.core.patch_namespaced_pod_status(
                name, namespace, {"status": {"conditions": [condition]}}, _request_timeout=REQUEST_TIMEOUT_S
            )
        except ApiFailure as exc:
            self._api_error(f"patch status of {key}", exc)
            return False
        return True

    def _event(self, key: str, reason: str, message: str) -> bool:
        namespace = key.split("/", 1)[0]
        event = pod_event(key, reason, message, self.clock())
        try:
            self.core.create_namespaced_event(namespace, event, _request_timeout=REQUEST_TIMEOUT_S)
        except ApiFailure as exc:
            self._api_error(f"create event for {key}", exc)
            return False
        return True

    def _api_error(self, what: str, exc: BaseException) -> None:
        self.stats.add("api_errors")
        status = getattr(exc, "status", None)
        text = f"{status} {getattr(exc, 'reason', '')}" if isinstance(exc, ApiException) else str(exc)[:200]
        log.warning("%s failed: %s", what, text, extra={"action": what, "status": status})


def pod_event(key: str, reason: str, message: str, epoch_s: float) -> client.CoreV1Event:
    """A Warning Event from the scheduler on the pod ``key`` (namespace/name), seen at ``epoch_s``."""
    namespace, name = key.split("/", 1)
    stamp = tr.utc_stamp(epoch_s)
    return client.CoreV1Event(
        api_version="v1",
        kind="Event",
        metadata=client.V1ObjectMeta(generate_name=f"{name}.", namespace=namespace),
        involved_object=client.V1ObjectReference(
            api_version="v1", kind="Pod", name=name, namespace=namespace
        ),
        reason=reason,
        message=message,
        type="Warning",
        source=client.V1EventSource(component=tr.SCHEDULER_NAME),
        first_timestamp=stamp,
        last_timestamp=stamp,
        count=1,
    )


def _overfull_nodes(state: KubeState, assumed: Mapping[str, _Assumed]) -> set[str]:
    """Nodes whose GPUs, CPU or memory the bound pods (Terminating and foreign included) plus the
    assumed binds exceed: somebody else took the room a failed bind was holding."""
    used: dict[str, list[int]] = {}
    pods = state.objects["pods"]
    for key, pod in pods.items():
        node = tr.node_name_of(pod) or (assumed[key].node if key in assumed else None)
        if node is None or tr.phase_of(pod) in tr.TERMINAL_PHASES:
            continue
        request = state.request_of(pod)
        total = used.setdefault(node, [0, 0, 0])
        total[0] += request.whole_gpus
        total[1] += request.cpu_milli
        total[2] += request.memory_mib
    full = set()
    for name, (gpus, cpu, memory) in used.items():
        node_obj = state.objects["nodes"].get(name)
        if node_obj is None:
            continue
        capacity = tr.node_from(node_obj).node
        if gpus > capacity.gpus or cpu > capacity.cpu_milli or memory > capacity.memory_mib:
            full.add(name)
    return full


def _release(response: Any) -> None:
    """Read a raw answer and hand its connection back to the pool (else each call opens a new one)."""
    _ = response.data
    response.release_conn()


def _with_node(pod: tr.Obj, node: str | None, gpus: str | None) -> dict[str, Any]:
    """A copy of ``pod`` bound to ``node`` with ``gpus`` recorded (None: unbound again)."""
    annotations = dict(pod["metadata"].get("annotations") or {})
    spec = dict(pod.get("spec", {}))
    if node is None:
        spec.pop("nodeName", None)
        annotations.pop(tr.GPUS_ANNOTATION, None)
    else:
        spec["nodeName"] = node
        annotations[tr.GPUS_ANNOTATION] = str(gpus)
    return {**pod, "metadata": {**pod["metadata"], "annotations": annotations}, "spec": spec}


def _bound_in_api(pod: tr.Obj) -> bool:
    """True when the API itself says the pod is bound (the PodScheduled condition it sets on a bind)."""
    return _has_condition(pod, "PodScheduled", "True")


def _has_condition(pod: tr.Obj, kind: str, status: str = "True") -> bool:
    conditions: Iterable[Mapping[str, Any]] = pod.get("status", {}).get("conditions") or ()
    return any(c.get("type") == kind and c.get("status") == status for c in conditions)


def _controller_owned(pod: tr.Obj) -> bool:
    """True when an owner reference marks a controller, which recreates the pod if it is deleted."""
    return any(ref.get("controller") for ref in pod["metadata"].get("ownerReferences") or ())


def _group_status(
    group: tr.Obj, pods: list[tr.Obj], assumed: int, reason: str | None, now: float
) -> dict[str, Any]:
    """Phase and counts (scheduler-plugins' PodGroupStatus) and a ``Scheduled`` condition saying why.

    ``assumed``: pods whose bind was sent and not yet seen, counted as scheduled.
    """
    min_member = int(group.get("spec", {}).get("minMember", 1))
    live = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    scheduled = sum(tr.node_name_of(p) is not None for p in live) + assumed
    running = sum(p.get("status", {}).get("phase") == "Running" for p in live)
    failed = sum(p.get("status", {}).get("phase") == "Failed" for p in pods)
    if ROLLBACK_ANNOTATION in (group["metadata"].get("annotations") or {}):
        phase, reason = "Failed", str(group["metadata"]["annotations"][ROLLBACK_ANNOTATION])
    elif failed and failed + running >= min_member:
        phase = "Failed"
    elif running >= min_member:
        phase = "Running"
    elif scheduled >= min_member:
        phase = "Scheduled"
    elif scheduled > 0:
        phase = "Scheduling"
    else:
        phase = "Pending"
    stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(now))
    ok = phase in {"Scheduled", "Running"}
    condition = {
        "type": "Scheduled",
        "status": "True" if ok else "False",
        "reason": phase,
        "message": "" if ok else (reason or f"{scheduled} of minMember {min_member} pods bound"),
        "lastTransitionTime": stamp,
    }
    status: dict[str, Any] = {
        "phase": phase,
        "scheduled": scheduled,
        "running": running,
        "conditions": [condition],
    }
    # Cleared (a merge patch's null) when the gang waits again, so its next try gets a fresh timeout.
    status["scheduleStartTime"] = stamp if phase in {"Scheduling", "Scheduled", "Running"} else None
    return status


def _same_message(old: Mapping[str, Any], new: Mapping[str, Any]) -> bool:
    def message(status: Mapping[str, Any]) -> object:
        return next(
            (c.get("message") for c in status.get("conditions") or () if c.get("type") == "Scheduled"), None
        )

    return message(old) == message(new)


def _plan(view: View, result: CycleResult, report: StepReport) -> None:
    """Record the cycle's binds and evictions as pod keys and node names."""
    for decision in result.decisions:
        if isinstance(decision, Preempt):
            report.planned_evictions.extend(view.bound.get(decision.job_id, []))
        elif isinstance(decision, Bind):
            pods = view.unbound[decision.job_id][: len(decision.placements)]
            report.planned_binds.extend(
                (key, view.node_names[p.node]) for key, p in zip(pods, decision.placements, strict=True)
            )
