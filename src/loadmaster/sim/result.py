"""RunResult: what a simulation produced."""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from loadmaster.model import JobTable, Timeline
from loadmaster.sim.mig import MigReport


@dataclass(frozen=True, eq=False)
class RunResult:
    """The job table (one row per job), the timeline (one sample per cycle) and explained jobs.

    ``explanations`` maps each job asked for in ``SimOptions.explain`` to its
    story: (time, what happened or why it waited), one entry per change.
    """

    jobs: JobTable
    timeline: Timeline
    explanations: Mapping[str, list[tuple[float, str]]] = field(default_factory=dict)
    mig: MigReport | None = None
    """What MIG layout changes and reboots cost (None when the run had no MIG pools)."""
