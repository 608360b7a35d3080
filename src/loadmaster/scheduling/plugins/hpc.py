"""f1, wfp3, unicep: the HPC queue-ordering heuristics of the RLScheduler table (SC'20).

Each scores a job from its requested time ``r`` (``time_limit_s``), its size
``n`` (total GPUs, the "processors" of the HPC papers), its submit time ``s``
and its wait ``w = now - s``; the lowest score goes first. They are the
published baselines a learned scheduler is compared with, so they are kept
exactly as defined there, including a way to reproduce the reference code.

The reference code computes the wait as ``scheduled_time - submit_time``
while ``scheduled_time`` is still -1 for queued jobs, so the published WFP3
and UNICEP numbers were in fact produced with ``w = -1 - s``.
``reference_quirk=True`` reproduces that (and evaluates the reference
expression verbatim); the default is the textbook definition.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

from loadmaster.model import Job
from loadmaster.scheduling.framework import CycleContext, OrderPlugin

_REFERENCE_EPSILON = 1e-15
"""The reference code's guard against log2(1) = 0 and a zero wait in UNICEP."""


@dataclass(frozen=True, slots=True)
class F1Args:
    strict: bool = False
    """Block the queue behind a head job that cannot start (the reference protocol without backfilling)."""
    commit: bool = False
    """Keep the job chosen as head first until it starts, even if a job with a lower key arrives
    meanwhile (the RLScheduler loop commits to the job it picked; False: re-sort every cycle)."""


@dataclass(frozen=True, slots=True)
class QuirkArgs:
    strict: bool = False
    """Block the queue behind a head job that cannot start (the reference protocol without backfilling)."""
    commit: bool = False
    """Keep the job chosen as head first until it starts, even if a job with a lower key arrives
    meanwhile (the RLScheduler loop commits to the job it picked; False: re-sort every cycle)."""
    reference_quirk: bool = False
    """Use the reference code's wait ``-1 - submit_s`` (the published table) instead of ``now - submit_s``."""


def wait_s(job: Job, now: float, reference_quirk: bool) -> float:
    """The job's wait: ``now - submit_s``, or the reference code's ``-1 - submit_s``."""
    return -1.0 - job.submit_s if reference_quirk else now - job.submit_s


def f1_score(job: Job) -> float:
    """F1 = log10(r) * n + 870 * log10(max(s, 1)); max keeps the log defined for s = 0."""
    return math.log10(job.time_limit_s) * job.gpus + 870.0 * math.log10(max(job.submit_s, 1.0))


def wfp3_score(job: Job, wait: float) -> float:
    """WFP3 = -(w / r)^3 * n: long waits relative to the request, and large jobs, go first."""
    return -((wait / job.time_limit_s) ** 3) * job.gpus


def unicep_score(job: Job, wait: float) -> float:
    """UNICEP = -w / (log2(max(n, 2)) * log10(max(r, 10))).

    The guards keep both logarithms at 1 or more: a 1-GPU (or fractional)
    job counts as 2 GPUs and a request under 10 s as 10 s, so the score never
    divides by zero or flips sign.
    """
    return -wait / (math.log2(max(job.gpus, 2.0)) * math.log10(max(job.time_limit_s, 10.0)))


def unicep_reference_score(job: Job, wait: float) -> float:
    """The reference code's expression: -(w + 1e-15) / (log2(n + 1e-15) * r), unguarded."""
    eps = _REFERENCE_EPSILON
    return -(wait + eps) / (math.log2(job.gpus + eps) * job.time_limit_s)


class F1(OrderPlugin):
    """Key = (F1 score, submit time, id); F1 = log10(r) * n + 870 * log10(max(s, 1)).

    A formula found by regression on simulated schedules (Carastan-Santos and
    de Camargo, SC'17): small, short, early jobs first.
    """

    name = "f1"
    Args = F1Args

    def __init__(self, args: F1Args | None = None) -> None:
        super().__init__(args)
        settings = args or F1Args()
        self.strict = settings.strict
        self.commits_head = settings.commit

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        return (f1_score(job), job.submit_s, job.id)


class _QuirkOrder(OrderPlugin):
    """An order plugin that can reproduce the reference code's wait quirk."""

    Args = QuirkArgs

    def __init__(self, args: QuirkArgs | None = None) -> None:
        super().__init__(args)
        settings = args or QuirkArgs()
        self.strict = settings.strict
        self.commits_head = settings.commit
        self.reference_quirk = settings.reference_quirk


class Wfp3(_QuirkOrder):
    """Key = (WFP3 score, submit time, id); WFP3 = -(w / r)^3 * n.

    Favours jobs that have waited long relative to their requested time, and
    large jobs, so that they are not starved (Tang et al., IPDPS'09).
    """

    name = "wfp3"

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        wait = wait_s(job, ctx.now, self.reference_quirk)
        return (wfp3_score(job, wait), job.submit_s, job.id)


class Unicep(_QuirkOrder):
    """Key = (UNICEP score, submit time, id); UNICEP = -w / (log2(max(n, 2)) * log10(max(r, 10))).

    Favours long waits, with a mild (logarithmic) preference for small and
    short jobs. With ``reference_quirk`` the key is the reference code's
    ``-(w + 1e-15) / (log2(n + 1e-15) * r)`` with ``w = -1 - s`` instead,
    which is what the published table measured.
    """

    name = "unicep"

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        wait = wait_s(job, ctx.now, self.reference_quirk)
        score = unicep_reference_score(job, wait) if self.reference_quirk else unicep_score(job, wait)
        return (score, job.submit_s, job.id)
