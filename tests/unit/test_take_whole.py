"""Several tasks taken on one node at once leave what taking them one by one leaves.

``WorkingState.take_whole`` places ``count`` tasks of a whole-GPU or GPU-less request on a node
with one update (``place_job`` uses it where fit chooses the GPUs): the placements, the node's
free GPUs, summaries, CPU, memory and pod slots, and the rollback log must be those of ``count``
calls of ``take`` with ``fit.choose_gpus``. ``node_gpu_summary`` (list methods on one row) must
match the vectorised ``gpu_summary``.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import a_cluster, a_snapshot
from fuzzing import examples
from loadmaster.errors import ModelError
from loadmaster.model import MILLI_PER_GPU, TaskPlacement, TaskRequest, gpu_summary, node_gpu_summary
from loadmaster.scheduling import fit
from loadmaster.scheduling.state import WorkingState

_SHARES = np.array([0, 250, 500, MILLI_PER_GPU, MILLI_PER_GPU], dtype=np.int64)


def _state(seed: int, pods: bool) -> WorkingState:
    cluster = a_cluster().nodes(3, gpus=8).build()
    snap = a_snapshot(cluster).build()
    state = WorkingState.from_snapshot(snap)
    rng = np.random.default_rng(seed)
    state.gpu_free[:] = rng.choice(_SHARES, size=state.gpu_free.shape)
    state.whole_free[:], state.largest_share[:], state.free_milli[:] = gpu_summary(state.gpu_free)
    if pods:
        state.pods_free = np.full(len(state.nodes), 40, dtype=np.int64)
    return state


def _arrays(state: WorkingState) -> list[list[int]]:
    arrays = [state.gpu_free, state.whole_free, state.largest_share, state.free_milli]
    arrays += [state.cpu_free, state.memory_free]
    arrays += [state.pods_free] if state.pods_free is not None else []
    return [np.asarray(a).ravel().tolist() for a in arrays]


@settings(max_examples=examples(80), deadline=None)
@given(
    seed=st.integers(0, 2**32 - 1),
    gpus=st.sampled_from([0, 1, 2, 4]),
    pods=st.booleans(),
    node=st.integers(0, 2),
)
def test_take_whole_is_count_takes_in_a_row(seed: int, gpus: int, pods: bool, node: int) -> None:
    request = TaskRequest(gpu_milli=gpus * MILLI_PER_GPU, cpu_milli=1500, memory_mib=2048)
    one_by_one, at_once = _state(seed, pods), _state(seed, pods)
    count = int(fit.capacity(one_by_one, request)[node])
    count = min(count, 6)
    expected = []
    for _ in range(count):
        placement = TaskPlacement(
            node=node,
            gpu_indices=fit.choose_gpus(one_by_one, node, request),
            gpu_milli=min(request.gpu_milli, MILLI_PER_GPU),
            cpu_milli=request.cpu_milli,
            memory_mib=request.memory_mib,
        )
        one_by_one.take(placement)
        expected.append(placement)
    assert at_once.take_whole(node, request, count) == expected
    assert _arrays(at_once) == _arrays(one_by_one)
    at_once.rollback(0)
    assert _arrays(at_once) == _arrays(_state(seed, pods))


def test_take_whole_refuses_shares_and_too_many_tasks() -> None:
    state = _state(1, pods=False)
    with pytest.raises(ModelError, match="not a whole-GPU"):
        state.take_whole(0, TaskRequest(gpu_milli=500), 1)
    free = int(state.whole_free[0])
    with pytest.raises(ModelError, match="free GPUs"):
        state.take_whole(0, TaskRequest(gpu_milli=MILLI_PER_GPU), free + 1)


@settings(max_examples=examples(60), deadline=None)
@given(seed=st.integers(0, 2**32 - 1), gpus=st.sampled_from([1, 4, 8, 16]))
def test_node_summary_is_the_row_of_gpu_summary(seed: int, gpus: int) -> None:
    free = np.random.default_rng(seed).choice(_SHARES, size=(5, gpus))
    whole, largest, total = gpu_summary(free)
    for node, row in enumerate(free):
        assert node_gpu_summary(row) == (int(whole[node]), int(largest[node]), int(total[node]))
    assert node_gpu_summary(np.zeros(0, dtype=np.int64)) == (0, 0, 0)
