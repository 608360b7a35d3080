"""What the API reads: one protocol for the demo (a simulated cluster) and a live Kubernetes cluster.

:class:`Dashboard` is what every view and route uses; :class:`~loadmaster.serve.demo.Demo`
(the simulator stepped in wall-clock time) and
:class:`~loadmaster.serve.livecluster.LiveDashboard` (a Kubernetes cluster through the informers of
``kube run``, telemetry from Prometheus) both provide it, so the demo runs the same views, access
rules and caches as a real deployment. :class:`ClusterModel` is the cluster side: the part of
:class:`~loadmaster.serve.live.LiveSimulator` the views read.
"""

from __future__ import annotations

import threading
from collections.abc import Mapping, Sequence
from typing import Protocol

import numpy as np
import numpy.typing as npt

from loadmaster.model import NodeTable, PendingJob, RunningJob, TaskPlacement, TraceJob
from loadmaster.scheduling import Status
from loadmaster.serve.auth import Authenticator
from loadmaster.serve.gpus import GpuIndex, TelemetryView
from loadmaster.serve.live import Frame, JobRecord
from loadmaster.telemetry.store import Series, TelemetryStore


class JobColumns(Protocol):
    """Per job (by number): start and end (NaN: not yet), why it was rejected, why it last waited."""

    @property
    def start(self) -> npt.NDArray[np.float64]: ...
    @property
    def end(self) -> npt.NDArray[np.float64]: ...
    @property
    def reason(self) -> Sequence[str]: ...
    @property
    def wait_reason(self) -> Sequence[str]: ...


class JobsNow(Protocol):
    """The running and pending jobs by id, and the free share of every GPU (milli-GPU, nodes x GPUs)."""

    @property
    def running(self) -> Mapping[str, RunningJob]: ...
    @property
    def pending(self) -> Mapping[str, PendingJob]: ...
    @property
    def gpu_free(self) -> npt.NDArray[np.int64]: ...


class ClusterModel(Protocol):
    """The cluster as the views read it; job numbers index ``jobs`` and ``log``."""

    @property
    def now_s(self) -> float: ...
    @property
    def version(self) -> int: ...
    @property
    def nodes(self) -> NodeTable: ...
    @property
    def jobs(self) -> Sequence[TraceJob]: ...
    @property
    def index(self) -> Mapping[str, int]: ...
    @property
    def owner(self) -> npt.NDArray[np.int32]: ...
    @property
    def records(self) -> Mapping[str, JobRecord]: ...
    @property
    def log(self) -> JobColumns: ...
    @property
    def cluster(self) -> JobsNow: ...

    def frame_at(self, time_s: float) -> Frame: ...
    def status(self, pending: PendingJob) -> Status | None: ...
    def estimated_start(self, job_id: str) -> float | None: ...


class Timing(Protocol):
    """How far apart telemetry samples are and how much history is kept (seconds)."""

    @property
    def telemetry_step_s(self) -> float: ...
    @property
    def history_s(self) -> float: ...


class Dashboard(Protocol):
    """Everything the API serves from: cluster, telemetry, sign-in, clock and lock."""

    @property
    def sim(self) -> ClusterModel: ...
    @property
    def store(self) -> TelemetryStore: ...
    @property
    def telemetry(self) -> TelemetryView: ...
    @property
    def index(self) -> GpuIndex: ...
    @property
    def tokens(self) -> Authenticator: ...
    @property
    def options(self) -> Timing: ...
    @property
    def cluster_name(self) -> str: ...
    @property
    def lock(self) -> threading.RLock: ...
    @property
    def speed(self) -> float: ...
    @property
    def paused(self) -> bool: ...
    @property
    def now_s(self) -> float: ...
    @property
    def oldest_s(self) -> float: ...

    def tick(self, wall_s: float) -> None:
        """Move on by ``wall_s`` wall seconds (the demo simulates; a live cluster refreshes)."""
        ...

    def set_speed(self, speed: float) -> None: ...

    def gpu_series_of(self, job_id: str) -> list[Series]:
        """The telemetry series of a job's GPUs (empty when it has none)."""
        ...

    def evict(self, job_id: str, reason: str) -> None:
        """End a running job because reclaim evicted it (the demo's simulator; NotFoundError where this
        server does not run the cluster)."""
        ...


def placements_of(sim: ClusterModel, job_id: str) -> tuple[TaskPlacement, ...]:
    """Where a job runs (or its bound part waits, or it last ran)."""
    running = sim.cluster.running.get(job_id)
    if running is not None:
        return running.placements
    pending = sim.cluster.pending.get(job_id)
    if pending is not None:
        return pending.bound
    record = sim.records.get(job_id)
    return record.placements if record is not None else ()


def series_of_gpus(board: Dashboard, placements: Sequence[TaskPlacement]) -> list[Series]:
    """The telemetry series of the GPUs of some placements, by the dashboard's GPU positions."""
    flats = [int(board.index.first[p.node]) + int(g) for p in placements for g in p.gpu_indices]
    ids = {int(board.telemetry.series_of_gpu[f]) for f in flats} - {-1}
    return [s for s in board.store.series() if s.id in ids]
