"""``fit.block_shortfall``: the GPU reason kept per state and mask is the one a fresh scan gives.

``WorkingState.largest_block`` keeps its answer until the GPU summaries change; these tests change
the state every way a cycle does (takes, whole-node takes, rollbacks, reservations subtracted,
clamped takes) and compare, after each change, the kept answer with a new state's and with the
scan ``fit.explain`` made before the answer was kept.
"""

from __future__ import annotations

import numpy as np
import numpy.typing as npt

from builders import a_cluster, a_job, a_snapshot
from loadmaster.model import MILLI_PER_GPU, TaskPlacement, TaskRequest
from loadmaster.scheduling import fit
from loadmaster.scheduling.state import WorkingState


def _scanned(state: WorkingState, request: TaskRequest, allowed: npt.NDArray[np.bool_]) -> str | None:
    """The first check of ``fit.explain`` as it was written before the answer was kept: a scan."""
    if request.whole_gpus:
        free, wanted, unit, phrase = state.whole_free, request.whole_gpus, "", "largest free block is {v}"
    elif request.is_fractional:
        free, wanted, unit, phrase = state.largest_share, request.gpu_milli, "m", "largest free share is {v}m"
    else:
        return None
    best = int(np.argmax(np.where(allowed, free, -1)))
    if free[best] >= wanted and allowed[best]:
        return None
    text = phrase.format(v=int(free[best]) if allowed[best] else 0)
    return f"gpu: want {wanted}{unit} on one node, {text} on {state.nodes.nodes[best].name}"


REQUESTS = [
    TaskRequest(gpu_milli=g, cpu_milli=1000, memory_mib=1024)
    for g in (250, 500, 750, 1000, 2000, 4000, 8000, 16000, 0)
]


def _check(state: WorkingState, masks: list[npt.NDArray[np.bool_]]) -> None:
    fresh = state.copy()  # a new state keeps nothing yet
    for allowed in masks:
        for request in REQUESTS:
            kept = fit.block_shortfall(state, request, allowed)
            assert kept == _scanned(state, request, allowed) == fit.block_shortfall(fresh, request, allowed)
            if kept is not None:  # no allowed node can take a task: the full fit test agrees
                assert not (allowed & fit.fits_one(state, request)).any()
                assert fit.explain(state, request, allowed) == kept


def test_the_kept_gpu_reason_follows_every_change_to_the_state() -> None:
    rng = np.random.default_rng(0)
    cluster = a_cluster().nodes(6, gpus=8).build()
    state = WorkingState.from_snapshot(a_snapshot(cluster).build())
    masks = [
        np.ones(6, dtype=bool),
        np.array([True, False, True, False, True, False]),
        np.zeros(6, dtype=bool),
    ]
    marks: list[int] = []
    for _ in range(400):
        _check(state, masks)
        step = rng.integers(6)
        node = int(rng.integers(6))
        if step <= 2:  # one task, whole GPUs or a share, where it fits
            request = REQUESTS[int(rng.integers(len(REQUESTS) - 1))]
            if fit.fits_one(state, request)[node]:
                milli = min(request.gpu_milli, MILLI_PER_GPU)
                placement = TaskPlacement(node, fit.choose_gpus(state, node, request), milli, 1000, 1024)
                state.take(placement)
        elif step == 3 and state.whole_free[node] >= 2:  # a gang's tasks on one node at once
            state.take_whole(node, TaskRequest(gpu_milli=1000, cpu_milli=0, memory_mib=0), 2)
        elif step == 4:
            if marks and rng.random() < 0.5:
                state.rollback(marks.pop())
            else:
                marks.append(state.mark())
        else:  # a reservation taken out, or a shadow's clamped take
            held = state.held([TaskPlacement(node, (0, 1), MILLI_PER_GPU, 0, 0)])
            if rng.random() < 0.5:
                state.subtract(held)
            else:
                state.take_clamped(TaskPlacement(node, (2,), MILLI_PER_GPU // 2, 0, 0))
    _check(state, masks)


def test_a_failed_placement_names_the_same_gpu_reason_with_and_without_the_kept_answer() -> None:
    cluster = a_cluster().nodes(3, gpus=8).build()
    snapshot = a_snapshot(cluster).used("n0", 6).used("n1", 7).used("n2", 8).build()
    state = WorkingState.from_snapshot(snapshot)
    allowed = np.ones(3, dtype=bool)
    request = a_job("j").gpus(4).build().request
    assert fit.explain(state, request, allowed) == "gpu: want 4 on one node, largest free block is 2 on n0"
    assert fit.explain(state.copy(), request, allowed, np.zeros(3, dtype=np.int64)) == fit.explain(
        state, request, allowed
    )
