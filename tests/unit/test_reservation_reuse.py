"""The reservation search's cross-cycle and vectorised shortcuts give exactly what the long way gives.

``_Rooms.enough`` counts room at many candidate times at once and must agree with
``_room_less`` at each; ``_Overlaps.of`` must name the reservations
``Reservation.overlaps`` names; ``SearchMemo`` must answer a repeated search as a
fresh search does, and search again when an input changes.
"""

from __future__ import annotations

import collections

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import a_cluster, a_job, a_snapshot
from loadmaster.model import ClusterSnapshot, PendingJob, TaskPlacement, TaskRequest
from loadmaster.scheduling.framework import CycleContext
from loadmaster.scheduling.placement import Scoring
from loadmaster.scheduling.plugins.binpack import BinPack
from loadmaster.scheduling.plugins.firstfit import FirstFit
from loadmaster.scheduling.reservation import (
    Booked,
    Future,
    Placer,
    Release,
    ReleasePlan,
    Reservation,
    SearchMemo,
    _changed_ends,
    _Overlaps,
    _room_less,
    _Rooms,
    earliest_start,
)
from loadmaster.scheduling.state import Held, WorkingState
from reservation_strategies import NODES, placements

_gpu_request = st.one_of(
    st.builds(
        TaskRequest,
        gpu_milli=st.sampled_from([1000, 2000, 4000]),
        cpu_milli=st.sampled_from([0, 500]),
        memory_mib=st.sampled_from([0, 1000]),
    ),
    st.builds(TaskRequest, gpu_milli=st.sampled_from([250, 500]), cpu_milli=st.sampled_from([0, 700])),
)


def _state(taken: list[TaskPlacement]) -> WorkingState:
    state = WorkingState.from_snapshot(ClusterSnapshot.empty(NODES))
    for placement in taken:
        state.take_clamped(placement)
    return state


@settings(max_examples=150, deadline=None)
@given(
    taken=st.lists(placements, max_size=8),
    ends=st.lists(st.lists(placements, min_size=1, max_size=3).map(tuple), max_size=6),
    candidates=st.lists(
        st.tuples(st.integers(0, 6), st.one_of(st.none(), st.lists(placements, max_size=4))),
        min_size=1,
        max_size=6,
    ),
    request=_gpu_request,
    allowed=st.lists(st.booleans(), min_size=4, max_size=4),
    need=st.integers(1, 6),
)
def test_rooms_at_many_candidates_equal_room_less_at_each(
    taken: list[TaskPlacement],
    ends: list[tuple[TaskPlacement, ...]],
    candidates: list[tuple[int, list[TaskPlacement] | None]],
    request: TaskRequest,
    allowed: list[bool],
    need: int,
) -> None:
    state = _state(taken)
    future = Future(state, ReleasePlan([Release(float(i), p) for i, p in enumerate(ends)], {}))
    mask = np.array(allowed)
    rooms = _Rooms.of(future, mask, request)
    assert rooms is not None
    uptos = sorted(min(k, len(ends)) for k, _ in candidates)
    helds = [None if h is None else state.held(h) for _, h in candidates]
    nothing = Held(
        np.zeros_like(state.gpu_free), np.zeros_like(state.cpu_free), np.zeros_like(state.memory_free)
    )
    expected = [
        _room_less(future.after(k), nothing if h is None else h, mask, request) >= need
        for k, h in zip(uptos, helds, strict=True)
    ]
    assert rooms.enough(uptos, helds, need) == expected


@settings(max_examples=150, deadline=None)
@given(
    spans=st.lists(st.tuples(st.integers(0, 20), st.integers(1, 10)), max_size=8),
    times=st.lists(st.integers(0, 30).map(float), min_size=1, max_size=10),
    run_s=st.sampled_from([0.5, 1.0, 3.0, 7.0]),
)
def test_overlaps_name_the_reservations_a_run_overlaps(
    spans: list[tuple[int, int]], times: list[float], run_s: float
) -> None:
    held = _state([]).held([])
    reservations = [Reservation(f"r{i}", float(s), float(s + d), (), held) for i, (s, d) in enumerate(spans)]
    expected = [
        tuple(i for i, r in enumerate(reservations) if r.overlaps(t, t + run_s)) for t in sorted(times)
    ]
    assert _Overlaps(reservations, run_s).of(sorted(times)) == expected


def _same(a: Reservation | None, b: Reservation | None) -> bool:
    if a is None or b is None:
        return a is b
    held = all(
        np.array_equal(x, y)
        for x, y in zip(
            (a.held.gpu, a.held.cpu, a.held.memory), (b.held.gpu, b.held.cpu, b.held.memory), strict=True
        )
    )
    return (a.job_id, a.start_s, a.end_s, a.placements) == (
        b.job_id,
        b.start_s,
        b.end_s,
        b.placements,
    ) and held


def test_search_memo_answers_a_repeated_search_as_a_fresh_search_and_searches_again_on_change() -> None:
    cluster = a_cluster().nodes(2, gpus=4).build()
    snapshot = (
        a_snapshot(cluster)
        .running(a_job("r1").gpus(4).limit(100.0), "n0")
        .running(a_job("r2").gpus(4).limit(50.0), "n1")
        .build()
    )
    pending = PendingJob(a_job("wide").gpus(4).tasks(2).limit(30.0).build())
    placer = Placer(np.ones(2, dtype=bool), Scoring(((BinPack(), 1.0),)), None)
    assert placer.pure
    memo = SearchMemo()

    def search(now: float, state: WorkingState) -> tuple[Reservation | None, Reservation | None]:
        ctx = CycleContext(now=now, rng=np.random.default_rng(0), snapshot=snapshot, state=state)
        plan = ReleasePlan(
            sorted(
                (Release(max(r.start_s + r.job.time_limit_s, now), r.placements) for r in snapshot.running),
                key=lambda e: e.end_s,
            ),
            {},
        )
        future = Future(state, plan)
        memo.next_cycle()
        got = memo.earliest_start(pending, 30.0, ctx=ctx, future=future, reservations=[], placer=placer)
        fresh = earliest_start(pending, 30.0, ctx=ctx, future=future, reservations=[], placer=placer)
        return got, fresh

    state = WorkingState.from_snapshot(snapshot)
    first, fresh = search(0.0, state)
    assert _same(first, fresh) and first is not None and first.start_s == 100.0
    again, fresh = search(10.0, WorkingState.from_snapshot(snapshot))
    assert again is first and _same(again, fresh) and memo.reused == 1
    changed = WorkingState.from_snapshot(snapshot)
    changed.cpu_free[0] -= 1  # any change to the free resources: searched again
    other, fresh = search(10.0, changed)
    assert _same(other, fresh) and memo.searched == 2


_Running = list[tuple[float, tuple[TaskPlacement, ...]]]
"""Running jobs as (expected end, placements)."""


def _take_if_free(state: WorkingState, placement: TaskPlacement) -> bool:
    """Take ``placement`` on ``state`` if it fits there (False, and nothing taken, if not)."""
    row = state.gpu_free[placement.node]
    fits = (
        all(row[g] >= placement.gpu_milli for g in placement.gpu_indices)
        and state.cpu_free[placement.node] >= placement.cpu_milli
        and state.memory_free[placement.node] >= placement.memory_mib
    )
    if fits:
        state.take(placement)
    return fits


def _on_free_gpus(state: WorkingState, node: int, gpus: int) -> TaskPlacement | None:
    """A task of ``gpus`` whole GPUs on the first free GPUs of ``node``, taken; None if too few are free."""
    free = [g for g in range(state.gpu_free.shape[1]) if state.gpu_free[node, g] == 1000][:gpus]
    if len(free) < gpus:
        return None
    placement = TaskPlacement(node, tuple(free), 1000, 0, 0)
    state.take(placement)
    return placement


_Step = tuple[int, list[int], tuple[int, int, int, bool] | None, list[bool]]


@settings(max_examples=400, deadline=None)
@given(
    drawn=st.lists(
        st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(1, 40)), min_size=6, max_size=14
    ),
    shared=st.lists(placements, max_size=3),
    booked=st.lists(st.tuples(st.integers(0, 40), st.integers(1, 20), placements), max_size=3),
    steps=st.lists(
        st.tuples(
            st.integers(0, 6),  # time passes
            st.lists(st.integers(0, 9), max_size=1),  # a running job that ends (by position)
            st.one_of(  # a task that starts on free GPUs: node, GPUs, time limit, and whether it
                st.none(),  # is a gang's first task (it holds GPUs but has no expected end yet)
                st.tuples(st.integers(0, 3), st.integers(1, 4), st.integers(1, 40), st.booleans()),
            ),
            st.lists(st.booleans(), max_size=3),  # reservations kept (the rest are dropped)
        ),
        min_size=1,
        max_size=6,
    ),
    shape=st.sampled_from([(4.0, 1), (4.0, 2), (4.0, 3), (2.0, 3), (1.0, 6), (0.5, 5)]),
    run_s=st.sampled_from([3.0, 10.0, 25.0]),
    first_fit=st.booleans(),
)
def test_search_memo_answers_as_a_fresh_search_when_part_of_the_future_changed(
    drawn: list[tuple[int, int, int]],
    shared: list[TaskPlacement],
    booked: list[tuple[int, int, TaskPlacement]],
    steps: list[_Step],
    shape: tuple[float, int],
    run_s: float,
    first_fit: bool,
) -> None:
    """Jobs end (early or not) and start, tasks bind, reservations are dropped and time passes
    between cycles: the memo, which reuses the last answer for the part of the future that did
    not change, answers as a fresh search does at every cycle."""
    state = WorkingState.from_snapshot(ClusterSnapshot.empty(NODES))
    running: _Running = []
    for node, gpus, limit_s in drawn:  # whole GPUs, so that the cluster is often full
        placement = _on_free_gpus(state, node, gpus)
        if placement is not None:
            running.append((float(limit_s), (placement,)))
    for placement in shared:  # and some shared GPUs, CPU and memory
        if _take_if_free(state, placement):
            running.append((float(placement.cpu_milli % 40 + 1), (placement,)))
    reservations = [
        Reservation(f"r{i}", float(s), float(s + d), (p,), state.held([p]))
        for i, (s, d, p) in enumerate(booked)
    ]
    pending = PendingJob(a_job("waiting").gpus(shape[0]).tasks(shape[1]).limit(run_s).build())
    score = FirstFit() if first_fit else BinPack()
    placer = Placer(np.ones(len(NODES), dtype=bool), Scoring(((score, 1.0),)), None)
    memo = SearchMemo()
    now = 0.0
    first: _Step = (0, [], None, [True] * len(booked))
    for passed, ended, started, kept in [first, *steps]:
        now += passed
        for position in {p % len(running) for p in ended} if running else ():
            for placement in running.pop(position)[1]:
                state.release(placement)
        if started is not None:
            node, gpus, limit_s, bound_only = started
            placement = _on_free_gpus(state, node, gpus)
            if placement is not None and not bound_only:
                running.append((now + limit_s, (placement,)))
        reservations = [r for r, keep in zip(reservations, kept, strict=False) if keep]
        snapshot = ClusterSnapshot.empty(NODES)
        ctx = CycleContext(now=now, rng=np.random.default_rng(0), snapshot=snapshot, state=state)
        ends = sorted((Release(max(end, now), job) for end, job in running), key=lambda e: e.end_s)
        future = Future(state, ReleasePlan(ends, {}))
        memo.next_cycle()
        got = memo.earliest_start(
            pending, run_s, ctx=ctx, future=future, reservations=reservations, placer=placer
        )
        fresh = earliest_start(
            pending, run_s, ctx=ctx, future=future, reservations=reservations, placer=placer
        )
        assert _same(got, fresh)


def test_search_memo_searches_past_the_last_change_when_its_answer_came_before_it() -> None:
    """The last answer (start now on node 0) is before the last change (a job started on node 0 that
    ends at 20), and a reservation on node 0 from 25 keeps the job from starting at 20: a fresh
    search finds 50, after the change, and so must the memo."""
    state = WorkingState.from_snapshot(ClusterSnapshot.empty(NODES))
    running: _Running = []
    for node in (1, 2, 3):
        placement = _on_free_gpus(state, node, 4)
        assert placement is not None
        running.append((100.0, (placement,)))
    node0 = TaskPlacement(0, (0, 1, 2, 3), 1000, 0, 0)
    reservations = [Reservation("other", 25.0, 50.0, (node0,), state.held([node0]))]
    pending = PendingJob(a_job("waiting").gpus(4).limit(10.0).build())
    placer = Placer(np.ones(len(NODES), dtype=bool), Scoring(((FirstFit(), 1.0),)), None)
    memo = SearchMemo()
    found = []
    for now in (0.0, 1.0):
        if now:
            started = _on_free_gpus(state, 0, 4)
            assert started is not None
            running.append((20.0, (started,)))
        ctx = CycleContext(
            now=now, rng=np.random.default_rng(0), snapshot=ClusterSnapshot.empty(NODES), state=state
        )
        ends = sorted((Release(max(end, now), job) for end, job in running), key=lambda e: e.end_s)
        future = Future(state, ReleasePlan(ends, {}))
        memo.next_cycle()
        got = memo.earliest_start(
            pending, 10.0, ctx=ctx, future=future, reservations=reservations, placer=placer
        )
        fresh = earliest_start(
            pending, 10.0, ctx=ctx, future=future, reservations=reservations, placer=placer
        )
        assert _same(got, fresh)
        found.append(None if got is None else got.start_s)
    assert found == [0.0, 50.0]


@settings(max_examples=200, deadline=None)
@given(
    pool=st.lists(
        st.tuples(st.sampled_from([0.0, 5.0, 9.0]), st.sampled_from([10.0, 20.0]), placements),
        min_size=1,
        max_size=4,
    ),
    before=st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=6),
    after=st.lists(st.tuples(st.integers(0, 3), st.booleans()), max_size=6),
)
def test_changed_ends_are_those_of_the_counted_difference(
    pool: list[tuple[float, float, TaskPlacement]],
    before: list[tuple[int, bool]],
    after: list[tuple[int, bool]],
) -> None:
    """The reservations' difference names the ends ``Counter`` names, whether equal entries hold
    the same placements tuple (kept from the last cycle) or an equal copy (searched again)."""
    kept = [(start, end, (placement,)) for start, end, placement in pool]

    def entries(drawn: list[tuple[int, bool]]) -> Booked:
        chosen = [(kept[i % len(kept)], copy) for i, copy in drawn]
        return tuple((s, e, tuple(list(p)) if copy else p) for (s, e, p), copy in chosen)

    old, new = entries(before), entries(after)
    counted = collections.Counter(old)
    counted.subtract(new)
    expected = sorted(entry[1] for entry, count in counted.items() if count)
    assert sorted(_changed_ends(old, new)) == expected
