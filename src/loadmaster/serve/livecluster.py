"""``loadmaster serve --config``: the dashboard over a live Kubernetes cluster.

Cluster state comes from a feed (:class:`FeedSource`): in production
:class:`loadmaster.kube.watch.ClusterWatch`, the informers of ``kube run``
read-only (serve may not import the kubernetes client; the CLI wires it in).
Telemetry comes from a :class:`~loadmaster.telemetry.store.TelemetryStore`,
in production :class:`~loadmaster.telemetry.prometheus.PrometheusStore` over
series that dcgm-exporter or ``loadmaster agent`` export.

:class:`KubeModel` keeps, from successive feeds, what the views read of a
cluster (:class:`~loadmaster.serve.dashboard.ClusterModel`, as the demo's
simulator provides it): jobs numbered as first seen, when each started and
ended, why each waits, who holds each GPU, and ownership frames for the time
scrubber. **GPU -> pod -> job -> user**: a GPU series labelled with a pod
(``namespace``, ``pod``, as dcgm-exporter and the agent label them) belongs to
that pod's job (its PodGroup, else the pod) and the job's user (its
``loadmaster.io/user`` label, else its namespace); this overrides the
scheduler's recorded GPU indices, which pods bound by another scheduler lack.
"""

from __future__ import annotations

import math
import threading
import time
from collections import deque
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from loadmaster.errors import TelemetryError
from loadmaster.model import ClusterSnapshot, NodeTable, PendingJob, RunningJob, TaskPlacement, TraceJob
from loadmaster.scheduling import Status
from loadmaster.scheduling.status import unschedulable
from loadmaster.serve.auth import Authenticator
from loadmaster.serve.dashboard import placements_of, series_of_gpus
from loadmaster.serve.gpus import GpuIndex, TelemetryView, series_positions
from loadmaster.serve.live import FREE, Frame, JobRecord
from loadmaster.serve.views import NotFoundError
from loadmaster.telemetry.schema import Field, field
from loadmaster.telemetry.store import Range, Series, TelemetryStore, matches


class FeedLike(Protocol):
    """One look at the cluster (:class:`loadmaster.kube.watch.ClusterFeed` has these fields)."""

    @property
    def time_s(self) -> float: ...
    @property
    def snapshot(self) -> ClusterSnapshot: ...
    @property
    def reasons(self) -> Mapping[str, str]: ...
    @property
    def pods(self) -> Mapping[str, str]: ...


class FeedSource(Protocol):
    """Where feeds come from: ``feed()`` is the cluster now (None until a node is known)."""

    def feed(self) -> FeedLike | None: ...


class _Columns:
    """Per-job start, end, reject and wait reasons, growing as jobs are seen."""

    def __init__(self) -> None:
        self.start: npt.NDArray[np.float64] = np.zeros(0)
        self.end: npt.NDArray[np.float64] = np.zeros(0)
        self.reason: list[str] = []
        self.wait_reason: list[str] = []

    def grow(self) -> None:
        self.start = np.append(self.start, np.nan)
        self.end = np.append(self.end, np.nan)
        self.reason.append("")
        self.wait_reason.append("")


@dataclass
class _Now:
    running: dict[str, RunningJob]
    pending: dict[str, PendingJob]
    gpu_free: npt.NDArray[np.int64]


class KubeModel:
    """The views' cluster model built from feeds (module docstring); times are Unix seconds."""

    def __init__(self, nodes: NodeTable, history_s: float = 6 * 3600.0, frame_step_s: float = 60.0) -> None:
        self.now_s = 0.0
        self.version = 0
        self.nodes = nodes
        self.jobs: list[TraceJob] = []
        self.index: dict[str, int] = {}
        self.owner: npt.NDArray[np.int32] = np.full((len(nodes), nodes.max_gpus), FREE, dtype=np.int32)
        self.records: dict[str, JobRecord] = {}
        self.log = _Columns()
        self.cluster = _Now({}, {}, np.zeros((0, 0), dtype=np.int64))
        self.frame_step_s = frame_step_s
        self.frames: deque[Frame] = deque(maxlen=max(1, math.ceil(history_s / frame_step_s)) + 1)
        self._reasons: dict[str, str] = {}

    def update(self, feed: FeedLike, held: Mapping[tuple[int, int], str] | None = None) -> bool:
        """Take in a feed (and the GPUs telemetry says pods hold: (node, gpu) -> job id); True when the
        node table changed (the dashboard's GPU index must be rebuilt)."""
        snap = feed.snapshot
        changed = [n.name for n in snap.nodes.nodes] != [n.name for n in self.nodes.nodes]
        self.nodes = snap.nodes
        self.now_s = feed.time_s
        running = {r.job.id: r for r in snap.running}
        pending = {p.job.id: p for p in snap.pending}
        for job in [*(r.job for r in snap.running), *(p.job for p in snap.pending)]:
            if job.id not in self.index:
                self.index[job.id] = len(self.jobs)
                self.jobs.append(TraceJob(job, job.time_limit_s))
                self.log.grow()
        for job_id, run in running.items():
            number = self.index[job_id]
            self.log.start[number] = run.start_s
            self.records[job_id] = JobRecord(number, run.placements, run.start_s)
        for job_id in [j for j in self.cluster.running if j not in running]:
            number = self.index[job_id]
            self.log.end[number] = self.now_s
            old = self.records[job_id]
            self.records[job_id] = JobRecord(number, old.placements, old.start_s, self.now_s)
        for job_id in pending:
            self.log.wait_reason[self.index[job_id]] = feed.reasons.get(job_id, "")
        self._reasons = {j: feed.reasons[j] for j in pending if j in feed.reasons}
        self.cluster = _Now(running, pending, snap.gpu_free_milli)
        self._frame_until(self.now_s)
        self.owner = self._owner(held or {})
        self.version += 1
        return changed

    def _owner(self, held: Mapping[tuple[int, int], str]) -> npt.NDArray[np.int32]:
        owner = np.full((len(self.nodes), self.nodes.max_gpus), FREE, dtype=np.int32)
        for job_id, placements in [
            *((j, r.placements) for j, r in self.cluster.running.items()),
            *((j, p.bound) for j, p in self.cluster.pending.items()),
        ]:
            _mark(owner, placements, self.index[job_id])
        confirmed: dict[int, set[tuple[int, int]]] = {}
        for (node, gpu), job_id in held.items():
            number = self.index.get(job_id)
            if number is not None and node < owner.shape[0] and gpu < owner.shape[1]:
                confirmed.setdefault(number, set()).add((node, gpu))
        for number, cells in confirmed.items():
            for node in {n for n, _ in cells}:  # telemetry knows better than the recorded indices
                owner[node][owner[node] == number] = FREE
            for node, gpu in cells:
                owner[node, gpu] = number
        return owner

    def _frame_until(self, time_s: float) -> None:
        last = self.frames[-1].time_s if self.frames else None
        if (last is None or time_s - last >= self.frame_step_s) and self.owner.size:
            self.frames.append(Frame(time_s, self.owner.copy()))

    def frame_at(self, time_s: float) -> Frame:
        """The ownership frame nearest before ``time_s`` (now when it is later than the newest)."""
        if time_s >= self.now_s or not self.frames:
            return Frame(self.now_s, self.owner)
        best = self.frames[0]
        for frame in tuple(self.frames):
            if frame.time_s > time_s:
                break
            best = frame
        return best

    def status(self, pending: PendingJob) -> Status | None:
        """The scheduler's reason for a waiting job (from its pods), or None before it gave one."""
        reason = self._reasons.get(pending.job.id)
        return unschedulable(reason, "scheduler") if reason else None

    def estimated_start(self, job_id: str) -> float | None:
        """Not published by ``kube run`` yet: always None."""
        return None


def _mark(owner: npt.NDArray[np.int32], placements: Sequence[TaskPlacement], number: int) -> None:
    for p in placements:
        owner[p.node, list(p.gpu_indices)] = number


class JobLabelledStore:
    """A telemetry store whose GPU series also carry the ``job`` and ``user`` their pod labels map to,
    so everything that selects by job (the reclaim report) reads a live cluster as it reads the demo."""

    def __init__(self, inner: TelemetryStore) -> None:
        self.inner = inner
        self.jobs: dict[str, tuple[str, str]] = {}
        """Pod key -> (job id, user), set by the dashboard at each refresh."""

    def register(self, series: Sequence[Series]) -> None:
        self.inner.register(series)

    def append(self, samples: pa.Table) -> None:
        self.inner.append(samples)

    def series(self, **labels: str) -> list[Series]:
        out = []
        for s in self.inner.series():
            owner = self.jobs.get(_pod_key(s) or "")
            labelled = Series(s.id, s.scope, {**s.labels, "job": owner[0], "user": owner[1]}) if owner else s
            if matches(labelled, labels):
                out.append(labelled)
        return out

    def latest(self, field: Field, at_s: float | None = None) -> dict[int, float]:
        return self.inner.latest(field, at_s)

    def range(
        self, field: Field, series: Sequence[int], start_s: float, end_s: float, step_s: float
    ) -> Range:
        return self.inner.range(field, series, start_s, end_s, step_s)


LIVE_FIELDS = (
    "GPU_UTIL", "SM_ACTIVE", "FB_USED", "FB_FREE", "POWER_USAGE", "GPU_TEMP",
    "XID_ERRORS", "ECC_DBE_VOL_TOTAL", "CLOCKS_EVENT_REASONS",
)  # fmt: skip
"""The fields whose newest values the views read for every GPU (colour, state, badges): read once per
refresh and kept in memory; any other field, or a past time, is read from the store when asked."""


@dataclass(frozen=True)
class LiveTiming:
    """Seconds between telemetry samples (the scrape interval) and the history kept."""

    telemetry_step_s: float = 15.0
    history_s: float = 6 * 3600.0


class LiveDashboard:
    """:class:`~loadmaster.serve.dashboard.Dashboard` over a live cluster (module docstring)."""

    def __init__(
        self,
        source: FeedSource,
        store: TelemetryStore,
        tokens: Authenticator,
        *,
        cluster_name: str = "live",
        options: LiveTiming | None = None,
        series_refresh_s: float = 15.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.source = source
        self.store = JobLabelledStore(store)
        self.tokens = tokens
        self.cluster_name = cluster_name
        self.options = options or LiveTiming()
        self.lock = threading.RLock()
        self.speed = 1.0
        self.paused = False
        self.series_refresh_s = series_refresh_s
        self._clock = clock
        first = source.feed()
        if first is None:
            raise TelemetryError("the cluster shows no node yet: nothing to serve (is the API reachable?)")
        self.sim = KubeModel(
            first.snapshot.nodes, self.options.history_s, max(self.options.telemetry_step_s, 60.0)
        )
        self._series: list[Series] = []
        self._latest: dict[str, dict[int, float]] = {}
        self._series_at = -math.inf
        self.index = GpuIndex.of(self.sim.nodes)
        self.telemetry = TelemetryView(self.index, self.store, np.zeros(0, dtype=np.int64))
        self.refresh()

    @property
    def now_s(self) -> float:
        return self.sim.now_s

    @property
    def oldest_s(self) -> float:
        frames = self.sim.frames
        first = frames[0].time_s if frames else self.now_s
        return max(first, self.now_s - self.options.history_s)

    def tick(self, wall_s: float) -> None:
        """Refresh from the cluster and the telemetry (a live cluster runs in real time)."""
        self.refresh()

    def set_speed(self, speed: float) -> None:
        raise NotFoundError("a live cluster runs in real time: speed is a control of the demo only")

    def refresh(self) -> None:
        """Read the feed and, every ``series_refresh_s``, the telemetry (series and the newest value of
        each field the views colour and badge by); rebuild what changed.

        Prometheus is read before the lock is taken, and the views then read those values from memory
        (:meth:`TelemetryView.remember`, as the demo keeps its last batch), so no request waits on
        Prometheus and no request builds a snapshot from a half-read cluster.
        """
        feed = self.source.feed()
        if feed is None:
            return
        if self._clock() - self._series_at >= self.series_refresh_s:
            latest = {key: self.store.inner.latest(field(key)) for key in LIVE_FIELDS}
            self._series = _fresh(self.store.inner, set(latest["GPU_UTIL"]))
            self._latest = latest
            self._series_at = self._clock()
        with self.lock:
            nodes = {n.name: i for i, n in enumerate(feed.snapshot.nodes.nodes)}
            held = _held(self._series, nodes, feed.pods)
            changed = self.sim.update(feed, held)
            users = {r.job.id: r.job.user for r in feed.snapshot.running} | {
                p.job.id: p.job.user for p in feed.snapshot.pending
            }
            self.store.jobs = {pod: (job, users.get(job, "?")) for pod, job in feed.pods.items()}
            if changed or self.index.size != int(self.sim.nodes.gpus.sum()):
                self.index = GpuIndex.of(self.sim.nodes)
            view = TelemetryView(self.index, self.store, series_positions(self.index, self._series))
            view.remember(self._latest)
            self.telemetry = view

    def evict(self, job_id: str, reason: str) -> None:
        """Not here: on a Kubernetes cluster the scheduler evicts (``kube run --reclaim``)."""
        raise NotFoundError("on a live cluster reclaim's evictions are the scheduler's (kube run --reclaim)")

    def gpu_series_of(self, job_id: str) -> list[Series]:
        """The GPU series labelled with the job's pods; else those of the GPUs it holds by placement."""
        pods = {p for p, j in self._feed_pods().items() if j == job_id}
        by_pod = [s for s in self._series if _pod_key(s) in pods and "GPU_I_ID" not in s.labels]
        return by_pod or series_of_gpus(self, placements_of(self.sim, job_id))

    def _feed_pods(self) -> Mapping[str, str]:
        feed = self.source.feed()
        return feed.pods if feed is not None else {}


def _fresh(store: TelemetryStore, recent: set[int]) -> list[Series]:
    """The store's series, less GPU series with no recent sample (``recent``: the ids with a newest
    GPU_UTIL): a GPU whose pod changed keeps its old label set in Prometheus for a while, and that one
    must not say who holds the GPU now."""
    every = store.series()
    if not recent:
        return every
    return [s for s in every if s.scope != "gpu" or s.id in recent or "GPU_I_ID" in s.labels]


def _pod_key(series: Series) -> str | None:
    namespace, pod = series.labels.get("namespace"), series.labels.get("pod")
    return f"{namespace}/{pod}" if namespace and pod else None


def _held(
    series: Sequence[Series], nodes: Mapping[str, int], pods: Mapping[str, str]
) -> dict[tuple[int, int], str]:
    """(node, GPU) -> job id for every GPU series whose pod labels name a pod of a known job."""
    out: dict[tuple[int, int], str] = {}
    for s in series:
        key = _pod_key(s)
        node = nodes.get(s.labels.get("Hostname", ""))
        gpu = s.labels.get("gpu", "")
        if key is None or node is None or not gpu.isdigit() or "GPU_I_ID" in s.labels:
            continue
        job = pods.get(key)
        if job is not None:
            out[(node, int(gpu))] = job
    return out
