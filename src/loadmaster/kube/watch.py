"""A read-only view of a Kubernetes cluster for the dashboard, through the same informers as ``kube run``.

:class:`ClusterWatch` runs the :class:`~loadmaster.kube.api.Informer` s
(nodes, pods, PodGroups) into a :class:`~loadmaster.kube.state.KubeState`, the
code ``kube run`` schedules from, and hands out :class:`ClusterFeed` s:
loadmaster's model types (node table, running and pending jobs with their
placements), the scheduler's reason for each waiting job (the
``PodScheduled=False`` message ``kube run`` writes on its pods) and the map
from pods to jobs. It never writes to the API.

This is the seam between ``serve`` and Kubernetes: ``serve`` may not import
the kubernetes client (import-linter), so it reads a structural protocol of
these fields; the CLI wires a ClusterWatch in.
"""

from __future__ import annotations

import queue
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass

from kubernetes import client

from loadmaster.kube import translate as tr
from loadmaster.kube.api import Event, Informer
from loadmaster.kube.state import KubeState, drain
from loadmaster.model import ClusterSnapshot

KINDS = ("nodes", "pods", "podgroups")


@dataclass(frozen=True)
class ClusterFeed:
    """The cluster at ``time_s`` (Unix seconds), in model types."""

    time_s: float
    snapshot: ClusterSnapshot
    """Nodes, free resources, running jobs (placements) and pending jobs (their bound part)."""
    reasons: Mapping[str, str]
    """Job id -> why it waits: the scheduler's message on its pods, or why it is not offered yet."""
    pods: Mapping[str, str]
    """Pod key (``namespace/name``) -> job id, for every active pod of loadmaster's jobs."""
    namespaces: Mapping[str, str]
    """Job id -> namespace."""
    version: int
    """The lowest resource version every informer has seen."""


class ClusterWatch:
    """Informers in, :class:`ClusterFeed` out; see the module docstring."""

    def __init__(
        self,
        api: client.ApiClient,
        clock: Callable[[], float] = time.time,
        scheduler_names: tuple[str, ...] = (tr.SCHEDULER_NAME,),
    ) -> None:
        self.clock = clock
        self.state = KubeState(scheduler_names=scheduler_names)
        """Scheduling the pods of ``scheduler_names`` (kube run: one per profile); other pods use room."""
        self.changes: queue.Queue[Event] = queue.Queue()
        self.informers = {kind: Informer(kind, api, self.changes) for kind in KINDS}

    def start(self) -> None:
        """Start watching (each informer on its own thread, retrying with backoff)."""
        for informer in self.informers.values():
            informer.start()

    def stop(self) -> None:
        for informer in self.informers.values():
            informer.stop()

    def list_now(self) -> None:
        """List every kind once on this thread (raises what the client raises)."""
        for informer in self.informers.values():
            informer.list_once()
        self.drain()

    def drain(self) -> None:
        """Apply every change the informers have queued, stale events dropped (as ``kube run`` does)."""
        drain(self.changes, self.state)

    def synced_to(self, version: int) -> bool:
        """True once every informer has listed and seen the API up to ``version``."""
        self.drain()
        return all(i.version >= version for i in self.informers.values())

    def feed(self) -> ClusterFeed | None:
        """The cluster now (None until a node is known)."""
        self.drain()
        view = self.state.view()
        if view is None:
            return None
        pods: dict[str, str] = {}
        reasons = dict(view.incomplete)
        for job_id in view.jobs:
            for key in [*view.bound.get(job_id, []), *view.unbound.get(job_id, [])]:
                pods[key] = job_id
            for key in view.unbound.get(job_id, []):
                message = _unschedulable_message(self.state.objects["pods"].get(key))
                if message and job_id not in reasons:
                    reasons[job_id] = message
        namespaces = {job_id: job_id.split("/", 1)[0] for job_id in view.jobs}
        version = min((i.version for i in self.informers.values()), default=0)
        return ClusterFeed(self.clock(), view.snapshot, reasons, pods, namespaces, version)


def _unschedulable_message(pod: tr.Obj | None) -> str | None:
    """The message of a pod's ``PodScheduled=False`` condition (the scheduler's reason), if any."""
    if pod is None:
        return None
    for condition in pod.get("status", {}).get("conditions") or []:
        if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
            message = condition.get("message")
            return str(message) if message else None
    return None
