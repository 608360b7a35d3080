"""The comparison with CloudSimPy's published runs (``reference_runs_heuristics.json``), and its tables."""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadmaster.traces import TraceError
from loadmaster.validation.deepjs.chooser import Chooser
from loadmaster.validation.deepjs.engine import METRICS, Evaluation, evaluate
from loadmaster.validation.deepjs.heuristics import heuristics
from loadmaster.validation.deepjs.trace import REFERENCE_CHUNKS, chunks, read_jobs

TOLERANCE = 0.5e-4 + 1e-9
"""The reference rounds averages to 4 decimals: a difference up to half a unit there is a match."""


@dataclass(frozen=True)
class ReferenceRun:
    """One reference run: a CloudSimPy heuristic on one chunk (averages rounded to 4 decimals)."""

    chunk: int
    policy: str
    makespan: float
    avg_completion: float
    avg_slowdown: float


REFERENCE_METRICS = ("makespan", "avg_completion", "avg_slowdown")
"""The metrics the reference file gives."""


def read_reference(path: Path) -> dict[tuple[int, str], ReferenceRun]:
    """The reference runs keyed by (chunk, policy); :class:`TraceError` names a malformed entry."""
    source = str(path)
    try:
        document = json.loads(path.read_text())
    except OSError as error:
        raise TraceError(source, None, "", f"cannot read: {error.strerror or error}") from error
    except ValueError as error:
        raise TraceError(source, None, "", f"not JSON: {error}") from error
    runs = document.get("runs") if isinstance(document, dict) else None
    if not isinstance(runs, list) or not runs:
        raise TraceError(source, None, "runs", "expected a non-empty list of runs")
    parsed = [_reference_run(source, i, entry) for i, entry in enumerate(runs)]
    return {(run.chunk, run.policy): run for run in parsed}


def _reference_run(source: str, index: int, entry: object) -> ReferenceRun:
    """One entry of ``runs``, each field checked."""
    where = f"runs[{index}]"
    if not isinstance(entry, dict):
        raise TraceError(source, None, where, f"expected an object, got {entry!r}")

    def value(name: str) -> float:
        item = entry.get(name)
        if isinstance(item, bool) or not isinstance(item, int | float) or not math.isfinite(item):
            raise TraceError(source, None, f"{where}.{name}", f"expected a finite number, got {item!r}")
        return float(item)

    policy = entry.get("policy")
    if not isinstance(policy, str):
        raise TraceError(source, None, f"{where}.policy", f"expected a name, got {policy!r}")
    metrics = [value(name) for name in REFERENCE_METRICS]
    return ReferenceRun(int(value("chunk")), policy, *metrics)


@dataclass(frozen=True)
class Comparison:
    """Ours against the reference for one (chunk, policy): the largest difference over the three metrics."""

    chunk: int
    policy: str
    ours: dict[str, float]
    reference: ReferenceRun

    @property
    def max_difference(self) -> float:
        return max(abs(self.ours[name] - float(getattr(self.reference, name))) for name in REFERENCE_METRICS)

    @property
    def matches(self) -> bool:
        """Makespan equal, averages within :data:`TOLERANCE` (the reference's rounding)."""
        return self.ours["makespan"] == self.reference.makespan and self.max_difference <= TOLERANCE


def compare(
    evaluations: Sequence[Evaluation], reference: Mapping[tuple[int, str], ReferenceRun]
) -> list[Comparison]:
    """Every run that the reference also has, in the order of ``evaluations``."""
    return [
        Comparison(result.chunk, result.chooser, result.metrics(), reference[result.chunk, result.chooser])
        for evaluation in evaluations
        for result in evaluation.chunks
        if (result.chunk, result.chooser) in reference
    ]


def reproduce(
    jobs_csv: Path,
    choosers: Sequence[Chooser] | None = None,
    indices: Sequence[int] = range(REFERENCE_CHUNKS),
) -> list[Evaluation]:
    """Each chooser (default: :func:`heuristics`) on the chunks at ``indices`` of ``jobs_csv``."""
    runs = chunks(read_jobs(jobs_csv), indices)
    return [evaluate(chooser, runs) for chooser in choosers or heuristics()]


def table(evaluations: Sequence[Evaluation], comparisons: Sequence[Comparison]) -> str:
    """A Markdown table: mean of each metric per chooser, and matched reference runs."""
    header = ["chooser", *METRICS, "matches reference"]
    lines = ["| " + " | ".join(header) + " |", "|" + "---|" * len(header)]
    for evaluation in evaluations:
        mine = [c for c in comparisons if c.policy == evaluation.chooser]
        matched = f"{sum(c.matches for c in mine)}/{len(mine)}" if mine else "n/a"
        means = [f"{value:.4f}" for value in evaluation.mean().values()]
        lines.append("| " + " | ".join([evaluation.chooser, *means, matched]) + " |")
    return "\n".join(lines)


def reference_table(comparisons: Sequence[Comparison]) -> str:
    """A Markdown table of the reference's three metrics, mean over chunks: ours / reference, per policy."""
    lines = [
        "| policy | " + " | ".join(REFERENCE_METRICS) + " |",
        "|" + "---|" * (len(REFERENCE_METRICS) + 1),
    ]
    for policy in dict.fromkeys(c.policy for c in comparisons):
        mine = [c for c in comparisons if c.policy == policy]
        ours = [np.mean([c.ours[name] for c in mine]) for name in REFERENCE_METRICS]
        theirs = [np.mean([getattr(c.reference, name) for c in mine]) for name in REFERENCE_METRICS]
        cells = [f"{a:.4f} / {b:.4f}" for a, b in zip(ours, theirs, strict=True)]
        lines.append(f"| {policy} | " + " | ".join(cells) + " |")
    return "\n".join(lines)
