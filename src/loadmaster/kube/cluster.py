"""KubeCluster: the scheduler's loop body against a Kubernetes API server.

Each :meth:`KubeCluster.step` drains the informers' changes, renews the
leader Lease (a replica that does not hold it binds nothing), builds a
snapshot, runs the same ``Scheduler.cycle`` as the simulator and carries out
its decisions: evictions (Eviction API) before binds (Binding subresource),
then the pending reasons (the pod's ``PodScheduled`` condition, an Event on
the pod and one on its PodGroup, only when the reason changed).

Safety: a gang whose bind fails part-way is rolled back whole (its bound pods
deleted; their controller recreates them), and a rollback that cannot reach
the API is retried before anything else next step. State lives in the API
only: a restarted scheduler lists everything, sees which pods are bound (a
bind of a bound pod is refused with 409 anyway) and completes a gang it left
half bound, since a half-bound gang is a pending job with tasks bound.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from loadmaster.kube import translate as tr
from loadmaster.kube.api import REQUEST_TIMEOUT_S, ApiFailure, Event, Informer, LeaderElector
from loadmaster.kube.semantics import kube_scheduler, scheduler_names
from loadmaster.kube.state import KubeState, View
from loadmaster.model import Job, NodeTable
from loadmaster.scheduling import Bind, CycleResult, Preempt, Scheduler

KINDS = ("nodes", "pods", "podgroups", "priorityclasses")


@dataclass
class StepReport:
    """What one step did."""

    leader: bool
    bound: list[tuple[str, str]] = field(default_factory=list)
    """(pod key, node) bound this step."""
    evicted: list[str] = field(default_factory=list)
    rolled_back: list[str] = field(default_factory=list)
    """Job ids whose gang was rolled back."""
    waiting: dict[str, str] = field(default_factory=dict)
    """Job id -> why it still waits."""
    planned_binds: list[tuple[str, str]] = field(default_factory=list)
    """(pod key, node) the cycle decided to bind (written or, in a dry run, not)."""
    planned_evictions: list[str] = field(default_factory=list)
    """Pod keys the cycle decided to evict."""
    result: CycleResult | None = None


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
        self.state = KubeState(scheduler_names=scheduler_names(self.scheduler))
        self.changes: queue.Queue[Event] = queue.Queue()
        self.informers = {kind: Informer(kind, api, self.changes) for kind in KINDS}
        self.rollbacks: dict[str, list[str]] = {}
        """Job id -> pod keys still to delete to finish a gang's rollback."""
        self._reasons: dict[str, str] = {}

    def start(self) -> None:
        for informer in self.informers.values():
            informer.start()

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

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

    def drain(self) -> None:
        """Apply every change the informers have queued."""
        while True:
            try:
                kind, event, obj = self.changes.get_nowait()
            except queue.Empty:
                return
            if event == "RELIST":
                self.state.replace(kind, obj["items"])
            else:
                self.state.apply(kind, event, obj)

    def step(self, dry_run: bool = False) -> StepReport:
        """One cycle: sync, lead, decide, act. ``dry_run``: decide only, write nothing."""
        self.drain()
        if not dry_run and not self.lease.acquire_or_renew():
            return StepReport(leader=False)
        report = StepReport(leader=True)
        if not dry_run and not self._finish_rollbacks(report):
            return report
        view = self.state.view(self._reject)
        if view is None:
            return report
        now = self.clock()
        result = self.scheduler.cycle(view.snapshot, now, self.rng)
        report.result = result
        report.waiting.update(view.incomplete)
        for job_id, job in view.jobs.items():
            if job_id in view.unbound:
                status = result.status_of(job_id, self.scheduler.profile.lane(job))
                if status is not None:
                    report.waiting[job_id] = status.reason
        for decision in result.decisions:  # a job bound whole this cycle no longer waits
            if isinstance(decision, Bind) and decision.starts:
                report.waiting.pop(decision.job_id, None)
        _plan(view, result, report)
        if dry_run:
            return report
        for decision in result.decisions:
            if isinstance(decision, Preempt):
                self._evict(view, decision, report)
        for decision in result.decisions:
            if isinstance(decision, Bind):
                self._bind(view, decision, report)
        if self.write_reasons:
            self._write_reasons(view, report.waiting)
        return report

    def _reject(self, job: Job, table: NodeTable) -> str | None:
        verdict = self.scheduler.feasible(job, table)
        return None if verdict.ok else verdict.reason

    # ------------------------------------------------------------------ binds
    def _bind(self, view: View, bind: Bind, report: StepReport) -> None:
        pods = view.unbound[bind.job_id][: len(bind.placements)]
        done: list[str] = []
        for key, placement in zip(pods, bind.placements, strict=True):
            node = view.node_names[placement.node]
            gpus = ",".join(str(g) for g in placement.gpu_indices)
            if not self._bind_pod(key, node, gpus):
                self._rollback(bind.job_id, [*view.bound.get(bind.job_id, []), *done], report)
                return
            done.append(key)
            report.bound.append((key, node))
            self._mark_bound(key, node, gpus)
        view.bound.setdefault(bind.job_id, []).extend(done)

    def _bind_pod(self, key: str, node: str, gpus: str) -> bool:
        namespace, name = key.split("/", 1)
        body = client.V1Binding(
            api_version="v1",
            kind="Binding",
            metadata=client.V1ObjectMeta(
                name=name, namespace=namespace, annotations={tr.GPUS_ANNOTATION: gpus}
            ),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=node),
        )
        try:
            # Raw answer: the server returns a Status, which the typed client cannot decode as a Binding.
            self.core.create_namespaced_pod_binding(
                name, namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
            )
        except ApiFailure:
            return False
        return True

    def _mark_bound(self, key: str, node: str, gpus: str) -> None:
        """Record a bind in the cache now, so the next cycle sees it before the watch event arrives."""
        pod = self.state.objects["pods"].get(key)
        if pod is None:
            return
        spec = {**pod.get("spec", {}), "nodeName": node}
        meta = {
            **pod["metadata"],
            "annotations": {**(pod["metadata"].get("annotations") or {}), tr.GPUS_ANNOTATION: gpus},
        }
        self.state.objects["pods"][key] = {**pod, "metadata": meta, "spec": spec}

    def _rollback(self, job_id: str, keys: list[str], report: StepReport) -> None:
        report.rolled_back.append(job_id)
        self.rollbacks[job_id] = list(keys)
        self._finish_rollbacks(report)

    def _finish_rollbacks(self, report: StepReport) -> bool:
        """Delete what is left of rolled-back gangs; False while some of it cannot be deleted."""
        for job_id, keys in list(self.rollbacks.items()):
            for key in list(keys):
                namespace, name = key.split("/", 1)
                try:
                    self.core.delete_namespaced_pod(
                        name, namespace, grace_period_seconds=0, _request_timeout=REQUEST_TIMEOUT_S
                    )
                except ApiFailure as exc:
                    if getattr(exc, "status", None) != 404:
                        return False
                keys.remove(key)
                self.state.objects["pods"].pop(key, None)
            del self.rollbacks[job_id]
        return True

    # -------------------------------------------------------------- evictions
    def _evict(self, view: View, preempt: Preempt, report: StepReport) -> None:
        for key in view.bound.get(preempt.job_id, []):
            namespace, name = key.split("/", 1)
            body = client.V1Eviction(
                api_version="policy/v1",
                kind="Eviction",
                metadata=client.V1ObjectMeta(name=name, namespace=namespace),
            )
            try:
                self.core.create_namespaced_pod_eviction(
                    name, namespace, body, _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
                )
            except ApiFailure:
                continue  # still running: the next cycle sees it and decides again
            report.evicted.append(key)
            self.state.objects["pods"].pop(key, None)

    # ---------------------------------------------------------------- reasons
    def _write_reasons(self, view: View, waiting: Mapping[str, str]) -> None:
        for job_id, reason in waiting.items():
            for key in view.unbound.get(job_id, []):
                if self._reasons.get(key) != reason and self._write_reason(key, reason):
                    self._reasons[key] = reason

    def _write_reason(self, key: str, reason: str) -> bool:
        namespace, name = key.split("/", 1)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime(self.clock()))
        condition = {
            "type": "PodScheduled",
            "status": "False",
            "reason": "Unschedulable",
            "message": reason,
            "lastTransitionTime": stamp,
        }
        event = client.CoreV1Event(
            api_version="v1",
            kind="Event",
            metadata=client.V1ObjectMeta(generate_name=f"{name}.", namespace=namespace),
            involved_object=client.V1ObjectReference(
                api_version="v1", kind="Pod", name=name, namespace=namespace
            ),
            reason="FailedScheduling",
            message=reason,
            type="Warning",
            source=client.V1EventSource(component=tr.SCHEDULER_NAME),
            first_timestamp=stamp,
            last_timestamp=stamp,
            count=1,
        )
        try:
            self.core.patch_namespaced_pod_status(
                name, namespace, {"status": {"conditions": [condition]}}, _request_timeout=REQUEST_TIMEOUT_S
            )
            self.core.create_namespaced_event(namespace, event, _request_timeout=REQUEST_TIMEOUT_S)
            self._write_group_status(key)
        except ApiFailure:
            return False
        return True

    def _write_group_status(self, key: str) -> None:
        pod = self.state.objects["pods"].get(key)
        group = tr.pod_group_of(pod) if pod is not None else None
        if group is None:
            return
        namespace = key.split("/", 1)[0]
        body: dict[str, Any] = {"status": {"phase": "Pending"}}
        try:
            self.custom.patch_namespaced_custom_object_status(
                "scheduling.x-k8s.io", "v1alpha1", namespace, "podgroups", group, body,
                _request_timeout=REQUEST_TIMEOUT_S,
            )  # fmt: skip
        except ApiException as exc:
            if exc.status != 404:  # no PodGroup yet: the pod's own reason says it waits for one
                raise


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
