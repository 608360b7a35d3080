"""A gang that its allowed nodes cannot hold by count fails at once, exactly as placed task by task.

``place_job(all_or_nothing=True)`` skips the node-by-node placement of a gang whose permit would
refuse any shorter placement when the allowed nodes' capacities sum to fewer tasks than it has
left; the cycle must be the one the node-by-node placement gives: the same binds, the same
reasons (the one for the task that found no node, on the state the placement would have left)
and the same random stream.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import example, given, settings
from hypothesis import strategies as st

from builders import a_cluster, a_job, a_snapshot, profile
from fuzzing import examples
from loadmaster.scheduling import Scheduler, placement
from loadmaster.scheduling.actions import allocate
from loadmaster.scheduling.decisions import CycleResult
from loadmaster.scheduling.state import WorkingState

PROFILES = {
    "strict": profile("fifo", "gang", "binpack"),
    "lax": profile("fifo", "gang", "first-fit", strict=False),
    "backfill": profile("fifo", "gang", "binpack", "backfill", args={"backfill": {"mode": "easy"}}),
    "spread": profile("fifo", "gang", "spread", strict=False),
}

_job = st.tuples(
    st.integers(1, 6),  # tasks
    st.sampled_from([0.0, 1.0, 2.0, 4.0, 8.0]),  # whole GPUs per task (0: CPU only)
    st.sampled_from([0, 2]),  # min_available below tasks by this much (0: a full gang)
)


def _snapshot(nodes: int, used: list[int], pending: list[tuple[int, float, int]]):  # type: ignore[no-untyped-def]
    cluster = a_cluster().nodes(nodes, gpus=8).build()
    builder = a_snapshot(cluster)
    for i, gpus in enumerate(used[:nodes]):
        builder.used(f"n{i}", gpus)
    jobs = []
    for i, (tasks, gpus, short) in enumerate(pending):
        job = a_job(f"j{i}").tasks(tasks).gpus(gpus).submitted(float(i)).limit(3600.0)
        if short and tasks > short:
            job = job.min_available(tasks - short)
        jobs.append(job)
    return builder.pending(*jobs).build()


def _run(
    name: str, snapshot, monkeypatch: pytest.MonkeyPatch, *, shortcut: bool
) -> tuple[CycleResult, object]:  # type: ignore[no-untyped-def]
    real = placement.place_job

    def task_by_task(*args, **kwargs):  # type: ignore[no-untyped-def]
        kwargs["all_or_nothing"] = False
        return real(*args, **kwargs)

    with monkeypatch.context() as patch:
        if not shortcut:
            patch.setattr(allocate, "place_job", task_by_task)
        rng = np.random.default_rng(7)
        result = Scheduler(PROFILES[name]).cycle(snapshot, 0.0, rng)
    return result, rng.bit_generator.state


@settings(max_examples=examples(120), deadline=None)
# A full gang failed by count, then a job of the same request that may start with fewer tasks:
# it must still be placed (the failure memo once shared their entry).
@example(name="lax", nodes=1, used=[5, 0, 0, 0, 0], pending=[(4, 1.0, 0), (4, 1.0, 2)])
@given(
    name=st.sampled_from(sorted(PROFILES)),
    nodes=st.integers(1, 5),
    used=st.lists(st.integers(0, 8), min_size=5, max_size=5),
    pending=st.lists(_job, min_size=1, max_size=6),
)
def test_a_gang_short_by_count_fails_as_placed_task_by_task(
    name: str, nodes: int, used: list[int], pending: list[tuple[int, float, int]]
) -> None:
    snapshot = _snapshot(nodes, used, pending)
    with pytest.MonkeyPatch.context() as monkeypatch:
        fast, fast_rng = _run(name, snapshot, monkeypatch, shortcut=True)
        slow, slow_rng = _run(name, snapshot, monkeypatch, shortcut=False)
    assert fast.decisions == slow.decisions
    assert {k: str(v) for k, v in fast.statuses.items()} == {k: str(v) for k, v in slow.statuses.items()}
    assert {k: str(v) for k, v in fast.blocked.items()} == {k: str(v) for k, v in slow.blocked.items()}
    assert fast_rng == slow_rng


def test_the_shortcut_is_taken_and_names_the_task_that_found_no_node(monkeypatch: pytest.MonkeyPatch) -> None:
    """Two nodes with 3 free GPUs each cannot hold a gang of 4 two-GPU tasks (2 fit): it fails without
    placing a task, with the reason the node-by-node placement gives for its third task."""
    snapshot = _snapshot(2, [5, 5], [(4, 2.0, 0)])
    taken: list[int] = []
    real = WorkingState.take

    def counting(self, placement_):  # type: ignore[no-untyped-def]
        taken.append(placement_.node)
        real(self, placement_)

    monkeypatch.setattr(WorkingState, "take", counting)
    result = Scheduler(PROFILES["strict"]).cycle(snapshot, 0.0, np.random.default_rng(0))
    assert taken == []
    assert str(result.statuses["j0"].reason) == (
        "gang of 4 tasks: 2 placed, task 3: gpu: want 2 on one node, largest free block is 1 on n0"
    )
