"""What a scheduling cycle decides, for a driver (simulator, live cluster, Kubernetes) to carry out."""

from __future__ import annotations

from collections.abc import Collection, Mapping
from dataclasses import dataclass, field

from loadmaster.model import TaskPlacement
from loadmaster.scheduling.status import Status


@dataclass(frozen=True, slots=True)
class Bind:
    """Bind tasks of a job to nodes. ``starts`` is True when the job then has enough tasks to run."""

    job_id: str
    placements: tuple[TaskPlacement, ...]
    starts: bool


@dataclass(frozen=True, slots=True)
class Reserve:
    """Hold capacity for a job that cannot start now; ``start_s`` is its estimated start."""

    job_id: str
    start_s: float
    nodes: tuple[int, ...]


@dataclass(frozen=True, slots=True)
class Preempt:
    """Stop a running job to make room, with the reason."""

    job_id: str
    reason: str


Decision = Bind | Reserve | Preempt


@dataclass(frozen=True)
class CycleResult:
    """The decisions of one cycle and, for every pending job, why it still waits.

    Jobs examined in the cycle have their own status in ``statuses``. Jobs
    behind a blocked head of a strict queue were not examined: ``blocked``
    maps the queue's lane (``Profile.lane``) to the status they all share.
    A backfill walk that tries at most so many jobs (Slurm's ``bf_max_job_test``)
    gives every job it did not try (not in ``tested``) the status ``untested``.
    """

    decisions: tuple[Decision, ...]
    statuses: Mapping[str, Status] = field(default_factory=dict)
    blocked: Mapping[str, Status] = field(default_factory=dict)
    untested: Status | None = None
    tested: Collection[str] = frozenset()
    """The jobs tried or bound, where ``untested`` is set (the others waited untried)."""

    def status_of(self, job_id: str, lane: str) -> Status | None:
        """Why ``job_id`` (in queue lane ``lane``, see ``Profile.lane``) still waits; None if it was bound."""
        found = self.statuses.get(job_id)
        if found is None:
            found = self.blocked.get(lane)
            if found is None and self.untested is not None and job_id not in self.tested:
                return self.untested
        return found

    @property
    def binds(self) -> tuple[Bind, ...]:
        """The Bind decisions, in the order they were made."""
        return tuple(d for d in self.decisions if isinstance(d, Bind))
