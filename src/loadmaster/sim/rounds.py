"""Gavel's round-based scheduling mechanism on a cluster of several GPU types.

The allocation a policy computes (``loadmaster.scheduling.plugins.gavel``) is
a fraction of time per job and GPU type; Gavel (OSDI'20, section 5; simulator
``scheduler/scheduler.py:simulate``, stanford-futuredata/gavel commit
``c4fa400``) realises it in rounds. This module follows that simulator:

* **Rounds.** Each round every scheduled job runs ``min(int(steps/s x
  round_s), steps left)`` steps at the speed of its GPU type (a job of ``s``
  workers holds ``s`` GPUs of one type). The round ends when its slowest
  job does, jobs that finish earlier end then; arrivals enter at round ends;
  with nothing running, time jumps to the next arrival.
* **Which jobs run.** A job's priority on a type is its allocation divided by
  the share of that type's time it has had since the last reset (Gavel's
  ``_update_priorities``; every job starts with half a round). Per type, in
  the order the cluster lists its types (Gavel: v100, p100, k80), jobs in
  decreasing (priority, deficit, allocation) take GPUs while they fit, each
  job once per round; a job that cannot run on a type (0 steps/s) is skipped.
* **When the allocation is recomputed.** When the job set has changed and at
  least ``reset_interval_s`` (Gavel: 1,920 s) passed since the last
  recomputation, or at the first, or when the queue is empty and nothing runs.
  The shares are then reset and the time a job should have had but did not
  is added to its deficit (the tie-break). A job that arrives between
  recomputations has no allocation yet: like Gavel, it is still picked with
  priority 0 when GPUs are left, holds them for the round, but does not run.
* **Quirk kept.** A round's duration counted into the shares runs from the
  previous round's end, so an idle gap before a round counts as time run.

Average JCT is the mean of finish - arrival; makespan is the last round's end.
"""

from __future__ import annotations

import heapq
import itertools
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field

import numpy as np

from loadmaster.errors import SimulationError
from loadmaster.model.hetero import HeteroCluster, StepJob, ThroughputTable
from loadmaster.scheduling.plugins.gavel import AllocationInput, RoundPolicy


@dataclass(frozen=True)
class RoundOptions:
    """Gavel's mechanism settings (their simulator's defaults)."""

    round_s: float = 360.0
    """Length of a round (Gavel's ``--time_per_iteration``, 6 minutes)."""
    reset_interval_s: float = 1920.0
    """Least time between two recomputations (Gavel's ``minimum_time_between_allocation_resets``)."""


@dataclass(frozen=True)
class RoundResult:
    """The outcome of a round-based run."""

    jct_s: dict[int, float]
    end_s: dict[int, float]
    makespan_s: float
    rounds: int
    recomputations: int

    @property
    def avg_jct_s(self) -> float:
        return float(np.mean(list(self.jct_s.values()))) if self.jct_s else 0.0


@dataclass
class _Active:
    job: StepJob
    rates: tuple[float, ...]
    """Steps/s on each GPU type, in the cluster's round order."""
    steps_done: int = 0
    time_on: list[float] = field(default_factory=list)
    latest_end_s: float = 0.0


@dataclass
class _State:
    types: tuple[str, ...]
    """GPU types in round order (the cluster's listing order)."""
    gpus: tuple[int, ...]
    """GPUs of each type, in the same order."""
    active: dict[int, _Active] = field(default_factory=dict)
    type_time: list[float] = field(default_factory=list)
    deficit: list[dict[int, float]] = field(default_factory=list)
    allocation: dict[int, tuple[float, ...]] = field(default_factory=dict)
    changed: bool = False
    last_reset_s: float = 0.0
    recomputations: int = 0
    jct_s: dict[int, float] = field(default_factory=dict)
    end_s: dict[int, float] = field(default_factory=dict)


def simulate_rounds(
    jobs: Sequence[StepJob],
    cluster: HeteroCluster,
    table: ThroughputTable,
    policy: RoundPolicy,
    *,
    options: RoundOptions | None = None,
    progress: Callable[[int, int], None] | None = None,
) -> RoundResult:
    """Run ``jobs`` (arrival order) through ``policy`` in Gavel's rounds.

    ``progress(done, total)`` is called after every round.
    """
    opts = options or RoundOptions()
    order = tuple(cluster.gpus)
    if any(b.arrival_s < a.arrival_s for a, b in itertools.pairwise(jobs)):
        raise SimulationError("jobs must be in arrival order (Gavel's simulator asserts it too)")
    rates = {j.job_id: table.rates(j.key, order) for j in jobs}
    for job in jobs:
        if max(rates[job.job_id]) <= 0:
            raise SimulationError(f"job {job.job_id} ({job.job_type}) runs on none of {order}")
    state = _State(
        order,
        tuple(int(cluster.gpus[t]) for t in order),
        type_time=[0.0] * len(order),
        deficit=[{} for _ in order],
    )
    queue = list(jobs)
    running: list[tuple[float, int, int, int]] = []  # (-end, job, type index, steps)
    jct, end = state.jct_s, state.end_s
    now = jobs[0].arrival_s if jobs else 0.0
    round_start: float = 0.0
    round_end: float | None = None
    rounds = stuck = 0
    while len(jct) < len(jobs):
        if not queue and not running:
            state.last_reset_s = 0.0
        if running:
            latest = -running[0][0]
            if round_end is not None:
                round_start = round_end
            round_end = now = latest
        elif queue:
            now = queue[0].arrival_s
        while running:
            _finish_micro_task(state, heapq.heappop(running), round_start)
        while queue and queue[0].arrival_s <= now:
            _add(state, queue.pop(0), rates, opts)
        for job_id, kind in _pick(state, now, policy, opts):
            active = state.active[job_id]
            rate = active.rates[kind]
            steps = min(int(rate * opts.round_s), active.job.total_steps - active.steps_done)
            if steps <= 0:  # Gavel's loop would spin forever on such a job
                raise SimulationError(
                    f"job {job_id}: {rate} steps/s on {state.types[kind]} is under one step per"
                    f" {opts.round_s} s round"
                )
            heapq.heappush(running, (-(now + steps / rate), job_id, kind, steps))
        rounds += 1 if running else 0
        if progress is not None:
            progress(len(jct), len(jobs))
        # Idle with jobs left: the next pass forces a recomputation (as Gavel's loop does); a
        # second idle pass in a row means no job can ever run.
        stuck = stuck + 1 if not running and not queue and len(jct) < len(jobs) else 0
        if stuck > 1:
            raise SimulationError(
                f"at {now:.0f} s no job can run and none is coming ({len(jct)}/{len(jobs)} done)"
            )
    return RoundResult(jct, end, now, rounds, state.recomputations)


def _add(state: _State, job: StepJob, rates: dict[int, tuple[float, ...]], opts: RoundOptions) -> None:
    if job.job_id in state.active:
        raise SimulationError(f"job id {job.job_id} appears twice")
    state.active[job.job_id] = _Active(job, rates[job.job_id], time_on=[opts.round_s / 2] * len(state.types))
    for deficits in state.deficit:
        deficits[job.job_id] = 0.0
    state.changed = True


def _finish_micro_task(state: _State, task: tuple[float, int, int, int], round_start: float) -> None:
    """Gavel's ``_done_callback`` for one job's round: steps and time counted, the job removed when done."""
    neg_end, job_id, kind, steps = task
    end_s = -neg_end
    active = state.active[job_id]
    active.latest_end_s = end_s
    active.steps_done += steps
    ran = end_s - round_start
    active.time_on[kind] += ran
    state.type_time[kind] += ran
    if active.steps_done >= active.job.total_steps:
        del state.active[job_id]
        for deficits in state.deficit:
            del deficits[job_id]
        state.jct_s[job_id] = end_s - active.job.arrival_s
        state.end_s[job_id] = end_s
        state.changed = True


def _reset(state: _State, now: float, policy: RoundPolicy, opts: RoundOptions) -> None:
    """Gavel's ``_reset_time_run_so_far`` then a recomputation of the allocation."""
    elapsed = now - state.last_reset_s
    half = opts.round_s / 2
    for kind in range(len(state.types)):
        state.type_time[kind] = 0.0
        for job_id, active in state.active.items():
            should = state.allocation[job_id][kind] * elapsed if job_id in state.allocation else 0.0
            state.deficit[kind][job_id] += should - (active.time_on[kind] - half)
            active.time_on[kind] = half
            state.type_time[kind] += half
    state.last_reset_s = now
    state.allocation = _allocate(state, now, policy)
    state.changed = False
    state.recomputations += 1


def _allocate(state: _State, now: float, policy: RoundPolicy) -> dict[int, tuple[float, ...]]:
    """The policy's allocation, with jobs in id order and types in name order as Gavel flattens them."""
    ids = tuple(sorted(state.active))
    if not ids:
        return {}
    columns = sorted(range(len(state.types)), key=lambda k: state.types[k])
    jobs = [state.active[i] for i in ids]
    view = AllocationInput(
        job_ids=ids,
        throughputs=np.array([[a.rates[k] for k in columns] for a in jobs], dtype=np.float64),
        scale_factors=np.array([a.job.scale_factor for a in jobs], dtype=np.float64),
        priority_weights=np.array([a.job.priority_weight for a in jobs], dtype=np.float64),
        workers=np.array([state.gpus[k] for k in columns], dtype=np.float64),
        steps_remaining=np.array([a.job.total_steps - a.steps_done for a in jobs], dtype=np.float64),
        since_arrival_s=np.array([now - a.job.arrival_s for a in jobs], dtype=np.float64),
    )
    matrix = policy.allocate(view)
    result: dict[int, tuple[float, ...]] = {}
    for row, job_id in enumerate(ids):
        by_kind = [0.0] * len(state.types)
        for col, kind in enumerate(columns):
            by_kind[kind] = float(matrix[row, col])
        result[job_id] = tuple(by_kind)
    return result


def _pick(state: _State, now: float, policy: RoundPolicy, opts: RoundOptions) -> list[tuple[int, int]]:
    """The (job, type) pairs that run this round (Gavel's ``_schedule_jobs_on_workers``)."""
    since = now - state.last_reset_s
    if state.changed and (since >= opts.reset_interval_s or state.last_reset_s == 0):
        _reset(state, now, policy, opts)
    left = list(state.gpus)
    queue: list[tuple[int, int, float]] = []
    for kind in range(len(state.types)):
        entries = []
        for job_id, active in state.active.items():
            priority = _priority(state, job_id, active, kind)
            share = state.allocation[job_id][kind] if job_id in state.allocation else 0.0
            entries.append((job_id, priority, state.deficit[kind][job_id], share))
        entries.sort(key=lambda e: (e[1], e[2], e[3]), reverse=True)
        queue.extend((e[0], kind, e[1]) for e in entries)
    taken: set[int] = set()
    picked: list[tuple[int, int]] = []
    for job_id, kind, priority in queue:
        active = state.active[job_id]
        if left[kind] == 0 or job_id in taken or active.rates[kind] <= 0:
            continue
        if policy.strict and priority <= 0:
            continue
        if active.job.scale_factor > left[kind]:
            continue
        left[kind] -= active.job.scale_factor
        taken.add(job_id)
        if job_id in state.allocation:
            picked.append((job_id, kind))
    return picked


def _priority(state: _State, job_id: int, active: _Active, kind: int) -> float:
    if job_id not in state.allocation:
        return 0.0
    share = state.allocation[job_id][kind]
    if share == 0.0 or active.rates[kind] == 0:
        return 0.0
    total = state.type_time[kind]
    fraction = active.time_on[kind] / total if total != 0.0 else 0.0
    return share / fraction if fraction > 0.0 else share * 1e9
