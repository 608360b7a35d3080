"""The learned policy's node features, made from cached placement arrays, equal the plain sums.

``observe.node_features`` adds each running job's released GPUs to its nodes at every horizon
point; the plugin keeps each job's placements as arrays from cycle to cycle. The features must be
the same to the bit as adding every placement one by one, in the running jobs' order (the policy's
scores, and so the schedule, read them), with and without the cache, as jobs start and end.
"""

from __future__ import annotations

import dataclasses

import numpy as np
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import a_cluster, a_job
from loadmaster.model import MILLI_PER_GPU, ClusterSnapshot, RunningJob, TaskPlacement
from loadmaster.scheduling.observe import NodeRows, ObservationSpec, node_features

SPEC = ObservationSpec()
CLUSTER = a_cluster().nodes(6, gpus=8).build()


def _by_hand(snapshot: ClusterSnapshot, now: float) -> np.ndarray:
    """Every placement added in turn: the definition the features keep."""
    gpus = np.maximum(snapshot.nodes.gpus, 1).astype(np.float64)
    free = np.asarray(snapshot.free_milli, dtype=np.float64) / MILLI_PER_GPU
    points = now + SPEC.horizon_step_s * np.arange(SPEC.horizon_steps + 1)
    released = np.zeros((len(free), len(points)))
    for job in snapshot.running:
        for placement in job.placements:
            share = len(placement.gpu_indices) * placement.gpu_milli / MILLI_PER_GPU
            for t, point in enumerate(points):
                if point >= job.expected_end_s and point > now:
                    released[placement.node, t] += share
    return np.clip((free[:, None] + released) / gpus[:, None], 0.0, 1.0).astype(np.float32)


_placement = st.builds(
    lambda node, gpus, milli: TaskPlacement(node, tuple(range(gpus)), milli, 0, 0),
    st.integers(0, len(CLUSTER.nodes) - 1),
    st.integers(1, 4),
    st.sampled_from([100, 250, 333, 500, 700, 1000]),
)
_job = st.tuples(
    st.lists(_placement, min_size=0, max_size=5),
    st.floats(0, 20_000),  # start
    st.sampled_from([600.0, 3_600.0, 7_200.0, 30_000.0]),  # limit
)


@settings(max_examples=80, deadline=None)
@given(cycles=st.lists(st.lists(_job, max_size=12), min_size=1, max_size=4), now=st.floats(0, 30_000))
def test_cached_features_equal_adding_each_placement(
    cycles: list[list[tuple[list[TaskPlacement], float, float]]], now: float
) -> None:
    cache = NodeRows()
    kept: list[RunningJob] = []
    for number, jobs in enumerate(cycles):
        made = [
            RunningJob(a_job(f"c{number}-{i}").gpus(1).limit(limit).build(), tuple(places), start)
            for i, (places, start, limit) in enumerate(jobs)
        ]
        running = kept[::2] + made  # some jobs end, others start: the cache sees both
        kept = running
        snapshot = dataclasses.replace(ClusterSnapshot.empty(CLUSTER), running=tuple(running))
        expected = _by_hand(snapshot, now)
        assert np.array_equal(node_features(snapshot, now, SPEC, cache), expected)
        assert np.array_equal(node_features(snapshot, now, SPEC), expected)


def test_the_book_grows_and_drops_ended_jobs() -> None:
    """Many cycles of jobs starting and ending: the arrays grow past their first size, and the
    book is emptied once ended jobs outnumber running ones; the features stay the plain sums."""
    rng = np.random.default_rng(7)
    book = NodeRows()
    running: list[RunningJob] = []
    for cycle in range(40):
        started = [
            RunningJob(
                a_job(f"j{cycle}-{i}").gpus(1).limit(float(rng.choice([600, 3_600, 20_000]))).build(),
                tuple(
                    TaskPlacement(int(rng.integers(6)), (0, 1), int(rng.choice([250, 333, 1000])), 0, 0)
                    for _ in range(3)
                ),
                float(rng.uniform(0, 5_000)),
            )
            for i in range(60)
        ]
        running = running[-30:] + started
        snapshot = dataclasses.replace(ClusterSnapshot.empty(CLUSTER), running=tuple(running))
        assert np.array_equal(node_features(snapshot, 4_000.0, SPEC, book), _by_hand(snapshot, 4_000.0))
