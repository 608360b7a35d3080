"""The watched objects, and the snapshot the scheduler sees built from them each cycle."""

from __future__ import annotations

import queue
from collections import defaultdict
from collections.abc import Callable, Collection, Mapping
from dataclasses import dataclass, field
from typing import Any

import numpy as np
import numpy.typing as npt

from loadmaster.kube import translate as tr
from loadmaster.kube.semantics import mig_layouts, mig_pool
from loadmaster.model import (
    MILLI_PER_GPU,
    ClusterSnapshot,
    Job,
    MigInstance,
    NodeTable,
    PendingJob,
    RunningJob,
    TaskPlacement,
    TaskRequest,
)
from loadmaster.model.mig import MigModel
from loadmaster.model.snapshot import gpu_summary
from loadmaster.scheduling.mig_pool import MigPool


@dataclass
class View:
    """One cycle's snapshot plus what a driver needs to carry out its decisions."""

    snapshot: ClusterSnapshot
    node_names: tuple[str, ...]
    unbound: dict[str, list[str]]
    """Job id -> keys of its pods not yet bound, by name: the i-th placement of a Bind goes to the i-th."""
    bound: dict[str, list[str]]
    """Job id -> keys of its bound pods."""
    jobs: dict[str, Job]
    incomplete: dict[str, str] = field(default_factory=dict)
    """Job id -> why it is not offered to the scheduler (a gang with fewer pods than minMember)."""


class KubeState:
    """Nodes, pods and PodGroups by key, as the last list and watch events left them."""

    def __init__(
        self,
        default_time_limit_s: float = tr.DEFAULT_TIME_LIMIT_S,
        scheduler_names: tuple[str, ...] = (tr.SCHEDULER_NAME,),
    ) -> None:
        self.scheduler_names = scheduler_names
        """``schedulerName`` values whose pods are scheduled here (one per profile); others' pods use room."""
        self.objects: dict[str, dict[str, tr.Obj]] = {
            "nodes": {},
            "pods": {},
            "podgroups": {},
            "priorityclasses": {},
        }
        self._classes: dict[str, tr.PriorityInfo] = {}
        self._class_objects: tuple[tr.Obj, ...] = ()
        """The PriorityClass objects ``_classes`` was read from (a new dict only when they change)."""
        self._jobs: dict[str, tuple[tuple[tr.Obj, ...], tr.Obj | None, dict[str, tr.PriorityInfo], Job]] = {}
        """Job id -> the pods, PodGroup and classes its Job was read from, and the Job: the same objects
        give the same Job object, so the scheduler's per-job caches (kept by job object) hold across
        steps."""
        self.default_time_limit_s = default_time_limit_s
        self._node_objects: tuple[tr.Obj, ...] = ()
        self._node_infos: list[tr.NodeInfo] = []
        """The Node objects the last table was read from, in name order, and their translations: the
        same objects give the same translations (an event replaces an object), so a step where no
        node changed translates none (1,000 nodes: about a tenth of a steady step)."""
        self._table_key: tuple[object, ...] | None = None
        self._table: NodeTable | None = None
        self._mig: dict[int, tuple[MigModel, list[tuple[MigInstance, ...]]]] = {}
        self._requests: dict[str, tuple[tr.Obj, TaskRequest]] = {}
        """Pod key -> (the pod object, its request), for the objects still cached."""

    def request_of(self, pod: tr.Obj) -> TaskRequest:
        """``translate.pod_request(pod)``, kept while the informer keeps the same object.

        A pod's requests are parsed from every container's quantities; the step reads every pod
        at every cycle, and most did not change since the last (the informer replaces an object
        when an event changes it, so the same object has the same spec). On 5,000 running pods
        the parsing was half of building the snapshot.
        """
        key = tr.key_of(pod)
        cached = self._requests.get(key)
        if cached is not None and cached[0] is pod:
            return cached[1]
        request = tr.pod_request(pod)
        self._requests[key] = (pod, request)
        return request

    def forget(self, jobs: Collection[str]) -> None:
        """Keep only the requests of pods still cached and the Jobs of ``jobs`` (this view's): a kept
        Job holds its pods' objects, so a job that left must not keep a gang's worth of old ones."""
        pods = self.objects["pods"]
        self._requests = {k: v for k, v in self._requests.items() if k in pods}
        self._jobs = {k: v for k, v in self._jobs.items() if k in jobs}

    def _job(self, job_id: str, pods: list[tr.Obj], group: tr.Obj | None) -> Job:
        """``translate.job_from`` of the job's pods, the same Job object while they are the same objects."""
        kept = self._jobs.get(job_id)
        if (
            kept is not None
            and kept[1] is group
            and kept[2] is self._classes
            and len(kept[0]) == len(pods)
            and all(a is b for a, b in zip(kept[0], pods, strict=True))
        ):
            return kept[3]
        job = tr.job_from(
            job_id, pods, group, self.default_time_limit_s, self._classes, requests=self.request_of
        )
        self._jobs[job_id] = (tuple(pods), group, self._classes, job)
        return job

    def replace(self, kind: str, items: list[tr.Obj]) -> None:
        """Replace everything of ``kind`` with a fresh list."""
        self.objects[kind] = {tr.key_of(o): o for o in items}

    def apply(self, kind: str, event: str, obj: tr.Obj) -> None:
        """Apply one watch event (ADDED, MODIFIED, DELETED), whatever its version (see :func:`drain`)."""
        if event == "DELETED":
            self.objects[kind].pop(tr.key_of(obj), None)
        else:
            self.objects[kind][tr.key_of(obj)] = obj

    def node_table(self) -> tuple[NodeTable, list[bool]] | None:
        """The node table (rebuilt only when a node's translation changed) and which nodes take pods."""
        objects = tuple(o for _, o in sorted(self.objects["nodes"].items()))
        if len(objects) != len(self._node_objects) or any(
            a is not b for a, b in zip(objects, self._node_objects, strict=True)
        ):
            self._node_infos = [tr.node_from(o) for o in objects]
            self._node_objects = objects
        infos = self._node_infos
        if not infos:
            return None
        key = tuple(
            (
                i.node.name,
                i.node.pool,
                i.node.zone,
                i.node.rack,
                i.node.resource_type,
                i.node.gpus,
                i.node.cpu_milli,
                i.node.memory_mib,
                tuple(sorted(i.node.labels.items())),
                i.node.taints,
                i.node.unschedulable,
                i.node.max_pods,
                tuple(sorted(i.mig.items())),
            )
            for i in infos
        )
        if key != self._table_key or self._table is None:
            nodes = [i.node for i in infos]
            self._table = NodeTable.build(nodes, tr.resource_types(nodes))
            self._table_key = key
            found = (
                (n, mig_layouts(i.node.labels.get(tr.PRODUCT_LABEL, ""), i.mig)) for n, i in enumerate(infos)
            )
            self._mig = {n: layouts for n, layouts in found if layouts is not None}
        return self._table, [i.schedulable for i in infos]

    def view(self, reject: Callable[[Job, NodeTable], str | None] = lambda j, t: None) -> View | None:
        """The snapshot of now (None while no node is known); ``reject`` keeps out jobs that can never fit."""
        built = self.node_table()
        if built is None:
            return None
        table, schedulable = built
        index = {n.name: i for i, n in enumerate(table.nodes)}
        free = _Free(table, mig_pool(table, self._mig), self.request_of)
        classes = tuple(self.objects["priorityclasses"].values())
        if len(classes) != len(self._class_objects) or any(
            a is not b for a, b in zip(classes, self._class_objects, strict=True)
        ):
            self._classes = tr.priority_classes(classes)
            self._class_objects = classes
        groups: dict[str, list[tr.Obj]] = defaultdict(list)
        for pod in sorted(self.objects["pods"].values(), key=tr.key_of):
            free.count_pod(pod, index)
            if not tr.is_active(pod):
                if holds_resources(pod) and (node := tr.node_name_of(pod)) in index:
                    free.take_pod(pod, index[node])  # Terminating: its containers may still run
                continue
            if tr.is_ours(pod, self.scheduler_names):
                groups[tr.job_id_of(pod)].append(pod)
            elif (node := tr.node_name_of(pod)) in index:
                free.take_pod(pod, index[node])
        running: list[RunningJob] = []
        pending: list[PendingJob] = []
        view = View(ClusterSnapshot.empty(table), tuple(n.name for n in table.nodes), {}, {}, {}, {})
        for job_id, pods in groups.items():
            self._add_job(job_id, pods, free, index, view, running, pending)
        for p in [p for p in pending if not p.bound and reject(p.job, table)]:
            pending.remove(p)
            view.incomplete[p.job.id] = str(reject(p.job, table))
        for i, ok in enumerate(schedulable):
            if not ok:
                free.close(i)
        pending.sort(key=lambda p: (p.job.submit_s, p.job.id))
        view.snapshot = free.snapshot(running, pending)
        self.forget(groups.keys())
        return view

    def _add_job(  # noqa: PLR0917 - private helper of view(), one call site
        self,
        job_id: str,
        pods: list[tr.Obj],
        free: _Free,
        index: Mapping[str, int],
        view: View,
        running: list[RunningJob],
        pending: list[PendingJob],
    ) -> None:
        group_name = tr.pod_group_of(pods[0])
        group = self.objects["podgroups"].get(job_id) if group_name else None
        min_member = int(group.get("spec", {}).get("minMember", 1)) if group else 1
        # A pod bound to a node that no longer exists holds nothing here and waits for the pod
        # garbage collector: it is not part of the job (else a job could have no pod at all).
        pods = [p for p in pods if tr.node_name_of(p) is None or tr.node_name_of(p) in index]
        if not pods:
            return
        bound = [p for p in pods if tr.node_name_of(p) in index]
        unbound = [p for p in pods if tr.node_name_of(p) is None]
        if group_name and group is None:
            view.incomplete[job_id] = f"waiting for PodGroup {job_id}"
        elif len(pods) < min_member and unbound:
            view.incomplete[job_id] = f"gang has {len(pods)} of minMember {min_member} pods"
        if job_id in view.incomplete:
            for pod in bound:  # not offered to the scheduler, but what it holds is in use
                free.take_pod(pod, index[str(tr.node_name_of(pod))])
            view.unbound[job_id] = [tr.key_of(p) for p in unbound]  # their pods are told why they wait
            return
        job = self._job(job_id, pods, group)
        placements = tuple(free.take_pod(p, index[str(tr.node_name_of(p))]) for p in bound)
        view.jobs[job_id] = job
        view.bound[job_id] = [tr.key_of(p) for p in bound]
        if unbound:
            view.unbound[job_id] = [tr.key_of(p) for p in unbound]
            pending.append(PendingJob(job, placements))
        else:
            start = min(tr.timestamp_s(p.get("status", {}).get("startTime")) for p in bound)
            running.append(RunningJob(job, placements, start or job.submit_s))


def drain(changes: queue.Queue[tuple[str, str, dict[str, Any]]], state: KubeState) -> int:
    """Apply every change the informers have queued (an :data:`~loadmaster.kube.api.Event` each)
    to ``state``; how many were taken from the queue.

    A RELIST replaces the kind. A watch event older than the cached object is
    dropped (:func:`older`): a list made on becoming leader, or any relist, may be
    newer than events still in flight on the watch stream, and applying them
    would bring back a pod's old binding or a deleted pod. ``kube run``'s
    :class:`~loadmaster.kube.cluster.KubeCluster` and the dashboard's
    :class:`~loadmaster.kube.watch.ClusterWatch` both drain through here.
    """
    taken = 0
    while True:
        try:
            kind, event, obj = changes.get_nowait()
        except queue.Empty:
            return taken
        taken += 1
        if event == "RELIST":
            state.replace(kind, obj["items"])
        elif not older(obj, state.objects[kind].get(tr.key_of(obj))):
            state.apply(kind, event, obj)


def older(event: tr.Obj, cached: tr.Obj | None) -> bool:
    """True when a watch event's object is older than the cached one, by ``metadata.resourceVersion``.

    Kubernetes calls resource versions opaque; kube-apiserver's etcd3 store
    makes them increasing integers, and client-go's informers rely on the same
    order within one resource. Versions that are not integers give no order: never older.
    """
    if cached is None:
        return False
    try:
        return int(event["metadata"]["resourceVersion"]) < int(cached["metadata"]["resourceVersion"])
    except (KeyError, TypeError, ValueError):  # opaque versions: no order to judge by
        return False


def holds_resources(pod: tr.Obj) -> bool:
    """True for a pod bound to a node and not finished, Terminating included.

    A pod with a ``deletionTimestamp`` keeps its GPUs until the kubelet has
    stopped its containers and the API server has removed it (up to its grace
    period): counting it as free would let two pods share a GPU meanwhile.
    """
    return tr.node_name_of(pod) is not None and tr.phase_of(pod) not in tr.TERMINAL_PHASES


class _Free:
    """Free resources per GPU and node while bound pods are taken off, one by one."""

    def __init__(
        self,
        table: NodeTable,
        mig: MigPool | None = None,
        requests: Callable[[tr.Obj], TaskRequest] = tr.pod_request,
    ) -> None:
        self.table = table
        self.mig = mig
        self.requests = requests
        self.gpu: npt.NDArray[np.int64] = np.where(table.gpu_exists(), MILLI_PER_GPU, 0).astype(np.int64)
        self.cpu = table.cpu_milli.copy()
        self.memory = table.memory_mib.copy()
        limits = [n.max_pods for n in table.nodes]
        self.pods: npt.NDArray[np.int64] | None = None
        if any(limit is not None for limit in limits):
            self.pods = np.array([tr.AMOUNT_CAP if m is None else m for m in limits], dtype=np.int64)

    def count_pod(self, pod: tr.Obj, index: Mapping[str, int]) -> None:
        """Take one of the node's pod slots for any pod on it that has not finished (Terminating too:
        kube-scheduler's cache holds a pod until it is deleted)."""
        node = index.get(tr.node_name_of(pod) or "")
        if self.pods is not None and node is not None and tr.phase_of(pod) not in tr.TERMINAL_PHASES:
            self.pods[node] -= 1

    def take_pod(self, pod: tr.Obj, node: int) -> TaskPlacement:
        request = self.requests(pod)
        if request.mig_profile is not None:
            return self._take_mig(node, request)
        gpus = request.whole_gpus
        wanted = tr.gpu_indices_of(pod)
        row = self.gpu[node]
        if (
            wanted is None
            or len(wanted) != gpus
            or any(g >= row.size or row[g] < MILLI_PER_GPU for g in wanted)
        ):
            wanted = tuple(int(g) for g in np.flatnonzero(row == MILLI_PER_GPU)[:gpus])
        for g in wanted:
            row[g] = 0
        self.cpu[node] -= request.cpu_milli
        self.memory[node] -= request.memory_mib
        return TaskPlacement(node, wanted, MILLI_PER_GPU, request.cpu_milli, request.memory_mib)

    def _take_mig(self, node: int, request: TaskRequest) -> TaskPlacement:
        """A bound MIG pod holds one instance of its profile (the device plugin knows which; the API not)."""
        slot = self.mig.choose(node, request.mig_profile or "") if self.mig is not None else None
        if slot is not None and self.mig is not None:
            self.mig.occupy(node, slot)
        self.cpu[node] -= request.cpu_milli
        self.memory[node] -= request.memory_mib
        return TaskPlacement(node, (), 0, request.cpu_milli, request.memory_mib, mig=slot)

    def close(self, node: int) -> None:
        """A node that takes no new pod (not Ready): nothing free on it."""
        self.gpu[node] = 0
        self.cpu[node] = 0
        self.memory[node] = 0
        if self.pods is not None:
            self.pods[node] = 0
        if self.mig is not None:
            for gpu in self.mig.node_gpus(node):
                self.mig.set_ready(node, gpu, False)

    def snapshot(self, running: list[RunningJob], pending: list[PendingJob]) -> ClusterSnapshot:
        np.maximum(self.cpu, 0, out=self.cpu)
        np.maximum(self.memory, 0, out=self.memory)
        if self.pods is not None:
            np.maximum(self.pods, 0, out=self.pods)
        whole, largest, total = gpu_summary(self.gpu)
        return ClusterSnapshot(
            nodes=self.table,
            gpu_free_milli=self.gpu,
            cpu_free_milli=self.cpu,
            memory_free_mib=self.memory,
            whole_free=whole,
            largest_share=largest,
            free_milli=total,
            running=tuple(running),
            pending=tuple(pending),
            pods_free=self.pods,
            mig=self.mig,
        )
