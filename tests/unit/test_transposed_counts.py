"""Counts over many nodes taken across a transposed copy give what the row-wise reductions give.

``model.gpu_summary`` and the reservation scan's vectorised room count (``_Rooms.enough_flat``)
reduce through ``model.per_node``: a contiguous transposed copy from ``TRANSPOSED_FROM_NODES``
nodes on (a large cluster), along rows below it; both feed decisions, so both ways must agree
on any free resources.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import a_cluster
from loadmaster.model import (
    MILLI_PER_GPU,
    TRANSPOSED_FROM_NODES,
    ClusterSnapshot,
    TaskRequest,
    gpu_summary,
    snapshot,
)
from loadmaster.scheduling import reservation
from loadmaster.scheduling.state import WorkingState

_SHARES = np.array([0, 250, 500, 750, MILLI_PER_GPU], dtype=np.int64)


@settings(max_examples=60, deadline=None)
@given(
    nodes=st.sampled_from([1, 3, TRANSPOSED_FROM_NODES - 1, TRANSPOSED_FROM_NODES, 130]),
    gpus=st.sampled_from([0, 1, 4, 8]),
    seed=st.integers(0, 2**32 - 1),
)
def test_gpu_summary_matches_the_row_wise_counts(nodes: int, gpus: int, seed: int) -> None:
    free = np.random.default_rng(seed).choice(_SHARES, size=(nodes, gpus))
    whole, largest, total = gpu_summary(free)
    assert whole.tolist() == [int(np.sum(row == MILLI_PER_GPU)) for row in free]
    assert largest.tolist() == [int(row.max()) if gpus else 0 for row in free]
    assert total.tolist() == [int(row.sum()) for row in free]
    assert whole.dtype == largest.dtype == total.dtype == np.int64


@pytest.mark.parametrize("whole_gpus", [1, 2, 8])
@pytest.mark.parametrize("seed", range(6))
def test_vectorised_room_count_is_the_same_either_way(
    monkeypatch: pytest.MonkeyPatch, whole_gpus: int, seed: int
) -> None:
    rng = np.random.default_rng(seed)
    nodes = a_cluster().nodes(TRANSPOSED_FROM_NODES + 6, gpus=8).build()
    state = WorkingState.from_snapshot(ClusterSnapshot.empty(nodes))
    state.gpu_free[:] = rng.choice(_SHARES, size=state.gpu_free.shape)
    size = state.gpu_free.size + 2 * len(state.cpu_free)
    base = np.concatenate([state.gpu_free.ravel(), state.cpu_free, state.memory_free])
    released = np.cumsum(rng.choice([0, 0, 0, 250, 1000], size=(5, size)), axis=0)
    released[:, state.gpu_free.size :] = 0
    held = rng.choice([0, 0, 0, 0, 1000], size=(4, size))
    held[:, state.gpu_free.size :] = 0
    allowed = rng.random(len(state.cpu_free)) < 0.8
    request = TaskRequest(gpu_milli=whole_gpus * MILLI_PER_GPU)
    rooms = reservation._Rooms(state, released, base, allowed, request)
    uptos = [0, 2, 3, 4]
    for need in (1, 40, 90, 200):
        transposed = rooms.enough_flat(uptos, held.copy(), need)
        monkeypatch.setattr(snapshot, "TRANSPOSED_FROM_NODES", 10**9)
        row_wise = rooms.enough_flat(uptos, held.copy(), need)
        monkeypatch.undo()
        assert transposed == row_wise
