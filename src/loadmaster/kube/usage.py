"""How well a running job uses its GPUs, and what diagnostics finds, from the cluster's telemetry.

dcgm-exporter (with its Kubernetes pod mapping) labels each GPU's series with
the ``namespace`` and ``pod`` that hold it; a job's GPUs are the series of
its task pods. Utilisation is ``GPU_UTIL`` averaged over the job's run so far
(at most :data:`MAX_STEPS` steps, so a long run costs as little as a short
one) and its latest value; the findings are those of
:func:`loadmaster.diagnostics.diagnose` over the same series, relabelled
with the job's id as the store's ``job`` label would carry it.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass, field, replace

import numpy as np
import pyarrow as pa

from loadmaster.diagnostics import DetectorConfig, diagnose, frame_from_store
from loadmaster.errors import TelemetryError
from loadmaster.kube.jobs import JobView
from loadmaster.telemetry import field as telemetry_field
from loadmaster.telemetry.schema import Field, Scope
from loadmaster.telemetry.store import Range, Series, TelemetryStore, matches

MAX_STEPS = 240
"""Most time steps read per GPU for the run's mean utilisation."""
MIN_STEP_S = 15.0
"""Shortest step: dcgm-exporter is commonly scraped every 15-30 s; finer steps would read as gaps."""
IDLE_UTIL_PCT = 1.0
"""A GPU whose mean utilisation over the run is below this counts as idle."""


@dataclass(frozen=True)
class JobUsage:
    """A running job's GPUs as its telemetry shows them."""

    gpus: int
    mean_util_pct: float
    latest_util_pct: float
    idle_gpus: list[str] = field(default_factory=list)
    findings: list[str] = field(default_factory=list)
    diagnostics_note: str = ""
    """Why there are no findings to show (too little telemetry yet), when so."""


class _AsJob:
    """A read-only view of a store in which the job's GPU series carry ``job=<id>``."""

    def __init__(self, store: TelemetryStore, gpu_ids: set[int], job: str) -> None:
        self.store, self.gpu_ids, self.job = store, gpu_ids, job

    def register(self, series: Sequence[Series]) -> None:
        raise TelemetryError("a job's view of the telemetry is read-only")

    def append(self, samples: pa.Table) -> None:
        raise TelemetryError("a job's view of the telemetry is read-only")

    def series(self, **labels: str) -> list[Series]:
        relabelled = [
            replace(s, labels={**s.labels, "job": self.job}) if s.id in self.gpu_ids else s
            for s in self.store.series()
        ]
        return [s for s in relabelled if matches(s, labels)]

    def latest(self, field: Field, at_s: float | None = None) -> dict[int, float]:
        return self.store.latest(field, at_s)

    def range(
        self, field: Field, series: Sequence[int], start_s: float, end_s: float, step_s: float
    ) -> Range:
        return self.store.range(field, series, start_s, end_s, step_s)


def job_usage(store: TelemetryStore, view: JobView, now_s: float) -> JobUsage | None:
    """The job's utilisation and findings; None when no GPU series of its pods is found."""
    gpus = [
        s
        for task in view.task_views
        if task.node
        for s in store.series(namespace=view.namespace, pod=task.pod)
        if s.scope == Scope.GPU.value
    ]
    if not gpus:
        return None
    start = view.started_s if view.started_s is not None else now_s - 3600.0
    step = max((now_s - start) / MAX_STEPS, MIN_STEP_S)
    begin = max(start, now_s - step * MAX_STEPS)
    ids = [s.id for s in gpus]
    util = telemetry_field("GPU_UTIL")
    per_gpu = np.nanmean(store.range(util, ids, begin, now_s, step).mean, axis=1)
    latest = store.latest(util, now_s)
    names = [f"{s.labels.get('Hostname', '?')}/{s.labels.get('gpu', s.id)}" for s in gpus]
    idle = [
        name for name, mean in zip(names, per_gpu, strict=True) if np.isfinite(mean) and mean < IDLE_UTIL_PCT
    ]
    latest_values = [latest[i] for i in ids if i in latest]
    usage = JobUsage(
        gpus=len(gpus),
        mean_util_pct=float(np.nanmean(per_gpu)) if np.isfinite(per_gpu).any() else float("nan"),
        latest_util_pct=float(np.mean(latest_values)) if latest_values else float("nan"),
        idle_gpus=idle,
    )
    window = (begin, now_s, step)
    try:
        frame = frame_from_store(_AsJob(store, set(ids), view.id), view.id, *window)
        diagnosis = diagnose(frame, with_overview=False)
    except TelemetryError as exc:
        return replace(usage, diagnostics_note=f"diagnostics: not available ({exc})")
    found = diagnosis.findings
    if not found and diagnosis.note and diagnosis.telemetry_s < DetectorConfig().min_telemetry_s:
        return replace(usage, diagnostics_note=f"diagnostics: {diagnosis.note}")  # no verdict
    if not found:
        return replace(usage, diagnostics_note="diagnostics: no findings (every GPU behaves like its peers)")
    return replace(usage, findings=[f.summary for f in found])
