"""Reclaiming allocated GPUs that do nothing: the rule, the report per user and job, and the action.

Jobs are ranked by the GPU-hours their idle GPUs have wasted (each idle GPU
counts from its last busy sample, within ``lookback_s``), with how long the
job has been idle: the operator reads the costliest first.

NSML reclaimed GPUs that were allocated but idle; this module finds them in
any :class:`~loadmaster.telemetry.store.TelemetryStore`. A GPU counts as
allocated when its series carries a ``job`` label.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from loadmaster.diagnostics.signals import FloatArray
from loadmaster.errors import TelemetryError
from loadmaster.telemetry.schema import field
from loadmaster.telemetry.store import Series, TelemetryStore


@dataclass(frozen=True)
class ReclaimRule:
    """When an allocated GPU is idle or under-used. Defaults follow NSML's practice."""

    sample_s: float = 30.0
    """Utilisation is read as one value per this many seconds (the step max for idleness)."""
    idle_window_s: float = 1800.0
    """Idle: GPU_UTIL zero in every sample of this window (30 min)."""
    idle_max_util_pct: float = 0.0
    """The highest GPU_UTIL (per sample) that still counts as zero."""
    underused_window_s: float = 7200.0
    """Under-used: over this window (2 h) ..."""
    underused_p95_sm: float = 0.2
    """... the 95th percentile of SM_ACTIVE (per-sample mean) stays below this."""
    min_coverage: float = 0.8
    """Share of samples that must be present to judge a GPU (a silent GPU is not called idle)."""
    lookback_s: float = 6 * 3600.0
    """How far back an idle GPU's idle stretch is measured (its wasted GPU-hours count up to this)."""

    def __post_init__(self) -> None:
        for name in ("sample_s", "idle_window_s", "underused_window_s", "lookback_s"):
            if not getattr(self, name) > 0:
                raise TelemetryError(f"ReclaimRule.{name} must be > 0, got {getattr(self, name)!r}")
        if not 0 < self.min_coverage <= 1:
            raise TelemetryError(f"ReclaimRule.min_coverage must be in (0, 1], got {self.min_coverage!r}")


@dataclass(frozen=True)
class GpuVerdict:
    """One allocated GPU's state under the rule."""

    gpu: str
    job: str
    user: str
    state: str
    """``idle``, ``underused``, ``busy`` or ``unknown`` (too few samples)."""
    max_util_pct: float
    p95_sm_active: float
    idle_for_s: float = 0.0
    """How long an idle GPU has done nothing (since its last busy sample, at most ``lookback_s``)."""


@dataclass(frozen=True)
class JobReclaim:
    """A job holding idle or under-used GPUs and what an operator should do."""

    job: str
    user: str
    gpus: int
    idle: tuple[str, ...]
    underused: tuple[str, ...]
    action: str
    idle_for_s: float = 0.0
    """How long every idle GPU of the job has been idle (the shortest of their idle stretches)."""
    wasted_gpu_hours: float = 0.0
    """GPU-hours its idle GPUs have held doing nothing (within the lookback): the rank of the table."""


@dataclass(frozen=True)
class ReclaimReport:
    """Per job (and so per user): idle and under-used GPUs with the action; JSON-able via to_dict."""

    at_s: float
    rule: ReclaimRule
    jobs: tuple[JobReclaim, ...]
    verdicts: tuple[GpuVerdict, ...]

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able structure: rule, per-job rows, per-user totals."""
        users: dict[str, dict[str, int]] = {}
        for j in self.jobs:
            u = users.setdefault(j.user, {"idle_gpus": 0, "underused_gpus": 0})
            u["idle_gpus"] += len(j.idle)
            u["underused_gpus"] += len(j.underused)
        return {
            "at_s": self.at_s,
            "rule": {k: getattr(self.rule, k) for k in self.rule.__dataclass_fields__},
            "jobs": [
                {
                    "job": j.job,
                    "user": j.user,
                    "gpus": j.gpus,
                    "idle": list(j.idle),
                    "underused": list(j.underused),
                    "action": j.action,
                    "idle_for_s": j.idle_for_s,
                    "wasted_gpu_hours": round(j.wasted_gpu_hours, 3),
                }
                for j in self.jobs
            ],
            "users": users,
            "idle_gpus": sum(len(j.idle) for j in self.jobs),
            "wasted_gpu_hours": round(sum(j.wasted_gpu_hours for j in self.jobs), 3),
            "underused_gpus": sum(len(j.underused) for j in self.jobs),
        }


def classify(util_peak: FloatArray, sm_mean: FloatArray, rule: ReclaimRule) -> str:
    """One GPU's state from its per-sample peak GPU_UTIL over the idle window and per-sample mean
    SM_ACTIVE over the under-used window (NaN: no sample)."""
    util_ok = np.isfinite(util_peak)
    if (
        util_ok.size
        and util_ok.mean() >= rule.min_coverage
        and np.all(util_peak[util_ok] <= rule.idle_max_util_pct)
    ):
        return "idle"
    sm_ok = np.isfinite(sm_mean)
    if sm_ok.size == 0 or sm_ok.mean() < rule.min_coverage:
        return "unknown"
    return "underused" if float(np.percentile(sm_mean[sm_ok], 95)) < rule.underused_p95_sm else "busy"


def _action(job: str, user: str, n: int, idle: int, under: int) -> str:
    if idle == n:
        return f"all {n} GPUs of {job} idle: ask {user} to stop it, then preempt it to free the GPUs"
    if idle:
        return f"{idle} of {n} GPUs of {job} idle: ask {user} to shrink the job or release them"
    return (
        f"{under} of {n} GPUs of {job} under-used: suggest {user} fewer GPUs, a smaller share (MIG) "
        "or a larger batch"
    )


def reclaim_report(
    store: TelemetryStore,
    at_s: float,
    rule: ReclaimRule | None = None,
    job_starts: Mapping[str, float] | None = None,
) -> ReclaimReport:
    """Idle and under-used allocated GPUs as of ``at_s`` (the API function the dashboard calls).

    ``job_starts`` (job -> start, when the caller knows them) bounds an idle stretch by its job's
    start: a GPU that sat free before the job began has not been wasted by the job.
    """
    r = rule or ReclaimRule()
    allocated: list[Series] = [s for s in store.series() if s.labels.get("job") and s.scope == "gpu"]
    if not allocated:
        return ReclaimReport(at_s, r, (), ())
    ids = [s.id for s in allocated]
    span = max(r.lookback_s, r.idle_window_s)
    history = store.range(field("GPU_UTIL"), ids, at_s - span, at_s, r.sample_s).peak
    util = history[:, -max(1, round(r.idle_window_s / r.sample_s)) :]
    sm = store.range(field("SM_ACTIVE"), ids, at_s - r.underused_window_s, at_s, r.sample_s).mean
    verdicts = []
    for i, s in enumerate(allocated):
        row_u, row_s = util[i], sm[i]
        state = classify(row_u, row_s, r)
        idle_for = _idle_for_s(history[i], r) if state == "idle" else 0.0
        start = (job_starts or {}).get(s.labels["job"])
        if start is not None:
            idle_for = max(0.0, min(idle_for, at_s - start))
        verdicts.append(
            GpuVerdict(
                f"{s.labels.get('Hostname', '?')}/{s.labels.get('gpu', s.id)}",
                s.labels["job"],
                s.labels.get("user", "?"),
                state,
                float(np.nanmax(row_u)) if np.isfinite(row_u).any() else float("nan"),
                float(np.nanpercentile(row_s, 95)) if np.isfinite(row_s).any() else float("nan"),
                idle_for,
            )
        )
    return ReclaimReport(at_s, r, _per_job(verdicts), tuple(verdicts))


def _idle_for_s(util_peak: FloatArray, rule: ReclaimRule) -> float:
    """Seconds since the last sample above the idle threshold (samples missing in between are
    skipped; before the first sample nothing is known), at most the lookback."""
    seen = np.isfinite(util_peak)
    busy = np.flatnonzero(seen & (util_peak > rule.idle_max_util_pct))
    first = int(busy[-1]) + 1 if busy.size else int(np.argmax(seen)) if seen.any() else util_peak.size
    return float((util_peak.size - first) * rule.sample_s)


def _per_job(verdicts: list[GpuVerdict]) -> tuple[JobReclaim, ...]:
    jobs: dict[tuple[str, str], list[GpuVerdict]] = {}
    for v in verdicts:
        jobs.setdefault((v.job, v.user), []).append(v)
    out = []
    for (job, user), vs in sorted(jobs.items()):
        idle = tuple(v.gpu for v in vs if v.state == "idle")
        under = tuple(v.gpu for v in vs if v.state == "underused")
        if idle or under:
            spans = [v.idle_for_s for v in vs if v.state == "idle"]
            out.append(
                JobReclaim(
                    job, user, len(vs), idle, under, _action(job, user, len(vs), len(idle), len(under)),
                    min(spans, default=0.0), sum(spans) / 3600.0,
                )
            )  # fmt: skip
    return tuple(sorted(out, key=lambda j: (-j.wasted_gpu_hours, j.job)))
