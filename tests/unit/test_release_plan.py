"""A release plan merged with the releases of jobs started in the cycle equals one built from all of them."""

from __future__ import annotations

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from fuzzing import examples
from loadmaster.model import Job, RunningJob, TaskPlacement, TaskRequest
from loadmaster.scheduling.reservation import Release, ReleaseBook, ReleasePlan

_placement = st.builds(
    TaskPlacement,
    node=st.integers(0, 5),
    gpu_indices=st.lists(st.integers(0, 7), min_size=0, max_size=4, unique=True).map(tuple),
    gpu_milli=st.sampled_from([250, 1000]),
    cpu_milli=st.integers(0, 4000),
    memory_mib=st.integers(0, 9000),
)
_release = st.builds(
    Release,
    end_s=st.sampled_from([10.0, 20.0, 30.0, 45.0]),
    placements=st.lists(_placement, min_size=1, max_size=3).map(tuple),
)


def _rows_by_release(plan: ReleasePlan) -> list[tuple[float, list[list[int]], list[list[int]]]]:
    return [
        (
            plan.times[k],
            plan.gpu[plan.gpu_upto[k] : plan.gpu_upto[k + 1]].tolist(),
            plan.node[plan.node_upto[k] : plan.node_upto[k + 1]].tolist(),
        )
        for k in range(len(plan.times))
    ]


@settings(max_examples=examples(150), deadline=None)
@given(base=st.lists(_release, max_size=6), extra=st.lists(_release, max_size=6))
def test_merged_plan_equals_plan_built_from_every_release(base: list[Release], extra: list[Release]) -> None:
    base.sort(key=lambda r: r.end_s)
    extra.sort(key=lambda r: r.end_s)
    merged = ReleasePlan(base, {}).plus(extra)
    everyone = sorted([*base, *extra], key=lambda r: r.end_s)  # stable: base first on ties
    whole = ReleasePlan(everyone, {})
    assert merged.times == whole.times
    # The same releases in the same order: each one's time and its very placements (a merged plan
    # makes its releases on demand, so the Release objects themselves are new).
    pairs = zip(merged.ends, whole.ends, strict=True)
    assert [(e.end_s, e.placements is w.placements) for e, w in pairs] == [
        (w.end_s, True) for w in whole.ends
    ]
    assert _rows_by_release(merged) == _rows_by_release(whole)
    assert np.array_equal(merged.gpu_upto, whole.gpu_upto)
    assert np.array_equal(merged.node_upto, whole.node_upto)


@settings(max_examples=examples(150), deadline=None)
@given(base=st.lists(_release, max_size=6), extra=st.lists(_release, max_size=6))
def test_cumulative_matrices_hold_per_node_for_every_k(base: list[Release], extra: list[Release]) -> None:
    """The first-fit search reads every k at once from these rows; they are ``per_node(k)``,
    also on a plan merged with the cycle's starts (its matrices are built anew)."""
    base.sort(key=lambda r: r.end_s)
    extra.sort(key=lambda r: r.end_s)
    plan = ReleasePlan(base, {})
    plan.cumulative(6)
    for candidate in (plan, plan.plus(extra)):
        matrices = candidate.cumulative(6)
        assert matrices is not None
        for k in range(len(candidate.times) + 1):
            for row, expected in zip(matrices, candidate.per_node(k, 6), strict=True):
                assert row[k].tolist() == expected.tolist()


@settings(max_examples=examples(100), deadline=None)
@given(
    ends=st.lists(st.sampled_from([10.0, 20.0, 30.0, 45.0]), min_size=1, max_size=8),
    extra=st.lists(_release, max_size=4),
    now=st.sampled_from([0.0, 15.0, 40.0]),
)
def test_tail_arrays_kept_by_the_book_are_those_of_the_fingerprint(
    ends: list[float], extra: list[Release], now: float
) -> None:
    """The times and placement identities a book's plan carries (and keeps in step through a merge)
    are the ones made from its fingerprint: two plans' common tail is compared on them."""
    running = [RunningJob(_job(f"j{i}"), (_one(i),), 0.0) for i in range(len(ends))]
    estimate = dict(zip((r.job.id for r in running), ends, strict=True))
    plan = ReleaseBook().plan(running, now, lambda r: estimate[r.job.id])
    for candidate in (plan, plan.plus(extra)):
        kept = candidate.tail_arrays()
        times, placements = candidate.fingerprint()
        assert kept[0].tolist() == list(times)
        assert kept[1].tolist() == [id(p) for p in placements]


def _job(job_id: str) -> Job:
    return Job(
        id=job_id,
        user="u",
        group="g",
        submit_s=0.0,
        tasks=1,
        request=TaskRequest(gpu_milli=1000),
        time_limit_s=60.0,
    )


def _one(node: int) -> TaskPlacement:
    return TaskPlacement(node=node % 6, gpu_indices=(0,), gpu_milli=1000, cpu_milli=0, memory_mib=0)
