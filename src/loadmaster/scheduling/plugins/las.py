"""las: Tiresias' discretised least-attained-service orders (Gu et al., NSDI'19), and its preemption.

A job's attained service is what it has run so far: GPUs x seconds (``las``,
the paper's two-dimensional 2D-LAS) or seconds alone (``las-time``, the 1D
variant). Thresholds split it into priority queues: a job starts in queue 0
and is demoted to queue ``k`` once its service reaches ``thresholds[k-1]``.
Jobs are served queue by queue, first come first served within a queue, a
job that does not fit letting later ones start (Tiresias' simulator skips it).
First come within a queue means by the time the job entered it: its arrival
for queue 0, the moment its service crossed the threshold for a lower one
(Tiresias appends a demoted job to its new queue). The plugin remembers that
moment per job once seen (one float per demoted job).
``gittins`` orders the jobs of a queue by their Gittins index given a
distribution of job GPU-times (the paper's Discretized 2D-Gittins), highest
first. ``las-preempt`` lets a waiting job evict running jobs of a strictly
lower-priority queue, lowest queue first and, within one, the latest comer
(the job Tiresias' scan reaches last); the ``preempt`` action evicts whole gangs.

Starvation: with ``promote_knob`` > 0, a job that has waited since its last
run stopped for ``promote_knob`` times the service it had attained goes back
to queue 0 while it waits (the paper's STARVELIMIT / PromoteKnob).

Attained service before the current run comes from ``ClusterSnapshot.service_s``
(a driver that resumes preempted jobs keeps it: ``SimOptions.resume_preempted``);
the running part is ``now - start_s``. Keys change with time alone when a
running job crosses a threshold, so the plugins ask the driver for a cycle
then (``wake_s``), as Tiresias' simulator makes a "job jump" event.
"""

from __future__ import annotations

import bisect
import math
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np

from loadmaster.model import MILLI_PER_GPU, ClusterSnapshot, Job, PendingJob, RunningJob
from loadmaster.scheduling.framework import AdmitPlugin, CycleContext, OrderPlugin, VictimPlugin
from loadmaster.scheduling.status import SUCCESS, Status, wait

TIRESIAS_THRESHOLDS = (3250.0, 7200.0)
"""Queue limits of Tiresias' simulator (``jobs.py``: ``num_queue = 3``, so two of
``queue_limit = [3250, 7200, 18000]`` are used), in GPU-seconds for 2D-LAS."""


@dataclass(frozen=True, slots=True)
class LasArgs:
    thresholds: tuple[float, ...] = TIRESIAS_THRESHOLDS
    """Attained service (GPU-seconds for ``las``, seconds for ``las-time``) at which a job moves
    to the next queue; n thresholds make n + 1 queues. Strictly increasing, positive."""
    promote_knob: float = 0.0
    """A waiting job goes back to queue 0 once it has waited ``promote_knob`` times the service it
    attained (starvation promotion); 0: never."""
    tiresias_wake: bool = False
    """Ask for the next cycle when Tiresias' simulator makes its "job jump" event:
    ``(threshold - attained seconds) / GPUs`` after now, in Python 2's integer division (its
    ``math.ceil`` of an int quotient rounds nothing), a formula that subtracts seconds from
    GPU-seconds, so it sees a demotion late unless another event comes first. Only for reproducing
    its numbers; False: at the exact crossing."""

    def __post_init__(self) -> None:
        if any(t <= 0 for t in self.thresholds) or list(self.thresholds) != sorted(set(self.thresholds)):
            raise ValueError(
                f"las: thresholds must be positive and strictly increasing, got {self.thresholds}"
            )
        if self.promote_knob < 0:
            raise ValueError(f"las: promote_knob must be >= 0, got {self.promote_knob}")


def _weight(job: Job, by_gpus: bool) -> float:
    return max(job.tasks * job.request.gpu_milli / MILLI_PER_GPU, 1.0) if by_gpus else 1.0


class Las(OrderPlugin):
    """Key = (queue by attained GPU-seconds, submit time, id)."""

    name = "las"
    Args = LasArgs
    by_gpus = True
    wakes = True

    def __init__(self, args: LasArgs | None = None) -> None:
        super().__init__(args)
        self.settings: LasArgs = args or LasArgs()
        self._entered: dict[str, tuple[int, float]] = {}
        self._clock = -math.inf

    def observe(self, now: float) -> None:
        """Forget what was remembered of another run: simulated time went backwards (a profile
        reused for a new run). One instance serves one run at a time."""
        if now < self._clock:
            self._entered.clear()
        self._clock = now

    def attained(
        self, job: Job, snapshot: ClusterSnapshot, now: float, running: RunningJob | None = None
    ) -> float:
        """Service ``job`` has attained by ``now``: before its current run, plus the run so far."""
        ran = snapshot.service_s.get(job.id, (0.0, now, 0.0))[0]
        if running is not None:
            ran += now - running.start_s
        return ran * _weight(job, self.by_gpus)

    def queue_of(
        self, job: Job, snapshot: ClusterSnapshot, now: float, running: RunningJob | None = None
    ) -> int:
        """The priority queue ``job`` is in at ``now`` (0 is served first)."""
        if running is None and job.id not in snapshot.service_s:
            return 0  # waiting and never ran: nothing attained (most of a queue; the fast path)
        queue = bisect.bisect_right(self.settings.thresholds, self.attained(job, snapshot, now, running))
        if running is None and queue > 0 and self._starved(job, snapshot, now):
            return 0
        return queue

    def _starved(self, job: Job, snapshot: ClusterSnapshot, now: float) -> bool:
        knob = self.settings.promote_knob
        kept = snapshot.service_s.get(job.id)
        return knob > 0 and kept is not None and kept[0] > 0 and now - kept[1] >= knob * kept[0]

    def entered_s(self, job: Job, queue: int, snapshot: ClusterSnapshot) -> float:
        """When waiting ``job`` entered ``queue``: FIFO within a queue is by this time."""
        kept = snapshot.service_s.get(job.id)
        if kept is None:
            return job.submit_s
        ran, stopped, last = kept
        if queue == 0:
            demoted = ran * _weight(job, self.by_gpus) >= self.settings.thresholds[0]
            return stopped + self.settings.promote_knob * ran if demoted else job.submit_s
        known = self._entered.get(job.id)
        if known is not None and known[0] == queue:
            return known[1]
        weight, threshold = _weight(job, self.by_gpus), self.settings.thresholds[queue - 1]
        before = ran - last
        # Crossed during its last run (else earlier: the start of that run is the best bound left).
        entered = stopped - last + max(threshold / weight - before, 0.0)
        self._entered[job.id] = (queue, entered)
        return entered

    def running_entered_s(self, running: RunningJob, queue: int, snapshot: ClusterSnapshot) -> float:
        """When running ``running`` entered ``queue``: during this run, or at its start if before."""
        if queue == 0:
            return self.entered_s(running.job, 0, snapshot)
        known = self._entered.get(running.job.id)
        if known is not None and known[0] == queue:
            return known[1]
        prior = snapshot.service_s.get(running.job.id, (0.0, 0.0, 0.0))[0]
        threshold = self.settings.thresholds[queue - 1] / _weight(running.job, self.by_gpus)
        return running.start_s + max(threshold - prior, 0.0)

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        self.observe(ctx.now)
        queue = self.queue_of(job, ctx.snapshot, ctx.now)
        return (queue, self.entered_s(job, queue, ctx.snapshot), job.submit_s, job.id)

    def wake_s(self, snapshot: ClusterSnapshot, now: float) -> float:
        """The next demotion of a running job, or promotion of a waiting one."""
        wake = math.inf
        for running in snapshot.running:
            attained = self.attained(running.job, snapshot, now, running)
            nxt = bisect.bisect_right(self.settings.thresholds, attained)
            if nxt < len(self.settings.thresholds):
                rate = _weight(running.job, self.by_gpus)
                if self.settings.tiresias_wake:
                    seconds = attained / rate
                    wake = min(wake, now + (self.settings.thresholds[nxt] - seconds) // rate)
                else:
                    wake = min(wake, now + (self.settings.thresholds[nxt] - attained) / rate)
        if self.settings.promote_knob > 0:
            for pending in snapshot.pending:
                kept = snapshot.service_s.get(pending.job.id)
                if kept is not None and kept[0] > 0 and self.queue_of(pending.job, snapshot, now) > 0:
                    wake = min(wake, kept[1] + self.settings.promote_knob * kept[0])
        return wake


class LasTime(Las):
    """Key = (queue by attained seconds, whatever the job's GPUs, submit time, id): 1D LAS."""

    name = "las-time"
    by_gpus = False


@dataclass(frozen=True, slots=True)
class GittinsArgs:
    samples: tuple[float, ...] = ()
    """GPU-seconds of past jobs: the distribution the index is computed from (Tiresias ships
    ``yarn-gput1000.csv``). Required."""
    quantum: float = 3250.0
    """Service Δ the index looks ahead: a job's chance to finish within Δ over its expected
    service within Δ (Tiresias' ``gittins_delta``)."""
    thresholds: tuple[float, ...] = TIRESIAS_THRESHOLDS
    """Queue limits as for ``las``; the index orders jobs within a queue."""

    def __post_init__(self) -> None:
        if not self.samples or any(s <= 0 for s in self.samples):
            raise ValueError("gittins: samples must list the positive GPU-seconds of past jobs")
        if self.quantum <= 0:
            raise ValueError(f"gittins: quantum must be > 0, got {self.quantum}")
        LasArgs(self.thresholds)


class Gittins(Las):
    """Key = (queue by attained GPU-seconds, minus the Gittins index, submit time, id)."""

    name = "gittins"
    Args = GittinsArgs  # type: ignore[assignment]

    def __init__(self, args: GittinsArgs | None = None) -> None:
        if args is None:
            raise ValueError("gittins: needs samples (a distribution of job GPU-seconds)")
        super().__init__(LasArgs(args.thresholds))
        self.quantum = args.quantum
        self.sorted = np.sort(np.asarray(args.samples, dtype=float))
        self.suffix = np.concatenate([np.cumsum(self.sorted[::-1])[::-1], [0.0]])

    def index(self, attained: float) -> float:
        """P(S - a <= Δ | S > a) / E[min(S - a, Δ) | S > a] for service S drawn from the samples."""
        data, n = self.sorted, len(self.sorted)
        first = int(np.searchsorted(data, attained, side="right"))
        if first >= n:
            return 0.0  # longer than every sample: nothing to expect, served last in its queue
        last = int(np.searchsorted(data, attained + self.quantum, side="right"))
        left = n - first
        finish = (last - first) / left
        within = (self.suffix[first] - self.suffix[last]) - attained * (last - first)
        expected = (within + self.quantum * (n - last)) / left
        return float(finish / expected)

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        attained = self.attained(job, ctx.snapshot, ctx.now)
        return (self.queue_of(job, ctx.snapshot, ctx.now), -self.index(attained), job.submit_s, job.id)


@dataclass(frozen=True, slots=True)
class LasPreemptArgs:
    thresholds: tuple[float, ...] = TIRESIAS_THRESHOLDS
    """The same queue limits as the order plugin's."""
    gpu_time: bool = True
    """Attained service in GPU-seconds (2D-LAS); False: seconds (1D)."""


class LasPreempt(VictimPlugin):
    """Eligible victims: running jobs in a strictly lower-priority queue; lowest queue, then latest first."""

    name = "las-preempt"
    Args = LasPreemptArgs

    def __init__(self, args: LasPreemptArgs | None = None) -> None:
        super().__init__(args)
        settings: LasPreemptArgs = args or LasPreemptArgs()
        self.las: Las = (
            Las(LasArgs(settings.thresholds)) if settings.gpu_time else LasTime(LasArgs(settings.thresholds))
        )

    def select_victims(
        self, pending: PendingJob, running: Sequence[RunningJob], ctx: CycleContext
    ) -> Sequence[RunningJob]:
        ranked = self._ranked(ctx)
        present = {r.job.id for r in running}
        served = ctx.data.get(LasCount.name)
        if isinstance(served, frozenset):
            # las-count's plan decides: every running job it does not serve gives way, whatever its
            # queue, as Tiresias stops each of them (the waiting job is one the plan serves).
            eligible = [r for _, r in ranked if r.job.id in present and r.job.id not in served]
        else:
            mine = self.las.queue_of(pending.job, ctx.snapshot, ctx.now)
            eligible = [r for q, r in ranked if q > mine and r.job.id in present]
        # Fewer GPUs free with every eligible victim gone than the job needs: evicting cannot help,
        # so say so now rather than let the preempt action try placements that must fail.
        freed = sum(p.gpu_milli * len(p.gpu_indices) for r in eligible for p in r.placements)
        if freed + int(ctx.state.free_milli.sum()) < pending.job.gpu_milli:
            return []
        return eligible

    def _ranked(self, ctx: CycleContext) -> list[tuple[int, RunningJob]]:
        """Every running job with its queue, preferred victim first; computed once per cycle."""
        cached = ctx.data.get(self.name)
        if isinstance(cached, list):
            return cached
        snapshot, now = ctx.snapshot, ctx.now
        ranked = [(self.las.queue_of(r.job, snapshot, now, r), r) for r in snapshot.running]
        ranked.sort(key=lambda qr: (-qr[0], -qr[1].job.submit_s, qr[1].job.id))
        ctx.data[self.name] = ranked
        return ranked


@dataclass(frozen=True, slots=True)
class LasCountArgs:
    thresholds: tuple[float, ...] = TIRESIAS_THRESHOLDS
    """The same queue limits as the order plugin's."""
    gpu_time: bool = True
    """Attained service in GPU-seconds (2D-LAS); False: seconds (1D)."""


class LasCount(AdmitPlugin):
    """Tiresias' allocation rule: which jobs the LAS priority serves from the cluster's GPU count.

    Every cycle it walks all jobs, running and waiting, queue by queue; within a
    queue running jobs first, then waiting ones, each by the time it entered the
    queue; each job that still fits in the GPUs left of the cluster's total takes
    them, one that does not is skipped (``dlas_sim_jobs``). A waiting job is
    admitted only if served; with ``las-preempt``, only running jobs not served
    may be evicted. Where tasks may go on any node (one-GPU tasks) this is
    Tiresias exactly; with placement constraints a served job may still not fit.
    """

    name = "las-count"
    Args = LasCountArgs

    def __init__(self, args: LasCountArgs | None = None) -> None:
        super().__init__(args)
        settings: LasCountArgs = args or LasCountArgs()
        queues = LasArgs(settings.thresholds)
        self.las: Las = Las(queues) if settings.gpu_time else LasTime(queues)
        self._last_cycle_s = -math.inf

    def admit(self, pending: PendingJob, ctx: CycleContext) -> Status:
        if pending.job.id in self.served(ctx):
            return SUCCESS
        return wait("las-count: higher-priority jobs hold the GPUs it needs", self.name)

    def served(self, ctx: CycleContext) -> frozenset[str]:
        """Ids of the jobs the rule serves this cycle (computed once per cycle)."""
        cached = ctx.data.get(self.name)
        if isinstance(cached, frozenset):
            return cached
        snapshot, now, las = ctx.snapshot, ctx.now, self.las
        if now < self._last_cycle_s:
            self._last_cycle_s = -math.inf  # a new run (see Las.observe)
        las.observe(now)
        ranked: list[tuple[int, int, float, float, str, float]] = []
        for r in snapshot.running:
            queue = las.queue_of(r.job, snapshot, now, r)
            entered = las.running_entered_s(r, queue, snapshot)
            # A job that entered its queue since the last cycle is appended behind the waiting ones
            # (Tiresias moves waiting jobs behind running ones only at the end of each event).
            late = 2 if queue > 0 and entered > self._last_cycle_s else 0
            ranked.append((queue, late, entered, r.job.submit_s, r.job.id, r.job.gpus))
        for p in snapshot.pending:
            queue = las.queue_of(p.job, snapshot, now)
            ranked.append(
                (queue, 1, las.entered_s(p.job, queue, snapshot), p.job.submit_s, p.job.id, p.job.gpus)
            )
        ranked.sort()
        left = float(np.count_nonzero(snapshot.nodes.gpu_exists()))
        served = []
        for *_, job_id, gpus in ranked:
            if gpus <= left:
                served.append(job_id)
                left -= gpus
        plan = frozenset(served)
        ctx.data[self.name] = plan
        self._last_cycle_s = now
        return plan


LAS_PLUGINS = {
    "las": Las,
    "las-time": LasTime,
    "gittins": Gittins,
    "las-preempt": LasPreempt,
    "las-count": LasCount,
}
"""The Tiresias family, for the registry's table."""
