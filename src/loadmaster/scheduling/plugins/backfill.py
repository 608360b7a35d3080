"""backfill: reservations for waiting jobs, so that later jobs may start without delaying them.

EASY (``mode: easy``): the first job of each queue lane that cannot start
reserves its earliest start, computed from running jobs' expected ends; a
later job starts now only if it ends before that reservation or uses capacity
the reservation does not need. Conservative (``mode: conservative``): every
waiting job ahead holds a reservation (up to ``depth`` per lane and cycle,
which bounds the cycle's cost).

The starvation guard visits every job that has waited ``starvation_s`` first,
oldest first (up to ``max_starving`` per cycle), and gives it a reservation
before any other job may start, so no job waits much past the guard plus the
run time of the jobs already running. Run times come from requested time limits, or
(``estimate: history``) from the mean of the user's last run times, capped by
the limit; history makes reservations tighter but they can then be missed.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

from loadmaster.model import Job, PendingJob, RunningJob
from loadmaster.scheduling.framework import CycleContext, ReservePlugin

EARLY_END_GROWTH = 1.5
"""With ``early_ends``, a job that has run for t is expected to run at least 1.5 t in all: the longer
a job has lasted, the longer it is likely to last (run times are heavy-tailed)."""
EARLY_END_MARGIN_S = 300.0
"""With ``early_ends``, a running job is never expected to end within 5 minutes of now."""


@dataclass(frozen=True, slots=True)
class BackfillArgs:
    mode: Literal["easy", "conservative"] = "easy"
    """easy: only the first blocked job (and starving ones) reserve; conservative: up to ``depth``."""
    depth: int = 16
    """Most reservations per queue lane and cycle in conservative mode (each costs a search of ends)."""
    starvation_s: float | None = 86_400.0
    """A job waiting longer than this always gets a reservation (None: no guard)."""
    estimate: Literal["limit", "history"] = "limit"
    """Run-time estimate: the requested time limit, or the user's recent run times capped by it."""
    history_jobs: int = 2
    """How many of the user's most recent run times the history estimate averages."""
    early_ends: float | None = None
    """Plan a *running* job's end from how long it has run: at ``estimate / early_ends``, or 1.5x
    its elapsed time, or elapsed + 5 min, whichever is latest, never past the estimate. Users ask
    about 3x what their jobs use, so ends planned on limits put a wide job's reservation days late
    and let narrower jobs overtake it; candidates are still judged by their whole estimate, so a
    job started by backfilling cannot count on ending early. None: plan on the estimate."""
    max_starving: int = 8
    """Most starving jobs visited first per cycle, oldest first (bounds the cycle's cost, as Slurm's
    bf_max_job_test does); the others are visited in queue order."""
    end_before_reservation: bool = False
    """Start a job now only if its estimated run ends strictly before every reservation begins,
    never on GPUs a reservation leaves spare (RLScheduler's rule); False: EASY's shadow rule."""
    submission_order: bool = False
    """Once a job has reserved, try the rest of the queue in submission order rather than queue
    order (RLScheduler backfills first come, first served whatever the queue's policy); jobs
    submitted at the same time keep their queue order (RLScheduler's sort is stable)."""
    interval_s: float | None = None
    """Run the backfill walk at most once per ``interval_s`` of time, as Slurm's ``bf_interval``
    (its default: 30 s); cycles in between start jobs in queue order up to the first of each lane
    that cannot start, as Slurm's main scheduler does. None (the default): a backfill walk every
    cycle, the reference behaviour. On a busy cluster, where events come seconds apart, most
    cycles then skip the walk (docs/simulator.md, "Periodic backfill", has the cost in metrics)."""

    max_job_test: int | None = None
    """Most waiting jobs one backfill walk tries (starving ones first, then in queue order), as
    Slurm's ``bf_max_job_test`` (its default: 100); the rest wait untried until a walk reaches
    them, with a status that says so. Bounds a walk's cost on a long queue. None (the default):
    every waiting job, the reference behaviour."""

    def __post_init__(self) -> None:
        if self.depth < 1:
            raise ValueError(f"depth must be >= 1, got {self.depth}")
        if self.history_jobs < 1:
            raise ValueError(f"history_jobs must be >= 1, got {self.history_jobs}")
        if self.max_starving < 0:
            raise ValueError(f"max_starving must be >= 0, got {self.max_starving}")
        if self.early_ends is not None and not 1.0 <= self.early_ends < float("inf"):
            raise ValueError(f"early_ends must be >= 1 and finite (or null), got {self.early_ends}")
        if self.interval_s is not None and not 0.0 < self.interval_s < float("inf"):
            raise ValueError(f"interval_s must be > 0 and finite (or null), got {self.interval_s}")
        if self.max_job_test is not None and self.max_job_test < 1:
            raise ValueError(f"max_job_test must be >= 1 (or null), got {self.max_job_test}")


class Backfill(ReservePlugin):
    """Decides who reserves and how long jobs are expected to run; the ``backfill`` action does the rest."""

    name = "backfill"
    Args = BackfillArgs

    def __init__(self, args: BackfillArgs | None = None) -> None:
        super().__init__(args)
        self.settings: BackfillArgs = args or BackfillArgs()
        self.max_starving_per_cycle = self.settings.max_starving
        self.ends_before_reservations = self.settings.end_before_reservation
        self.backfill_by_submission = self.settings.submission_order
        # The time limit and no early ends: a running job's expected end never changes.
        self.fixed_running_estimates = self.settings.estimate == "limit" and self.settings.early_ends is None
        self.reservations_per_lane = 1 if self.settings.mode == "easy" else self.settings.depth
        self.pass_interval_s = self.settings.interval_s
        self.max_jobs_per_walk = self.settings.max_job_test

    def wants_reservation(self, pending: PendingJob, held: int, ctx: CycleContext) -> bool:
        return held < (1 if self.settings.mode == "easy" else self.settings.depth)

    def starving(self, pending: PendingJob, ctx: CycleContext) -> bool:
        guard = self.settings.starvation_s
        return guard is not None and ctx.now - pending.job.submit_s >= guard

    def estimate_s(self, job: Job, ctx: CycleContext) -> float:
        if self.settings.estimate == "limit":
            return job.time_limit_s
        recent = ctx.snapshot.recent_runtimes_s.get(job.user, ())[-self.settings.history_jobs :]
        if not recent:
            return job.time_limit_s
        return min(sum(recent) / len(recent), job.time_limit_s)

    def running_estimate_s(self, running: RunningJob, ctx: CycleContext) -> float:
        whole = self.estimate_s(running.job, ctx)
        factor = self.settings.early_ends
        if factor is None:
            return whole
        elapsed = max(ctx.now - running.start_s, 0.0)
        return min(whole, max(whole / factor, EARLY_END_GROWTH * elapsed, elapsed + EARLY_END_MARGIN_S))
