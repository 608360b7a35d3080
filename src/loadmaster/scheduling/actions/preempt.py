"""preempt: evict the fewest eligible running jobs that let a waiting job start, then start it.

For each job still waiting (at most ``MAX_PREEMPTORS`` per cycle, in queue
order), the victim plugins name eligible running jobs, most preferred first.
The most preferred single victim that makes room is taken if there is one;
otherwise victims are added in that order until the job fits on the cluster
as it would be without them, then any victim the job can do without is
dropped again. So the fewest jobs are evicted, and among equals the most
preferred (lowest priority, then least work lost). A gang is evicted whole:
a victim is a whole job. A job with ``may_preempt`` False (Kubernetes
``preemptionPolicy: Never``) never preempts.
"""

from __future__ import annotations

import itertools
import operator
from collections.abc import Hashable, Iterator, Sequence

import numpy as np

from loadmaster.model import MILLI_PER_GPU, PendingJob, RunningJob, TaskPlacement, TaskRequest
from loadmaster.scheduling import fit
from loadmaster.scheduling.actions.allocate import (
    admit,
    allowed_nodes,
    known_refused,
    mask_content,
    state_content,
    try_place,
)
from loadmaster.scheduling.decisions import Preempt
from loadmaster.scheduling.framework import BoolArray
from loadmaster.scheduling.placement import Scoring, place_job
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.state import WorkingState
from loadmaster.scheduling.status import Status

MAX_PREEMPTORS = 8
"""Waiting jobs that may preempt in one cycle: bounds the cycle's cost; the rest try next cycle."""


def run(session: Session) -> None:
    """Preempt for waiting jobs in queue order; see the module docstring."""
    if not session.profile.victims:
        return
    evicted: set[str] = set()
    tried = 0
    scoring = Scoring(tuple(session.profile.scores))
    # One list object until an eviction changes it: victim plugins may remember what they
    # computed from it (quota sums each group's GPUs once, not once per waiting job).
    running = list(session.ctx.snapshot.running)
    asked = _Asked(session)
    for pending in _not_refused(session):
        if tried >= MAX_PREEMPTORS:
            return
        if pending.job.id in session.bound or not pending.job.may_preempt or not admit(session, pending).ok:
            continue
        candidates = asked.candidates(pending, running)
        if not candidates or _fits_now(session, pending, scoring):
            continue  # nobody to evict, or room enough already: it waits on something eviction cannot fix
        tried += 1
        victims = _fewest_remembered(session, pending, candidates, scoring)
        if victims:
            _evict(session, pending, victims, evicted)
            running = [r for r in running if r.job.id not in evicted]
            try_place(session, pending, scoring, session.ctx.state, ("preempt", pending.job.id))


def _not_refused(session: Session) -> Iterator[PendingJob]:
    """The queue in order, less jobs whose admission key admission already refused since the
    last bind: ``admit`` would refuse them again, so they cannot preempt (skipped per class of the
    walk's table, most of a long queue in every cycle, rather than asked one by one)."""
    known = known_refused(session)
    if known is None:
        yield from session.queue
        return
    items, refused = known
    start = 0
    while start < len(items):
        version = session.state_version
        selected = itertools.compress(range(start, len(items)), map(operator.not_, refused[start:]))
        start = len(items)
        for position in selected:
            yield items[position]
            if session.state_version != version:  # an eviction or a bind: ask again for the rest
                start = position + 1
                known = known_refused(session)
                if known is None:
                    yield from items[start:]
                    return
                refused = known[1]
                break


class _Asked:
    """:func:`_candidates` remembered by the victim plugins' keys (``VictimPlugin.victims_key``)
    while the state stays the same: a long queue has many jobs of one group and size, and each
    would otherwise ask every plugin again (most get no victim: their group holds its share)."""

    def __init__(self, session: Session) -> None:
        self.session = session
        self.keyed = all(plugin.keyed for plugin in session.profile.victims)
        self.version = session.state_version
        self.found: dict[tuple[Hashable, ...], list[RunningJob]] = {}

    def candidates(self, pending: PendingJob, running: list[RunningJob]) -> list[RunningJob]:
        session = self.session
        if not self.keyed:
            return _candidates(session, pending, running)
        key = tuple(plugin.victims_key(pending) for plugin in session.profile.victims)
        if None in key:
            return _candidates(session, pending, running)
        if session.state_version != self.version:  # a bind or an eviction (a new running list)
            self.version, self.found = session.state_version, {}
        found = self.found.get(key)
        if found is None:
            found = self.found[key] = _candidates(session, pending, running)
        return found


def _candidates(session: Session, pending: PendingJob, running: list[RunningJob]) -> list[RunningJob]:
    seen: dict[str, RunningJob] = {}
    for plugin in session.profile.victims:
        for victim in plugin.select_victims(pending, running, session.ctx):
            seen.setdefault(victim.job.id, victim)
    return list(seen.values())


def _fits_now(session: Session, pending: PendingJob, scoring: Scoring) -> bool:
    """``_fits_without`` no victims, remembered until the state changes, where the answer depends
    only on the state, the allowed nodes and the request (no topology plugin; scores that only
    read the state, so no random draw is skipped)."""
    if session.profile.place_gang is not None or not all(p.pure for p, _ in scoring.plugins):
        return _fits_without(session, pending, [], scoring)
    allowed = allowed_nodes(session, pending.job)
    if isinstance(allowed, Status):
        return False
    job, request = pending.job, pending.job.request
    key = (
        id(allowed),  # kept alive by Session.allowed for the cycle
        request.gpu_milli,
        request.cpu_milli,
        request.memory_mib,
        request.mig_profile,
        job.tasks,
        job.min_available,
        len(pending.bound),
    )
    hit = session.fits_now.get(key)
    if hit is not None and hit[0] == session.state_version:
        return hit[1]
    fits = _fits_without(session, pending, [], scoring)
    session.fits_now[key] = (session.state_version, fits)
    return fits


def _fits_without(
    session: Session, pending: PendingJob, victims: Sequence[RunningJob], scoring: Scoring
) -> bool:
    allowed = allowed_nodes(session, pending.job)
    if isinstance(allowed, Status):
        return False
    view: WorkingState = session.ctx.state.copy()
    for victim in victims:
        for placement in victim.placements:
            view.release(placement)
    with session.ctx.viewing(view):
        placed, status = place_job(pending, allowed, session.ctx, scoring, session.profile.place_gang)
    return status.ok or len(placed) >= pending.tasks_left


SINGLE_VICTIM_TRIES = 16
"""Candidates tried one at a time before victims are combined: one eviction beats several."""


def _fewest(
    session: Session, pending: PendingJob, candidates: list[RunningJob], scoring: Scoring
) -> list[RunningJob]:
    room = _Room.of(session, pending)

    def fits(victims: Sequence[RunningJob]) -> bool:
        # The count bound first: most single victims free GPUs on nodes the job cannot use.
        return (room is None or room.enough_without(victims)) and _fits_without(
            session, pending, victims, scoring
        )

    for victim in candidates[:SINGLE_VICTIM_TRIES]:
        if fits([victim]):
            return [victim]
    chosen: list[RunningJob] = []
    for victim in candidates:
        chosen.append(victim)
        if fits(chosen):
            break
    else:
        return []
    for victim in reversed(chosen[:-1]):  # drop what the job can do without, least preferred first
        rest = [v for v in chosen if v is not victim]
        if fits(rest):
            chosen = rest
    return chosen


VICTIM_CHOICES_KEPT = 4096
"""Choices :func:`_fewest_remembered` keeps across cycles before it starts afresh."""


def _fewest_remembered(
    session: Session, pending: PendingJob, candidates: list[RunningJob], scoring: Scoring
) -> list[RunningJob]:
    """:func:`_fewest`, or the choice it made for the same inputs in an earlier cycle.

    The choice reads the cycle's free resources, the allowed nodes, the request and the tasks left,
    and the candidates in order with their placements; where scores only read the state and no
    topology plugin places gangs (as :func:`_fits_now` requires), nothing else, and no random draw
    is skipped. A job that waits on preemption asks it again in every cycle, and most cycles
    (arrivals, ends elsewhere) leave all of that as it was: ``fair`` on the lab demo asks 38,000
    times, 55% of them with inputs already seen. Candidates are keyed by job id and the identity
    of their placements, which the entry keeps alive (a run restarted gets new placements)."""
    memo, state = session.victim_choices, session.ctx.state
    if memo is None or state.mig is not None or session.profile.place_gang is not None or not scoring.pure:
        return _fewest(session, pending, candidates, scoring)
    allowed = allowed_nodes(session, pending.job)
    if isinstance(allowed, Status):
        return _fewest(session, pending, candidates, scoring)
    key = (
        state_content(session, state),
        mask_content(session, allowed),
        pending.job.request,
        pending.tasks_left,
        tuple((victim.job.id, id(victim.placements)) for victim in candidates),
    )
    found = memo.get(key)
    if found is not None:
        return [candidates[i] for i in found[0]]
    victims = _fewest(session, pending, candidates, scoring)
    if len(memo) >= VICTIM_CHOICES_KEPT:
        memo.clear()
    chosen = {id(victim): i for i, victim in enumerate(candidates)}
    memo[key] = (tuple(chosen[id(victim)] for victim in victims), [v.placements for v in candidates])
    return victims


class _Room:
    """How many tasks of a job the allowed nodes could take with some victims' resources given
    back, counted without copying the state: only the victims' nodes change.

    It bounds what placement can do (a task needs a node with room for it), so fewer than the
    job's remaining tasks means ``_fits_without`` would fail: the placement attempt, a copy of
    the cluster and a node search, is skipped. Exact for the decision, since only ``False`` is
    concluded. Not used with MIG, whose instances are not in these arrays.
    """

    def __init__(self, state: WorkingState, request: TaskRequest, allowed: BoolArray, need: int) -> None:
        self.state, self.request, self.allowed, self.need = state, request, allowed, need
        self.capacity = np.where(allowed, fit.capacity(state, request), 0)
        self.total = int(self.capacity.sum())

    @classmethod
    def of(cls, session: Session, pending: PendingJob) -> _Room | None:
        allowed = allowed_nodes(session, pending.job)
        state, request = session.ctx.state, pending.job.request
        if isinstance(allowed, Status) or state.mig is not None or request.mig_profile is not None:
            return None
        return cls(state, request, allowed, pending.tasks_left)

    def enough_without(self, victims: Sequence[RunningJob]) -> bool:
        by_node: dict[int, list[TaskPlacement]] = {}
        for victim in victims:
            for placement in victim.placements:
                if self.allowed[placement.node]:
                    by_node.setdefault(placement.node, []).append(placement)
        total = self.total
        for node, placements in by_node.items():
            total += self._node_capacity(node, placements) - int(self.capacity[node])
        return total >= self.need

    def _node_capacity(self, node: int, placements: list[TaskPlacement]) -> int:
        """``fit.capacity`` of one node with ``placements`` given back (the same terms)."""
        state, request = self.state, self.request
        row = state.gpu_free[node].copy()
        cpu, memory = int(state.cpu_free[node]), int(state.memory_free[node])
        for placement in placements:
            for gpu in placement.gpu_indices:
                row[gpu] += placement.gpu_milli
            cpu += placement.cpu_milli
            memory += placement.memory_mib
        cap = int(fit.UNLIMITED)
        if request.whole_gpus:
            cap = min(cap, int(np.count_nonzero(row == MILLI_PER_GPU)) // request.whole_gpus)
        elif request.is_fractional:
            cap = min(cap, int((row // request.gpu_milli).sum()))
        if request.cpu_milli:
            cap = min(cap, cpu // request.cpu_milli)
        if request.memory_mib:
            cap = min(cap, memory // request.memory_mib)
        if state.pods_free is not None:
            cap = min(cap, int(state.pods_free[node]) + len(placements))
        return cap


def _evict(session: Session, pending: PendingJob, victims: list[RunningJob], evicted: set[str]) -> None:
    for victim in victims:
        for placement in victim.placements:
            session.ctx.state.release(placement)
        evicted.add(victim.job.id)
        session.decisions.append(Preempt(victim.job.id, f"preempted so that {pending.job.id} can start"))
    session.state_version += 1
    session.failed_shapes.clear()  # capacity grew: earlier failures in this cycle may fit now
    session.admitted.clear()  # admit plugins do not read evictions; cleared anyway, as after a bind
    session.failed_requests.clear()
