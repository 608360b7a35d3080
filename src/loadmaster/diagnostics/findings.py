"""What diagnostics reports: typed findings with targets, interval, evidence and confidence."""

from __future__ import annotations

import math
from collections.abc import Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from typing import Any


class FindingKind(StrEnum):
    """What went wrong (the same names as the synthetic fault kinds)."""

    STRAGGLER = "straggler"
    """A GPU or node computes slower than its peers; the peers wait for it at every sync."""
    COMM = "comm"
    """A node's link is degraded: its InfiniBand bytes drop and the whole job stalls in all-reduce."""
    THERMAL = "thermal"
    """Clocks held down by thermal slowdown (or power): hot, slow, usually straggling too."""
    MEMORY_LEAK = "memory_leak"
    """GPU memory grows steadily above its peers', towards out-of-memory."""
    XID = "xid"
    """The driver reported an XID error."""
    ECC = "ecc"
    """ECC errors counted (single-bit corrected; any double-bit error means the GPU needs attention)."""
    MISSING = "missing"
    """A GPU sent no telemetry for a while."""
    IDLE = "idle"
    """A GPU allocated to the job does nothing (memory may be held)."""


@dataclass(frozen=True)
class Evidence:
    """Why a finding was made: the metrics looked at and the numbers that decided it."""

    metrics: tuple[str, ...]
    numbers: Mapping[str, float] = field(default_factory=dict)
    text: str = ""


@dataclass(frozen=True)
class Finding:
    """One diagnosis: kind, target GPUs (``host/index``) and nodes, interval (start_s, end_s],
    evidence and confidence (0-1)."""

    kind: FindingKind
    gpus: tuple[str, ...]
    nodes: tuple[str, ...]
    start_s: float
    end_s: float
    evidence: Evidence
    confidence: float
    axis: str = "s"
    """What ``start_s``/``end_s`` count: seconds (``s``), or ``iteration`` stamps for findings of
    per-rank iteration times."""

    @property
    def summary(self) -> str:
        """One line: what, where, when, why."""
        where = ", ".join(self.nodes) if self.nodes else ", ".join(self.gpus[:4])
        if not self.nodes and len(self.gpus) > 4:
            where += f" (+{len(self.gpus) - 4} more)"
        when = (
            f"in iterations {self.start_s:.0f}-{self.end_s:.0f}"
            if self.axis == "iteration"
            else f"from {self.start_s:.0f} s to {self.end_s:.0f} s"
        )
        return f"{self.kind.value} on {where} {when}: {self.evidence.text} (confidence {self.confidence:.2f})"

    def to_dict(self) -> dict[str, Any]:
        """A JSON-able dict."""
        return {
            "kind": self.kind.value,
            "gpus": list(self.gpus),
            "nodes": list(self.nodes),
            "start_s": round(self.start_s, 3),
            "end_s": round(self.end_s, 3),
            "axis": self.axis,
            "confidence": round(self.confidence, 3),
            "evidence": {
                "metrics": list(self.evidence.metrics),
                "numbers": {k: _jsonable(v) for k, v in self.evidence.numbers.items()},
                "text": self.evidence.text,
            },
            "summary": self.summary,
        }


def _jsonable(v: float) -> float | None:
    return round(float(v), 6) if math.isfinite(v) else None


def confidence(strength: float, threshold: float, duration_s: float, min_duration_s: float) -> float:
    """0.5 at the threshold and the minimum duration, towards 1 as either grows."""
    s = max(0.0, strength / max(threshold, 1e-12) - 1.0)
    d = max(0.0, duration_s / max(min_duration_s, 1e-12) - 1.0)
    return round(min(0.99, 0.5 + 0.25 * (1.0 - 1.0 / (1.0 + s)) + 0.24 * (1.0 - 1.0 / (1.0 + d))), 3)
