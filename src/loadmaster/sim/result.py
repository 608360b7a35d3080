"""RunResult: what a simulation produced."""

from __future__ import annotations

from dataclasses import dataclass

from loadmaster.model import JobTable, Timeline


@dataclass(frozen=True, eq=False)
class RunResult:
    """The job table (one row per job) and the timeline (one sample per cycle)."""

    jobs: JobTable
    timeline: Timeline
