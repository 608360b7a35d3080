"""allocate: walk the queue in order and place each job's gang in one transaction."""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from loadmaster.model import MILLI_PER_GPU, Job, PendingJob, TaskPlacement
from loadmaster.scheduling import fit
from loadmaster.scheduling.decisions import Bind
from loadmaster.scheduling.framework import BoolArray
from loadmaster.scheduling.placement import CUDA_FILTERED, Scoring, place_job
from loadmaster.scheduling.queue_index import LOOSE, NONE, ClassInfo, ClassVerdicts, IntArray, QueueIndex
from loadmaster.scheduling.session import Session
from loadmaster.scheduling.state import WorkingState
from loadmaster.scheduling.status import SUCCESS, Code, Status, as_for_smaller, unschedulable, wait


def run(session: Session) -> None:
    """Try each job in queue order; bind what admission and the permit plugins accept.

    With ``backfill`` in the profile this does nothing: the backfill walk
    places jobs itself, so that none starts in a way that delays a reservation.
    """
    if "backfill" not in session.profile.actions:
        walk(session)


def walk(session: Session, *, blocked_by: str = "strict FIFO", strict: bool | None = None) -> None:
    """Place each job of the queue in order, blocking strict lanes at the first job that cannot start.

    ``blocked_by`` says, in the status of the jobs behind a blocked one, why they were not tried.
    ``strict``: block every lane at its first job that cannot start (True) or none (False), for
    this walk only; None: as the profile's order plugins say (``Session.strict``, never changed).
    """
    scoring = Scoring(tuple(session.profile.scores))
    strict = session.strict if strict is None else strict
    plain = strict or session.blocked or session.statuses or session.bound
    if not plain and session.queue_index is not None and not session.admission:
        _walk_indexed(session, session.queue_index, scoring)
        return
    if not plain and len(session.queue) >= _RUNS_MIN_QUEUE:
        _walk_runs(session, scoring)
        return
    # Locals, not attributes: this loop visits every waiting job of every cycle (tens of thousands
    # of visits per cycle in an overloaded queue), and most visits end in a memo lookup.
    statuses, bound, blocked = session.statuses, session.bound, session.blocked
    admission = session.admission
    shapes, failed = session.shapes, session.failed_shapes
    for pending in session.queue:
        job = pending.job
        job_id = job.id
        # Only a strict lane is ever blocked, so the lane is asked for only once one is.
        if job_id in statuses or job_id in bound or (blocked and session.lane(job) in blocked):
            continue
        # try_place's first answer, without the call: in a queue of a few hundred waiting jobs most
        # visits end here, their shape having failed earlier in the cycle (admission goes first).
        known = shapes.get(job_id) if not admission and not pending.bound else None
        status = failed.get(("now", known[1])) if known is not None and known[0] is job else None
        if status is None:
            status = admit(session, pending) if admission else SUCCESS
            if status.code is Code.SUCCESS:
                status = try_place(session, pending, scoring, session.ctx.state)
                if status.code is Code.SUCCESS:
                    continue
        statuses[job_id] = status
        if strict:
            lane = session.lane(job)
            blocked[lane] = wait(
                f"queued behind {job_id} in {lane} ({blocked_by}); it waits on: {status.reason}", "fifo"
            )
            if session.all_blocked():
                return


_RUNS_MIN_QUEUE = 1024
"""Waiting jobs from which a non-strict walk sorts the queue into verdict classes first: below,
most jobs are visited anyway (a few hundred distinct shapes) and the plain loop is as fast."""


@dataclass(eq=False, slots=True)
class _Classes:
    """The queue's jobs by verdict class: (admission key, shape) for a job without bound tasks.

    Between two binds of a cycle, every job of a class whose admission verdict is a refusal
    gets that verdict, and every job of an admitted class whose shape already failed gets that
    failure (the memo lookups of :func:`admit` and :func:`try_place`); a class is *resolved*
    once its verdict is known so. Classes are numbered once for the scheduler's life
    (``Session.verdict_ids``); a job with bound tasks, or without an admission key, is a class
    of its own (a negative number) that is never resolved: it is always visited.
    """

    items: list[PendingJob]
    """The queue, in its order."""
    ids: list[str]
    of: list[int]
    """The class of each position of the queue."""
    numbers: list[int]
    """The classes of the queue (not those of a single job)."""
    by_admit: dict[Hashable, list[int]]
    """The classes of each admission key: one admission verdict resolves them all."""
    by_shape: dict[int, list[int]]
    """The classes of each shape: a failure of the shape resolves those admitted."""

    @classmethod
    def of_queue(cls, session: Session, items: list[PendingJob]) -> _Classes:
        # List operations per job (a queue may hold tens of thousands); Python per class only.
        ids = [p.job.id for p in items]
        hits = list(map(session.verdict_keys.get, ids))
        of = [
            hit[1] if hit is not None and hit[0] is p.job and not p.bound else -1
            for hit, p in zip(hits, items, strict=True)
        ]
        if -1 in of:
            for position in [i for i, number in enumerate(of) if number < 0]:
                number = _verdict_class(session, items[position])
                of[position] = number if number >= 0 else -1 - position
        by_admit: dict[Hashable, list[int]] = {}
        by_shape: dict[int, list[int]] = {}
        numbers = [number for number in set(of) if number >= 0]
        for number in numbers:
            admit_key, shape = session.verdict_classes[number]
            by_admit.setdefault(admit_key, []).append(number)
            by_shape.setdefault(shape, []).append(number)
        return cls(items, ids, of, numbers, by_admit, by_shape)

    def known(self, session: Session, number: int) -> Status | None:
        """The verdict every job of class ``number`` would get now, or None if it is not known."""
        if number < 0:
            return None
        admit_key, shape = session.verdict_classes[number]
        if session.admission:
            verdict = session.admitted.get(admit_key)
            if verdict is None or verdict.code is not Code.SUCCESS:
                return verdict
        return session.failed_shapes.get(("now", shape))

    def related(self, session: Session, number: int, *, admitted: bool, failed: bool) -> list[int]:
        """Class ``number`` and the classes whose verdict its visit may have made known: those of
        its admission key if the visit ``admitted`` a new verdict, those of its shape if it
        ``failed`` a new shape."""
        found = [number]
        if number >= 0:
            admit_key, shape = session.verdict_classes[number]
            if admitted:
                found += self.by_admit[admit_key]
            if failed:
                found += self.by_shape[shape]
        return found


def known_refused(session: Session) -> tuple[list[PendingJob], list[bool]] | None:
    """The queue of the cycle's walk, each job with True where admission already refused it
    since the last bind (what :func:`admit` would return), found per class; None without a
    class table (a short queue, or a strict walk)."""
    table = session.walk_classes
    if not isinstance(table, _Classes) or not session.admission:
        return None
    refused = {}
    for number in table.numbers:
        verdict = session.admitted.get(session.verdict_classes[number][0])
        refused[number] = verdict is not None and verdict.code is not Code.SUCCESS
    return table.items, [refused.get(number, False) for number in table.of]


def _walk_runs(session: Session, scoring: Scoring) -> None:
    """The non-strict walk, visiting only jobs whose verdict is not known; the others get theirs.

    The same verdicts, in the same order, as visiting every job: between two visits nothing
    changes the memos that decide a resolved class's verdict (they only gain entries; a bind
    drops the admission verdicts, and then every class is unresolved again until its admission
    key is asked). A job of a resolved class costs a list and a dict lookup, not a visit.
    """
    items = list(session.queue)
    table = _Classes.of_queue(session, items)
    # A dict for every class (absent: a class of its own, never resolved). A cycle's walk usually
    # starts with both memos empty, and then no class is resolved yet.
    verdicts: dict[int, Status | None] = dict.fromkeys(table.numbers)
    if session.admitted or session.failed_shapes:
        verdicts = {number: table.known(session, number) for number in table.numbers}
    session.walk_classes = table
    statuses, ids, admission = session.statuses, table.ids, session.admission
    for position, number in enumerate(table.of):
        verdict = verdicts.get(number)
        if verdict is not None:
            statuses[ids[position]] = verdict
            continue
        version, admitted, failed = session.state_version, len(session.admitted), len(session.failed_shapes)
        _visit(session, items[position], scoring)
        if session.state_version != version and admission:
            # A bind dropped the admission verdicts; shape failures stay (capacity only shrinks).
            verdicts = dict.fromkeys(verdicts)
        gained = {"admitted": len(session.admitted) > admitted, "failed": len(session.failed_shapes) > failed}
        for related in table.related(session, number, **gained):
            if verdicts.get(related) is None and related >= 0:
                verdicts[related] = table.known(session, related)


def _walk_indexed(session: Session, index: QueueIndex, scoring: Scoring) -> None:
    """The non-strict walk over the scheduler's queue index: the visits of :func:`_walk_runs`, in
    the same order, without a step per waiting job or per class (see ``queue_index``).

    ``place`` holds, for each class not yet resolved, the place of its first job not yet visited;
    the smallest is the job the full walk visits next (every job before it belongs to a resolved
    class). After a visit the class is resolved if its shape failed, the verdict every later job
    of it gets; else its next job's place takes its slot. Without admission a class is its shape,
    so a visit resolves no other class except by dominance: a request that failed resolves every
    class of its group asking at least as much on every resource (:func:`dominated`), which the
    full walk finds at its next visit of each. Here each new failure is compared with its group's
    classes at once, in the order the failures were kept, so each class gets the first failure
    that dominates it, as :func:`dominated` cites it. Loose jobs (tasks bound) are visited at
    every cycle, as in the full walk. The statuses of jobs not visited are their class's verdict
    (``Session.class_verdicts``, read through ``queue_index.ClassStatuses``).

    The memo of failed shapes gets no entry for a class resolved by dominance, where the full
    walk's visit writes one: nothing reads it in this cycle, and a later cycle that starts with
    the memos (``repeat.CarriedFailures``) finds the same verdict by the same dominance.
    """
    failed, requests, of_shape = session.failed_shapes, session.failed_requests, index.of_shape
    verdicts = session.class_verdicts = ClassVerdicts(index.info)
    place = index.first.copy()
    for key, status in failed.items():  # a memo carried from the last cycle: ("now", shape) keys
        number = of_shape.get(key[1], -1) if isinstance(key, tuple) and key[0] == "now" else -1
        if number >= 0 and place[number] != NONE:
            verdicts.failed[number], place[number] = status, NONE
    compared: dict[Hashable, int] = {}
    """Failures of each group compared with its classes so far."""
    for group in list(requests):
        _resolve_dominated(session, index, (verdicts, place), group, compared)
    session.dominance_resolved = True
    try:
        _visit_in_order(session, index, scoring, (verdicts, place), compared)
    finally:
        session.dominance_resolved = False


def _visit_in_order(
    session: Session,
    index: QueueIndex,
    scoring: Scoring,
    walk: tuple[ClassVerdicts, IntArray],
    compared: dict[Hashable, int],
) -> None:
    """:func:`_walk_indexed`'s visits, the earliest job of the classes not yet resolved first."""
    verdicts, place = walk
    failed, requests, classes = session.failed_shapes, session.failed_requests, len(place)
    loose, next_loose = sorted(index.loose), 0
    quick = not session.profile.permit  # _failed_here's condition, the same for the whole walk
    jobs, members_of, info, cursor = index.jobs, index.members, index.info, dict[int, int]()
    while True:
        number = int(place.argmin()) if classes else 0
        at = int(place[number]) if classes else NONE
        if next_loose < len(loose) and loose[next_loose] < at:
            _visit(session, jobs[loose[next_loose]], scoring)
            next_loose += 1
            continue
        if at == NONE:
            return
        pending, shape = jobs[at], info[number].shape
        remembered = _failed_here(session, pending, shape, scoring) if quick else None
        if remembered is None:
            _visit(session, pending, scoring)
        else:  # what the visit does with a failure found in the memo (see _failed_here)
            session.statuses[pending.job.id] = failed[("now", shape)] = remembered
            _remember_failure(session, pending.job, shape, "now", remembered)
        known = failed.get(("now", shape))
        if known is not None:
            verdicts.failed[number], place[number] = known, NONE
        else:
            members, step = members_of[number], cursor.get(number, 0) + 1
            cursor[number] = step
            place[number] = members[step] if step < len(members) else NONE
        group = info[number].group
        if group is not None and len(requests.get(group, ())) > compared.get(group, 0):
            _resolve_dominated(session, index, walk, group, compared)


def _failed_here(session: Session, pending: PendingJob, shape: int, scoring: Scoring) -> Status | None:
    """The failure a visit of ``pending`` (a class's job, no task bound) would find in the cycle's
    memo of failed placements (``_place_on_cycle_state``), without the visit; None where the visit
    must be made.

    In the indexed walk the visit admits (no admission there), finds no failed shape (its class
    would be resolved) and no dominating failure (its class would be out), takes the shape's
    allowed nodes and, with no permit plugin (``quick``), looks the placement up by the same key:
    a hit since the last bind fails the job with that status, which the caller records as
    ``try_place`` and ``_visit`` do. Most visits of a long queue end so: requests that differ only
    in what placement does not read (GPU memory) after the first of them failed.
    """
    allowed = session.allowed.get(shape)
    if allowed is None or isinstance(allowed, Status):
        return None  # not yet asked in this cycle (the visit makes the mask), or no node at all
    return _failed_since_bind(session, allowed, _failure_key(session, pending, scoring, all_or_nothing=False))


def _failed_since_bind(session: Session, allowed: BoolArray, key: Hashable | None) -> Status | None:
    """The failure of a placement with failure key ``key`` on ``allowed``, tried on the cycle's
    state since its last bind (``Session.place_failures``; the mask is kept by Session.allowed)."""
    hit = session.place_failures.get((id(allowed), key)) if key is not None else None
    return hit[1] if hit is not None and hit[0] == session.state_version else None


def _resolve_dominated(
    session: Session,
    index: QueueIndex,
    walk: tuple[ClassVerdicts, IntArray],
    group: Hashable,
    compared: dict[Hashable, int],
) -> None:
    """Take the classes of ``group`` that its failures kept since the last call dominate out of the
    walk; each keeps the first of them that dominates it, found when its verdict is read
    (``ClassVerdicts``, from the failures recorded here in the order they were kept). A class
    already out (its own failure, an earlier one's, or every job visited) is unchanged by this.
    """
    verdicts, place = walk
    kept = session.failed_requests.get(group, [])
    start, compared[group] = compared.get(group, 0), len(kept)
    for size, status in kept[start:]:
        dominated = index.dominated(group, size)
        if dominated is None:
            return
        place[dominated] = NONE
        verdicts.compared.append((group, size, status))


def classify(session: Session, pending: PendingJob) -> tuple[int, ClassInfo | None]:
    """``pending``'s verdict class for the queue index (LOOSE for a job with bound tasks), and what
    the indexed walk needs of the class."""
    number = _verdict_class(session, pending)
    if number < 0:
        return LOOSE, None
    job = pending.job
    shape = session.verdict_classes[number][1]
    return number, ClassInfo(shape, _request_group(session, job, shape, "now"), _request_size(job))


def _verdict_class(session: Session, pending: PendingJob) -> int:
    """The number of (admission key, shape) of a job without bound tasks (kept per job object), or -1."""
    if pending.bound:
        return -1
    admit_key = _admit_key(session, pending) if session.admission else ()
    number = -1
    if admit_key is not None:
        key = (admit_key, shape_of(session, pending.job))
        number = session.verdict_ids.get(key, -1)
        if number < 0:
            number = session.verdict_ids[key] = len(session.verdict_classes)
            session.verdict_classes.append(key)
    session.verdict_keys[pending.job.id] = (pending.job, number)
    return number


def _visit(session: Session, pending: PendingJob, scoring: Scoring) -> None:
    """One job of a non-strict walk: admission, then placement; its status if it waits."""
    status = admit(session, pending)
    if status.code is Code.SUCCESS:
        status = try_place(session, pending, scoring, session.ctx.state)
        if status.code is Code.SUCCESS:
            return
    session.statuses[pending.job.id] = status


def admit(session: Session, pending: PendingJob) -> Status:
    """The first refusal of an admit plugin, or SUCCESS (also when admission is off).

    Asked once per admission key (``AdmitPlugin.admit_key``) between two binds
    of the cycle: jobs with equal keys get equal verdicts until a bind, so the
    verdict kept is the one the plugins would give again.
    """
    if not session.admission:
        return SUCCESS
    key = _admit_key(session, pending)
    if key is not None:
        found = session.admitted.get(key)
        if found is not None:
            return found
    status = SUCCESS
    for plugin in session.profile.admit:
        status = plugin.admit(pending, session.ctx)
        if not status.ok:
            break
    if key is not None:
        session.admitted[key] = status
    return status


def _admit_key(session: Session, pending: PendingJob) -> Hashable | None:
    """The admit plugins' keys for ``pending`` together (None if one has none); kept per job object."""
    job = pending.job
    if not pending.bound:
        cached = session.admit_keys.get(job.id)
        if cached is not None and cached[0] is job:
            return cached[1]
    parts = []
    for plugin in session.profile.admit:
        part = plugin.admit_key(pending)
        if part is None:
            key = None
            break
        parts.append(part)
    else:
        key = tuple(parts)
    if not pending.bound:
        session.admit_keys[job.id] = (job, key)
    return key


def try_place(
    session: Session,
    pending: PendingJob,
    scoring: Scoring,
    state: WorkingState,
    view: Hashable = "now",
    *,
    job_shape: int | None = None,
) -> Status:
    """Place ``pending`` on ``state`` and, if permitted, commit it to the cycle's state and bind it.

    ``state`` is the cycle's state, or a shadow of it with reserved capacity
    taken out (backfill), named by ``view`` for the memo of failed shapes; a
    placement that fits a shadow fits the real state. ``job_shape`` saves
    recomputing :func:`shape_of` where the caller has it.
    """
    if job_shape is None:
        job_shape = shape_of(session, pending.job)
    shape = (view, job_shape)
    if not pending.bound:
        # A shadow holds less than the cycle's state, so failing there means failing here too.
        known = session.failed_shapes.get(("now", job_shape)) or session.failed_shapes.get(shape)
        if known is not None:
            return known
        # The indexed walk resolves dominated classes before it visits them (``_walk_indexed``).
        known = None if session.dominance_resolved else dominated(session, pending.job, job_shape, view)
        if known is not None:
            session.failed_shapes[shape] = known
            return known
    allowed = allowed_nodes(session, pending.job)
    if isinstance(allowed, Status):
        return allowed
    mark = state.mark()
    # A gang whose permit refuses any placement short of its remaining tasks (permits are monotone:
    # refusing n placed tasks, they refuse fewer) may fail without being placed task by task.
    left = pending.job.tasks - len(pending.bound)
    whole = left > 1 and not all(plugin.permits(pending, left - 1) for plugin in session.profile.permit)
    if state is session.ctx.state:  # the common case: no view to switch to (a context manager costs)
        placed, status = _place_on_cycle_state(session, pending, allowed, scoring, all_or_nothing=whole)
    else:
        placed, status = _place_on_view(session, pending, allowed, scoring, state, all_or_nothing=whole)
    # Nothing placed and a failure to say: the permits' verdict would not be read (a gang's refusal
    # is a formatted reason, made at every failed attempt of every cycle).
    permit = SUCCESS if not placed and not status.ok else _permit(session, pending, len(placed))
    if not permit.ok or not placed:
        state.rollback(mark)
        failure = status if not status.ok else permit
        if not pending.bound:
            session.failed_shapes[shape] = failure
            if not status.ok:
                _remember_failure(session, pending.job, job_shape, view, failure)
        return failure
    on_cycle_state = state is session.ctx.state
    if not on_cycle_state:
        state.rollback(mark)  # the shadow goes back as it was; the placement is taken on the real state
    commit(session, pending, placed, taken=on_cycle_state)
    return SUCCESS if len(pending.bound) + len(placed) >= pending.job.min_available else status


def _place_on_cycle_state(
    session: Session, pending: PendingJob, allowed: BoolArray, scoring: Scoring, *, all_or_nothing: bool
) -> tuple[list[TaskPlacement], Status]:
    """:func:`place_job` on the cycle's state, or its failure remembered since the last bind.

    A placement that places no task is a function of the state, the allowed nodes and what fit
    reads of the job (the request's GPU share, CPU, memory and MIG profile, the tasks left and
    bound, the CUDA note of the reason), and of the scores only through the random draws a score
    plugin might make: so, with scores that only read the state, jobs that differ in nothing
    else (a queue's requests that differ only in GPU memory, say, or partly bound gangs) fail
    alike until the next bind, with the same reason, and the attempt is made once.
    """
    key = _failure_key(session, pending, scoring, all_or_nothing=all_or_nothing)
    known = _failed_since_bind(session, allowed, key)
    if known is not None:
        return [], known
    placed, status = _place_remembered(session, pending, allowed, scoring, key, all_or_nothing=all_or_nothing)
    if key is not None and not placed and not status.ok:
        session.place_failures[(id(allowed), key)] = (session.state_version, status)
    return placed, status


def _place_on_view(
    session: Session,
    pending: PendingJob,
    allowed: BoolArray,
    scoring: Scoring,
    view: WorkingState,
    *,
    all_or_nothing: bool,
) -> tuple[list[TaskPlacement], Status]:
    """:func:`place_job` on ``view`` (a backfill shadow of the cycle's state), or a failure an
    earlier cycle met on the same free resources (:mod:`~loadmaster.scheduling.view_failures`)."""
    key = _failure_key(session, pending, scoring, all_or_nothing=all_or_nothing)
    with session.ctx.viewing(view):
        return _place_remembered(session, pending, allowed, scoring, key, all_or_nothing=all_or_nothing)


def _place_remembered(
    session: Session,
    pending: PendingJob,
    allowed: BoolArray,
    scoring: Scoring,
    key: Hashable | None,
    *,
    all_or_nothing: bool,
) -> tuple[list[TaskPlacement], Status]:
    """:func:`place_job` on the context's state, where the scheduler keeps failures across cycles
    (``Session.view_failures``) and ``key`` is what a failure depends on besides the free
    resources and the allowed nodes: a failure met on the same three before, or the attempt."""
    memo, state = session.view_failures, session.ctx.state
    keys: tuple[Hashable, Hashable] | None = None  # the state's content; the mask and the job's key
    if memo is not None and key is not None and state.mig is None:
        keys = (state_content(session, state), (mask_content(session, allowed), key))
        known = memo.get(*keys)
        if known is not None:
            return [], known
    placed, status = place_job(
        pending, allowed, session.ctx, scoring, session.profile.place_gang, all_or_nothing=all_or_nothing
    )
    if memo is not None and keys is not None and not placed and not status.ok:
        memo.put(*keys, status)
    return placed, status


def state_content(session: Session, state: WorkingState) -> Hashable:
    """The free resources of ``state`` and its node table, as a key: made once per state and bind
    (every change to the cycle's state or to a shadow of it is a bind or an eviction, which bump
    the version; a placement tried on it is rolled back before anything else reads it). Anything
    new that changes a state in place must bump it too: the failures kept under this key last
    across cycles (``Session.view_failures``)."""
    found = session.view_content.get(id(state))
    if found is not None and found[0] is state and found[1] == session.state_version:
        return found[2]
    content = (state.nodes, state.free_bytes())
    session.view_content[id(state)] = (state, session.state_version, content)
    return content


def mask_content(session: Session, allowed: BoolArray) -> bytes:
    """``allowed`` as bytes, made once per mask and cycle (the masks are kept by Session.allowed)."""
    found = session.mask_bytes.get(id(allowed))
    if found is not None and found[0] is allowed:
        return found[1]
    mask = allowed.tobytes()
    session.mask_bytes[id(allowed)] = (allowed, mask)
    return mask


def _failure_key(
    session: Session, pending: PendingJob, scoring: Scoring, *, all_or_nothing: bool
) -> Hashable | None:
    """What a failed placement of ``pending`` depends on besides the free resources and the allowed
    nodes (see above), or None where that is not all (a topology plugin, or scores that may draw
    from the random stream, on a gang)."""
    job = pending.job
    if session.profile.place_gang is not None:
        return None
    # With more than one task left, placement scores nodes before it finds that none can take one.
    if job.tasks - len(pending.bound) != 1 and not all(p.pure for p, _ in scoring.plugins):
        return None
    request = job.request
    return (
        # A gang failed by count placed nothing where a job that may start with fewer tasks
        # (a lower min_available, same request) places some: the two must not share a memo entry.
        all_or_nothing,
        request.gpu_milli,
        request.cpu_milli,
        request.memory_mib,
        request.mig_profile,
        job.tasks,
        len(pending.bound),
        job.cuda,
        job.cuda_compat,
        CUDA_FILTERED in session.ctx.data,
    )


def commit(
    session: Session, pending: PendingJob, placed: list[TaskPlacement], *, taken: bool = False
) -> None:
    """Take ``placed`` on the cycle's state (unless already ``taken``); emit the Bind; tell admit plugins."""
    if not taken:
        for placement in placed:
            session.ctx.state.take(placement)
    starts = len(pending.bound) + len(placed) >= pending.job.min_available
    session.decisions.append(Bind(pending.job.id, tuple(placed), starts))
    session.bound.add(pending.job.id)
    session.state_version += 1
    session.admitted.clear()  # admission verdicts may change with each bind
    for listener in session.bind_listeners:
        listener(placed)
    if session.profile.admit:
        gpus = sum(p.gpu_milli * len(p.gpu_indices) for p in placed) / MILLI_PER_GPU
        for plugin in session.profile.admit:
            plugin.on_bind(pending.job, gpus, session.ctx)


def _permit(session: Session, pending: PendingJob, placed: int) -> Status:
    for plugin in session.profile.permit:
        verdict = plugin.permit(pending, placed)
        if not verdict.ok:
            return verdict
    return SUCCESS


_MAX_FAILED_REQUESTS = 32
"""Failed requests kept per group for the dominance check: enough for a queue's few sizes, cheap to scan."""


def _request_group(session: Session, job: Job, shape: int, view: Hashable) -> Hashable | None:
    """Jobs of one group differ only in their request's size: same view, nodes, filters, tasks, gang
    rule and MIG profile (or none).

    The MIG profile, because a MIG request's size does not say what it needs: its milli-GPU is 0
    and its slot is an instance of that profile, which a request of another profile (or a whole
    GPU) does not use, so a failed ``3g.40gb`` says nothing of a ``1g.10gb`` asking as much CPU.
    None when a topology plugin places gangs (its choice need not be monotone in the request).
    """
    if job.tasks > 1 and session.profile.place_gang is not None:
        return None
    return (view, session.static_of[shape], job.tasks, job.min_available, job.request.mig_profile)


def _request_size(job: Job) -> tuple[int, int, int, int]:
    r = job.request
    return (r.gpu_milli, r.cpu_milli, r.memory_mib, r.gpu_memory_mib)


def dominated(session: Session, job: Job, shape: int, view: Hashable) -> Status | None:
    """A failure of a job that asks for no more than ``job`` on every resource, in the same group.

    Capacity only falls as a request grows (more milli-GPU, CPU or memory per task), so a job
    that needs at least as much of everything as a job that could not be placed on this view
    cannot be placed either; the walk then skips the placement attempt.
    """
    if not session.failed_requests or (job.tasks > 1 and session.profile.place_gang is not None):
        return None  # nothing failed yet, or no group (see _request_group)
    request = job.request
    gpu, cpu, memory, gpu_memory = (
        request.gpu_milli,
        request.cpu_milli,
        request.memory_mib,
        request.gpu_memory_mib,
    )
    group = (session.static_of[shape], job.tasks, job.min_available, request.mig_profile)  # _request_group's
    now_key = ("now", *group)
    # A tuple, not a set: a set's order follows string hashes, which change per process
    # (PYTHONHASHSEED), and the first match names the reason in the job table.
    for key in (now_key,) if view == "now" else (now_key, (view, *group)):
        for smaller, status in session.failed_requests.get(key, ()):
            # Spelled out rather than all(zip(...)): this runs for every waiting job of every cycle.
            if gpu >= smaller[0] and cpu >= smaller[1] and memory >= smaller[2] and gpu_memory >= smaller[3]:
                return _as_for_smaller(session, status)
    return None


def _as_for_smaller(session: Session, status: Status) -> Status:
    """``status`` as the reason of a larger request (one object per failure and cycle)."""
    found = session.as_for_smaller.get(id(status))
    if found is not None and found[0] is status:  # the original is kept, so its id is not reused
        return found[1]
    derived = as_for_smaller(status)
    session.as_for_smaller[id(status)] = (status, derived)
    return derived


def _remember_failure(session: Session, job: Job, shape: int, view: Hashable, failure: Status) -> None:
    key = _request_group(session, job, shape, view)
    if key is None:
        return
    kept = session.failed_requests.setdefault(key, [])
    if len(kept) < _MAX_FAILED_REQUESTS:
        kept.append((_request_size(job), failure))


def shape_of(session: Session, job: Job) -> int:
    """What decides whether a job fits, as a small int: equal shapes fit or fail together within a cycle.

    Cached by job id across cycles, for the job object it was computed for (a
    job never changes; the filters' memo keys are functions of the job alone;
    a driver that builds new objects each cycle just recomputes). Shapes are interned to ints
    because the walks look them up at every visit, and hashing the full
    tuple (with its dataclasses) each time costs more than the lookup.
    """
    cached = session.shapes.get(job.id)
    if cached is not None and cached[0] is job:
        return cached[1]
    extra = tuple(p.memo_key(job) for p in session.profile.filters)
    selector = tuple(sorted(job.node_selector.items()))
    static = (job.pool, job.resource_type, selector, extra)
    shape = (*static, job.request, job.tasks, job.min_available)
    number = session.shape_ids.get(shape)
    if number is None:
        number = session.shape_ids[shape] = len(session.shape_ids)
        session.static_of[number] = session.shape_ids.setdefault(static, len(session.shape_ids))
    session.shapes[job.id] = (job, number)
    return number


def allowed_nodes(session: Session, job: Job) -> BoolArray | Status:
    """Nodes the job may use: its pool, type and selector, then every filter (once per shape and cycle)."""
    shape = shape_of(session, job)
    found = session.allowed.get(shape)
    if found is None:
        found = _allowed_nodes(session, job)
        session.allowed[shape] = found
    return found


def _allowed_nodes(session: Session, job: Job) -> BoolArray | Status:
    key = (session.ctx.state.nodes, job.pool, job.resource_type, tuple(sorted(job.node_selector.items())))
    mask = session.static_masks.get(key)
    if mask is None:
        mask = fit.static_mask(session.ctx.state.nodes, job)
        session.static_masks[key] = mask
    if not mask.any():
        return unschedulable(f"no node matches {fit.describe_static(job)}", "fit")
    for plugin in session.profile.filters:
        result = plugin.filter(job, session.ctx)
        mask = mask & result.mask
        if not np.any(mask):
            return unschedulable(result.reason or "no node passes the filter", plugin.name)
    return mask
