"""Resource fit: how many tasks of a request each node can take, and why not.

Fit is physics, not policy: it is always applied, before any filter plugin.
Everything here is vectorised over nodes.
"""

from __future__ import annotations

from collections.abc import Mapping

import numpy as np
import numpy.typing as npt

from loadmaster.model import MILLI_PER_GPU, Job, NodeTable, TaskRequest
from loadmaster.scheduling.state import WorkingState

IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]

UNLIMITED = np.int64(1 << 40)
"""Capacity along a dimension the request does not use."""


def static_mask(nodes: NodeTable, job: Job) -> BoolArray:
    """Nodes the job may ever use: its pool, resource type and node selector."""
    mask = np.ones(len(nodes), dtype=bool)
    if job.pool is not None:
        mask &= nodes.pool_index == (nodes.pools.index(job.pool) if job.pool in nodes.pools else -1)
    if job.resource_type is not None:
        known = job.resource_type in nodes.type_names
        mask &= nodes.type_index == (nodes.type_names.index(job.resource_type) if known else -1)
    if job.node_selector:
        mask &= np.array([_matches(n.labels, job.node_selector) for n in nodes.nodes], dtype=bool)
    return mask


def _matches(labels: Mapping[str, str], selector: Mapping[str, str]) -> bool:
    return all(labels.get(key) == value for key, value in selector.items())


def describe_static(job: Job) -> str:
    """The job's placement constraints in words, for reasons."""
    parts = []
    if job.pool is not None:
        parts.append(f"pool={job.pool}")
    if job.resource_type is not None:
        parts.append(f"type={job.resource_type}")
    parts.extend(f"{k}={v}" for k, v in sorted(job.node_selector.items()))
    return ", ".join(parts) or "any node"


def capacity(state: WorkingState, request: TaskRequest) -> IntArray:
    """How many more tasks of ``request`` each node can take right now."""
    cap = np.full(len(state.nodes), UNLIMITED, dtype=np.int64)
    if request.whole_gpus:
        cap = np.minimum(cap, state.whole_free // request.whole_gpus)
    elif request.is_fractional:
        per_gpu = state.gpu_free // request.gpu_milli
        cap = np.minimum(cap, per_gpu.sum(axis=1))
    elif request.mig_profile is not None:
        cap = np.minimum(cap, mig_free(state, request.mig_profile))
    if request.cpu_milli:
        cap = np.minimum(cap, state.cpu_free // request.cpu_milli)
    if request.memory_mib:
        cap = np.minimum(cap, state.memory_free // request.memory_mib)
    if state.pods_free is not None:
        cap = np.minimum(cap, state.pods_free)
    return cap


def mig_free(state: WorkingState, profile: str) -> IntArray:
    """Free MIG instances of ``profile`` on ready GPUs, per node (zeros when no GPU is in MIG mode)."""
    if state.mig is None:
        return np.zeros(len(state.nodes), dtype=np.int64)
    return state.mig.free_count(profile)


def fits_one(state: WorkingState, request: TaskRequest) -> BoolArray:
    """Nodes that can take one more task of ``request`` (``capacity >= 1``, computed more cheaply)."""
    if request.whole_gpus:
        mask = state.whole_free >= request.whole_gpus
    elif request.is_fractional:
        mask = state.largest_share >= request.gpu_milli
    elif request.mig_profile is not None:
        mask = mig_free(state, request.mig_profile) >= 1
    else:
        mask = np.ones(len(state.nodes), dtype=bool)
    if request.cpu_milli:
        mask &= state.cpu_free >= request.cpu_milli
    if request.memory_mib:
        mask &= state.memory_free >= request.memory_mib
    if state.pods_free is not None:
        mask &= state.pods_free >= 1
    return mask


_WHOLE_PHRASE = "largest free block is {v}"
_SHARE_PHRASE = "largest free share is {v}m"


def block_shortfall(state: WorkingState, request: TaskRequest, allowed: BoolArray) -> str | None:
    """:func:`explain`'s reason where its first check already fails: no allowed node has the whole
    GPUs (or the share of one GPU) a task asks for. Found from ``WorkingState.largest_block``, kept
    while the state is unchanged, so the many requests of a cycle that fail for want of GPUs do not
    scan the nodes each. None where some allowed node has them, or the request asks no GPU or MIG.
    """
    if request.whole_gpus:
        wanted, fractional, unit, phrase = request.whole_gpus, False, "", _WHOLE_PHRASE
    elif request.is_fractional:
        wanted, fractional, unit, phrase = request.gpu_milli, True, "m", _SHARE_PHRASE
    else:
        return None
    best, value = state.largest_block(allowed, fractional=fractional)
    if value >= wanted:
        return None
    # value is -1 only where no node is allowed: explain then names node 0 with nothing free.
    text = phrase.format(v=max(value, 0))
    return f"gpu: want {wanted}{unit} on one node, {text} on {state.nodes.nodes[best].name}"


def explain(
    state: WorkingState, request: TaskRequest, allowed: BoolArray, taken: IntArray | None = None
) -> str:
    """Why no allowed node can take one more task: the first resource that falls short.

    Names what was wanted and the best that any allowed node offers, for
    example ``gpu: want 8 on one node, largest free block is 6 on n17``.
    ``taken`` counts tasks of ``request`` per node as placed already, for a whole-GPU or GPU-less
    request (each task then takes exactly its whole GPUs, CPU, memory and a pod slot): the
    reason on the state those placements would leave, without making them.
    """
    if taken is not None and (request.is_fractional or request.mig_profile is not None):
        raise ValueError("explain: tasks counted as taken need a whole-GPU or GPU-less request")

    def less(free: IntArray, per_task: int) -> IntArray:
        return free if taken is None else free - taken * per_task

    if taken is None:
        short = block_shortfall(state, request, allowed)
        if short is not None:
            return short
    names = state.nodes.nodes
    checks: list[tuple[str, int, IntArray, str]] = []
    if request.whole_gpus:
        whole = less(state.whole_free, request.whole_gpus)
        checks.append(("gpu", request.whole_gpus, whole, _WHOLE_PHRASE))
    elif request.is_fractional:
        checks.append(("gpu", request.gpu_milli, state.largest_share, _SHARE_PHRASE))
    elif request.mig_profile is not None:
        phrase = "most free is {v}"
        checks.append((f"MIG {request.mig_profile}", 1, mig_free(state, request.mig_profile), phrase))
    checks.append(("cpu", request.cpu_milli, less(state.cpu_free, request.cpu_milli), "most free is {v}m"))
    memory = less(state.memory_free, request.memory_mib)
    checks.append(("memory", request.memory_mib, memory, "most free is {v} MiB"))
    if state.pods_free is not None:
        checks.append(("pods", 1, less(state.pods_free, 1), "most free is {v} (allocatable pods)"))
    candidates = allowed.copy()
    for resource, wanted, free, phrase in checks:
        best = int(np.argmax(np.where(candidates, free, -1)))
        if free[best] < wanted or not candidates[best]:
            unit = {"gpu": "" if request.whole_gpus else "m", "cpu": "m", "memory": " MiB"}.get(resource, "")
            text = phrase.format(v=int(free[best]) if candidates[best] else 0)
            return f"{resource}: want {wanted}{unit} on one node, {text} on {names[best].name}"
        candidates &= free >= wanted
    return "no node can take the task"


def choose_gpus(state: WorkingState, node: int, request: TaskRequest) -> tuple[int, ...]:
    """GPU indices on ``node`` for one task: lowest free whole GPUs, or the best-fitting share."""
    row = state.gpu_free[node]
    if request.whole_gpus:
        # A plain loop: a node has a handful of GPUs, where numpy's call overhead dominates.
        free = [gpu for gpu, milli in enumerate(row.tolist()) if milli == MILLI_PER_GPU]
        return tuple(free[: request.whole_gpus])
    if request.is_fractional:
        # Best fit keeps whole GPUs whole for later whole-GPU jobs.
        fits = np.where(row >= request.gpu_milli, row, MILLI_PER_GPU + 1)
        return (int(np.argmin(fits)),)
    return ()
