"""Following submitted jobs: their state, why they wait, the queue, logs and cancel.

Everything here is read from what the API holds: the pods of a job (their
phase, node, the ``loadmaster.io/gpus`` annotation written at bind time and
the ``PodScheduled`` condition where the scheduler writes why a pod waits),
and its PodGroup. An estimated start is the one a reservation names in that
reason (``reserved from t=<epoch>s``). :func:`visible` applies the
dashboard's rule: a user sees their own jobs in full and everyone else's only
as anonymous entries of the queue; an operator sees everything.
"""

from __future__ import annotations

import json
import re
from collections import defaultdict
from collections.abc import Iterator, Sequence
from dataclasses import asdict, dataclass, field
from typing import Any

from kubernetes import client
from kubernetes.client.exceptions import ApiException

from loadmaster.config.jobspec import Identity
from loadmaster.kube import translate as tr
from loadmaster.kube.api import PODGROUP_API, REQUEST_TIMEOUT_S, ApiFailure
from loadmaster.kube.submit import INDEX_ANNOTATION, INTERACTIVE_LABEL, JOB_LABEL, SubmitError, delete_all

ANONYMOUS = "(other)"
"""How another user's job is named in the queue, as the dashboard shows it."""
_RESERVED = re.compile(r"reserved from t=(\d+(?:\.\d+)?)s")


@dataclass(frozen=True)
class TaskView:
    """One pod of a job."""

    rank: int
    pod: str
    phase: str
    node: str | None
    gpus: str
    """GPU indices on its node (``0,1``), from the bind-time annotation; empty before it binds."""
    detail: str = ""
    """What the kubelet says of its container when it is not simply running: ``ImagePullBackOff: ...``,
    ``Error (exit 1)``."""


@dataclass(frozen=True)
class JobView:
    """A job as ``loadmaster jobs``/``status``/``queue`` show it."""

    id: str
    namespace: str
    name: str
    user: str
    group: str
    queue: str
    state: str
    """``pending``, ``starting`` (some tasks bound), ``running``, ``completed``, ``failed``."""
    tasks: int
    gpus_per_task: int
    submitted_s: float
    started_s: float | None
    reason: str
    estimated_start_s: float | None
    interactive: bool
    cuda: str | None
    task_views: list[TaskView] = field(default_factory=list)
    position: int | None = None
    """1-based place in its queue among waiting jobs (None when not waiting)."""
    reclaim: str = ""
    """The scheduler's reclaim notice or mark on the job's pods (idle GPUs: what happens when), if any."""

    @property
    def gpus(self) -> int:
        return self.tasks * self.gpus_per_task

    def anonymous(self) -> JobView:
        """What a user may see of another user's job: its size, queue, place and timing, not who or why."""
        return JobView(
            id=ANONYMOUS,
            namespace="",
            name=ANONYMOUS,
            user=ANONYMOUS,
            group="",
            queue=self.queue,
            state=self.state,
            tasks=self.tasks,
            gpus_per_task=self.gpus_per_task,
            submitted_s=self.submitted_s,
            started_s=self.started_s,
            reason="",
            estimated_start_s=self.estimated_start_s,
            interactive=False,
            cuda=None,
            position=self.position,
        )

    def to_json(self) -> dict[str, Any]:
        data = asdict(self)
        data["gpus"] = self.gpus
        return data


def visible(job: JobView, who: Identity) -> bool:
    """Whether ``who`` may read ``job`` in full (its owner, or an operator)."""
    return who.operator or job.user == who.user


class Jobs:
    """Reads jobs from the API, as the caller's credentials allow."""

    def __init__(self, api: client.ApiClient, who: Identity) -> None:
        self.api = api
        self.who = who
        self.core: Any = client.CoreV1Api(api)  # untyped: answers are read as raw JSON
        self.custom: Any = client.CustomObjectsApi(api)
        self.scope_note = ""
        """Set when the cluster-wide view was refused and only the caller's namespace is shown."""

    def all_jobs(self, everywhere: bool = False) -> list[JobView]:
        """Jobs submitted with loadmaster: the caller's namespace, or every namespace the caller may list."""
        pods, groups = self._objects(everywhere)
        by_job: dict[str, list[dict[str, Any]]] = defaultdict(list)
        for pod in pods:
            by_job[f"{pod['metadata']['namespace']}/{pod['metadata']['labels'][JOB_LABEL]}"].append(pod)
        views = [_view(key, by_job.get(key, []), group) for key, group in groups.items()]
        _number_queues(views)
        return sorted(views, key=lambda v: (v.submitted_s, v.id))

    def get(self, name: str) -> JobView:
        """One job of the caller's namespace (``NAME`` or ``NAMESPACE/NAME``) that the caller may read."""
        namespace, _, short = name.rpartition("/")
        namespace = namespace or self.who.home
        found = next(
            (
                v
                for v in self.all_jobs(everywhere=namespace != self.who.home)
                if v.id == f"{namespace}/{short}"
            ),
            None,
        )
        if found is None:
            raise SubmitError(f"no job {namespace}/{short} (loadmaster jobs lists yours)")
        if not visible(found, self.who):
            raise SubmitError(f"job {found.id} belongs to another user; you may only see and cancel your own")
        return found

    def cancel(self, name: str) -> list[str]:
        """Delete everything ``submit`` created for the job (and its pods); refused for another user's job."""
        job = self.get(name)
        return delete_all(self.api, job.namespace, job.name)

    def logs(self, name: str, rank: int = 0, follow: bool = False) -> Iterator[str]:
        """The log lines of task ``rank`` (its newest pod), streamed while it runs with ``follow``."""
        job = self.get(name)
        task = max((t for t in job.task_views if t.rank == rank), key=lambda t: t.pod, default=None)
        if task is None:
            ranks = sorted({t.rank for t in job.task_views})
            raise SubmitError(
                f"job {job.id} has no pod of rank {rank} (ranks with pods: {ranks or 'none yet'})"
            )
        try:
            response = self.core.read_namespaced_pod_log(
                task.pod,
                job.namespace,
                follow=follow,
                _preload_content=False,
                _request_timeout=None if follow else REQUEST_TIMEOUT_S,
            )
        except ApiFailure as exc:
            raise SubmitError(f"cannot read the log of {job.namespace}/{task.pod}: {exc}") from None
        try:
            for chunk in response.stream(amt=65536, decode_content=True):
                yield chunk.decode("utf-8", errors="replace")
        finally:
            response.release_conn()

    def _objects(self, everywhere: bool) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        try:
            return self._list(None if everywhere else self.who.home)
        except ApiException as exc:
            if exc.status != 403 or not everywhere:
                raise SubmitError(f"cannot list jobs: {exc.status} {exc.reason}") from None
        self.scope_note = f"only namespace {self.who.home} is shown: you may not list jobs cluster-wide"
        return self._list(self.who.home)

    def _list(self, namespace: str | None) -> tuple[list[dict[str, Any]], dict[str, dict[str, Any]]]:
        selector, timeout = JOB_LABEL, REQUEST_TIMEOUT_S
        if namespace is None:
            pods = self.core.list_pod_for_all_namespaces(
                label_selector=selector, _preload_content=False, _request_timeout=timeout
            )
            groups = self.custom.list_cluster_custom_object(
                *PODGROUP_API, label_selector=selector, _preload_content=False, _request_timeout=timeout
            )
        else:
            pods = self.core.list_namespaced_pod(
                namespace, label_selector=selector, _preload_content=False, _request_timeout=timeout
            )
            groups = self.custom.list_namespaced_custom_object(
                PODGROUP_API[0],
                PODGROUP_API[1],
                namespace,
                PODGROUP_API[2],
                label_selector=selector,
                _preload_content=False,
                _request_timeout=timeout,
            )
        pod_items = json.loads(pods.data)["items"]
        group_items = json.loads(groups.data)["items"]
        return pod_items, {tr.key_of(g): g for g in group_items}


def _view(key: str, pods: Sequence[dict[str, Any]], group: dict[str, Any]) -> JobView:
    meta = group["metadata"]
    labels = meta.get("labels") or {}
    tasks = int(group.get("spec", {}).get("minMember", 1))
    active = [p for p in pods if not p["metadata"].get("deletionTimestamp")]
    template = active[0] if active else None
    request = tr.pod_request(template) if template is not None else None
    views = [_task(p) for p in active]
    reason = _reason(active)
    started = [tr.timestamp_s(p.get("status", {}).get("startTime")) for p in active if tr.node_name_of(p)]
    estimate = _RESERVED.search(reason)
    cuda = ((template or {}).get("metadata", {}).get("annotations") or {}).get(tr.CUDA_ANNOTATION)
    return JobView(
        id=key,
        namespace=str(meta["namespace"]),
        name=str(meta["name"]),
        user=str(labels.get(tr.USER_LABEL, meta["namespace"])),
        group=str(labels.get(tr.GROUP_LABEL, "")),
        queue=str(labels.get(tr.QUEUE_LABEL, "default")),
        state=_state(active, tasks),
        tasks=tasks,
        gpus_per_task=request.whole_gpus if request is not None else 0,
        submitted_s=tr.timestamp_s(meta.get("creationTimestamp")),
        started_s=min(started) if started and all(started) else None,
        reason=reason,
        estimated_start_s=float(estimate[1]) if estimate else None,
        interactive=labels.get(INTERACTIVE_LABEL) == "true",
        cuda=cuda,
        task_views=sorted(views, key=lambda t: (t.rank, t.pod)),
        reclaim=_reclaim(active),
    )


def _reclaim(pods: Sequence[dict[str, Any]]) -> str:
    """The reclaim mark, else the notice, the scheduler wrote on the job's pods."""
    for key, label in ((tr.RECLAIM_MARK_ANNOTATION, "marked"), (tr.RECLAIM_NOTICE_ANNOTATION, "notice")):
        for pod in pods:
            text = (pod["metadata"].get("annotations") or {}).get(key)
            if text:
                return f"{label}: {text}"
    return ""


def _task(pod: dict[str, Any]) -> TaskView:
    annotations = pod["metadata"].get("annotations") or {}
    return TaskView(
        rank=int(annotations.get(INDEX_ANNOTATION, -1)),
        pod=str(pod["metadata"]["name"]),
        phase=str(pod.get("status", {}).get("phase", "Pending")),
        node=tr.node_name_of(pod),
        gpus=str(annotations.get(tr.GPUS_ANNOTATION, "")),
        detail=_container_detail(pod),
    )


def _container_detail(pod: dict[str, Any]) -> str:
    """The first container's waiting reason, or how it terminated, as the kubelet reports it."""
    for status in pod.get("status", {}).get("containerStatuses") or ():
        state = status.get("state") or {}
        if "waiting" in state:
            waiting = state["waiting"] or {}
            message = waiting.get("message")
            return f"{waiting.get('reason', 'waiting')}" + (f": {message}" if message else "")
        if "terminated" in state:
            done = state["terminated"] or {}
            return f"{done.get('reason', 'terminated')} (exit {done.get('exitCode', '?')})"
    return ""


def _state(pods: Sequence[dict[str, Any]], tasks: int) -> str:
    phases = [p.get("status", {}).get("phase", "Pending") for p in pods]
    if phases and all(ph == "Succeeded" for ph in phases) and len(phases) >= tasks:
        return "completed"
    if any(ph == "Failed" for ph in phases):
        return "failed"
    bound = sum(1 for p in pods if tr.node_name_of(p))
    if bound == 0:
        return "pending"
    return "running" if bound >= tasks else "starting"


def _reason(pods: Sequence[dict[str, Any]]) -> str:
    """Why the job waits: the scheduler's message on a pod that is not bound yet."""
    if not pods:
        return "no pods yet: the Job controller creates them"
    for pod in sorted(pods, key=lambda p: str(p["metadata"]["name"])):
        if tr.node_name_of(pod):
            continue
        for condition in pod.get("status", {}).get("conditions") or ():
            if condition.get("type") == "PodScheduled" and condition.get("status") == "False":
                return str(condition.get("message") or condition.get("reason") or "")
        return "not yet considered by the scheduler"
    return ""


def _number_queues(views: list[JobView]) -> None:
    """Give each waiting job its 1-based place in its queue (submission order, as the dashboard's queue)."""
    waiting: dict[str, list[JobView]] = defaultdict(list)
    for view in sorted(views, key=lambda v: (v.submitted_s, v.id)):
        if view.state in {"pending", "starting"}:
            waiting[view.queue].append(view)
    for queue in waiting.values():
        for i, view in enumerate(queue, start=1):
            object.__setattr__(view, "position", i)
