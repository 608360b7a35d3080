"""The reservation search's cross-cycle and vectorised shortcuts give exactly what the long way gives.

``_Rooms.enough`` counts room at many candidate times at once and must agree with
``_room_less`` at each; ``_Overlaps.of`` must name the reservations
``Reservation.overlaps`` names; ``SearchMemo`` must answer a repeated search as a
fresh search does, and search again when an input changes.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import a_cluster, a_job, a_snapshot
from loadmaster.model import ClusterSnapshot, PendingJob, TaskPlacement, TaskRequest
from loadmaster.scheduling.framework import CycleContext
from loadmaster.scheduling.placement import Scoring
from loadmaster.scheduling.plugins.binpack import BinPack
from loadmaster.scheduling.reservation import (
    Future,
    Placer,
    Release,
    ReleasePlan,
    Reservation,
    SearchMemo,
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
