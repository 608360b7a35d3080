"""The shortcuts of the reservation search give exactly what the long way gives.

``_room_less`` counts the room of a state less some held resources without
building that state; ``ReleasePlan.per_node`` keeps what the first k releases
give back per node. Both feed decisions, so both must equal the computation
they replace, on any state.
"""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from loadmaster.model import ClusterSnapshot, TaskPlacement, TaskRequest
from loadmaster.scheduling.reservation import (
    Release,
    ReleasePlan,
    _candidate_times,
    _room,
    _room_less,
    without_held,
)
from loadmaster.scheduling.state import WorkingState
from reservation_strategies import NODES, placements

_request = st.one_of(
    st.builds(
        TaskRequest, gpu_milli=st.sampled_from([1000, 2000, 4000]), cpu_milli=st.sampled_from([0, 500])
    ),
    st.builds(TaskRequest, gpu_milli=st.sampled_from([250, 500]), memory_mib=st.sampled_from([0, 1000])),
    st.builds(TaskRequest, gpu_milli=st.just(0), cpu_milli=st.sampled_from([0, 1000])),
)


def _state(taken: list[TaskPlacement]) -> WorkingState:
    state = WorkingState.from_snapshot(ClusterSnapshot.empty(NODES))
    for placement in taken:
        state.take_clamped(placement)
    return state


@settings(max_examples=200, deadline=None)
@given(
    taken=st.lists(placements, max_size=8),
    held=st.lists(placements, max_size=6),
    request=_request,
    allowed=st.lists(st.booleans(), min_size=4, max_size=4),
)
def test_room_less_equals_room_of_the_built_view(
    taken: list[TaskPlacement], held: list[TaskPlacement], request: TaskRequest, allowed: list[bool]
) -> None:
    state = _state(taken)
    holding = state.held(held)
    mask = np.array(allowed)
    assert _room_less(state, holding, mask, request) == _room(without_held(state, holding), mask, request)


@settings(max_examples=100, deadline=None)
@given(
    ends=st.lists(st.lists(placements, min_size=1, max_size=3).map(tuple), max_size=6), k=st.integers(0, 6)
)
def test_per_node_release_sums_match_the_rows(ends: list[tuple[TaskPlacement, ...]], k: int) -> None:
    plan = ReleasePlan([Release(float(i), p) for i, p in enumerate(ends)], {})
    k = min(k, len(ends))
    gpus, cpus, memories = plan.per_node(k, len(NODES))
    released = [p for placements in ends[:k] for p in placements]
    assert gpus.tolist() == [sum(len(p.gpu_indices) for p in released if p.node == n) for n in range(4)]
    assert cpus.tolist() == [sum(p.cpu_milli for p in released if p.node == n) for n in range(4)]
    assert memories.tolist() == [sum(p.memory_mib for p in released if p.node == n) for n in range(4)]
    assert plan.per_node(k, len(NODES)) is plan.per_node(k, len(NODES))


def _rows(plan: ReleasePlan) -> tuple[list[float], list[list[int]], list[list[int]], list[int], list[int]]:
    return (
        plan.times,
        plan.gpu.tolist(),
        plan.node.tolist(),
        plan.gpu_upto.tolist(),
        plan.node_upto.tolist(),
    )


@settings(max_examples=60, deadline=None)
@given(
    cycles=st.lists(
        st.tuples(
            st.lists(st.integers(0, 11), max_size=8, unique=True),  # which of 12 jobs run (in this order)
            st.sampled_from([0.0, 15.0, 30.0, 60.0]),  # now
        ),
        min_size=1,
        max_size=6,
    ),
    placements=st.lists(st.lists(placements, min_size=1, max_size=3).map(tuple), min_size=12, max_size=12),
    starts=st.lists(st.sampled_from([0.0, 5.0, 10.0]), min_size=12, max_size=12),
    limits=st.lists(st.sampled_from([10.0, 20.0, 40.0]), min_size=12, max_size=12),
)
def test_release_book_plans_as_the_plan_built_each_cycle(
    cycles: list[tuple[list[int], float]],
    placements: list[tuple[TaskPlacement, ...]],
    starts: list[float],
    limits: list[float],
) -> None:
    from builders import a_job  # noqa: PLC0415
    from loadmaster.model import RunningJob  # noqa: PLC0415
    from loadmaster.scheduling.reservation import ReleaseBook, releases  # noqa: PLC0415

    jobs = [RunningJob(a_job(f"j{i}").limit(limits[i]).build(), placements[i], starts[i]) for i in range(12)]
    book = ReleaseBook()
    for chosen, now in cycles:
        running = [jobs[i] for i in chosen]
        expected = ReleasePlan(releases(running, now, {r.job.id: r.job.time_limit_s for r in running}), {})
        got = book.plan(running, now, lambda r: r.job.time_limit_s)
        assert _rows(got) == _rows(expected)
        assert [(e.end_s, e.placements) for e in got.ends] == [(e.end_s, e.placements) for e in expected.ends]
        assert len(book) <= 2 * len(running) + 1024


def test_release_book_drops_ended_jobs_and_still_plans_the_same() -> None:
    from builders import a_job  # noqa: PLC0415
    from loadmaster.model import RunningJob  # noqa: PLC0415
    from loadmaster.scheduling.reservation import ReleaseBook, releases  # noqa: PLC0415

    book = ReleaseBook()
    for cycle in range(4):
        running = [
            RunningJob(
                a_job(f"c{cycle}-{i}").limit(float(i % 7 + 1)).build(),
                (TaskPlacement(i % 4, (i % 4,), 1000, i, 2 * i),),
                float(cycle),
            )
            for i in range(600)
        ]
        expected = ReleasePlan(releases(running, 3.0, {r.job.id: r.job.time_limit_s for r in running}), {})
        got = book.plan(running, 3.0, lambda r: r.job.time_limit_s)
        assert _rows(got) == _rows(expected)
        assert len(book) <= 2 * 600 + 1024


@settings(max_examples=300, deadline=None)
@given(
    times=st.lists(st.sampled_from([0.0, 1.0, 2.5, 3.0, 7.0, 7.5, 9.0, 40.0]), max_size=200).map(sorted),
    ends=st.lists(st.sampled_from([0.5, 1.0, 3.0, 8.0, 9.0, 50.0, 60.0]), max_size=12),
    first=st.integers(0, 200),
)
def test_candidate_times_are_the_sorted_set(times: list[float], ends: list[float], first: int) -> None:
    """Made block by block, the candidates are the sorted set the scan used to build in one go."""
    first = min(first, len(times))
    start = times[first - 1] if first else 0.0
    later = [e for e in ends if e > start]
    assert list(_candidate_times(start, times, first, later)) == sorted({start, *times[first:], *later})
