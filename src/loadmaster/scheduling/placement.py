"""Placing the tasks of one job: filters, scores and the gang's topology, in one transaction.

A job that fits on one node lands on one node; a job larger than any node
takes the nodes that can hold most of it first (whole nodes where it can),
inside one rack where one rack can hold it, so its workers talk over
NVLink/PCIe, or one InfiniBand leaf switch, wherever possible.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError
from loadmaster.model import MILLI_PER_GPU, NodeTable, PendingJob, TaskPlacement, TaskRequest
from loadmaster.model.cuda import requirement
from loadmaster.scheduling import fit
from loadmaster.scheduling.framework import (
    BoolArray,
    CycleContext,
    FloatArray,
    GpuChoicePlugin,
    PlaceGangPlugin,
    ScorePlugin,
)
from loadmaster.scheduling.status import SUCCESS, Status, unschedulable

CUDA_FILTERED = "cuda-compat"
"""``ctx.data`` key the cuda-compat filter sets in a cycle where it kept jobs off incompatible drivers."""


def default_choose_node(
    capacity: npt.NDArray[np.int64],
    remaining: int,
    used: Sequence[int],
    scores: FloatArray,
    nodes: NodeTable,
) -> int:
    """Topology rule: fewest nodes first, then one rack (one InfiniBand leaf) for a multi-node job.

    A job one node can hold goes to the best-scoring such node, never split.
    A multi-node job stays in the racks of the nodes it already has while
    they have room; its first node goes to a rack that can hold the whole job
    if any can. Among the candidate nodes, one that takes all remaining tasks
    wins, else the one that takes the most. Ties go to the higher score, then
    the lower index. Returns -1 when no node can take a task.
    """
    if capacity.size == 0 or capacity.max() <= 0:
        return -1
    candidates = _rack_candidates(capacity, remaining, used, nodes)
    whole = candidates & (capacity >= remaining)
    if whole.any():
        return _best(whole, scores)
    most = capacity[candidates].max()
    return _best(candidates & (capacity == most), scores)


def _rack_candidates(
    capacity: npt.NDArray[np.int64], remaining: int, used: Sequence[int], nodes: NodeTable
) -> BoolArray:
    has_room = capacity > 0
    if used:
        # A lookup table of racks, indexed by each node's rack: np.isin would sort on every call.
        racks = np.zeros(len(nodes.racks), dtype=bool)
        racks[nodes.rack_index[list(used)]] = True
        same = racks[nodes.rack_index] & has_room
        if same.any():
            return same
    elif (capacity >= remaining).any():
        return has_room  # one node holds the whole job: racks do not matter
    per_rack = np.bincount(nodes.rack_index, weights=np.maximum(capacity, 0), minlength=len(nodes.racks))
    holding = per_rack >= remaining
    if holding.any():
        return holding[nodes.rack_index] & has_room
    return has_room


def _best(candidates: BoolArray, scores: FloatArray) -> int:
    return int(np.argmax(np.where(candidates, scores, -np.inf)))


@dataclass(frozen=True, slots=True)
class Scoring:
    """The score plugins of a profile with their weights, and the first that chooses GPUs (if any)."""

    plugins: tuple[tuple[ScorePlugin, float], ...]
    gpu_choice: GpuChoicePlugin | None = None

    def __post_init__(self) -> None:
        if self.gpu_choice is None:
            found = next((p for p, _ in self.plugins if isinstance(p, GpuChoicePlugin)), None)
            object.__setattr__(self, "gpu_choice", found)

    @property
    def pure(self) -> bool:
        """True when no score and no GPU choice draws from the random stream or reads ``ctx.data``:
        skipping a placement then changes nothing but the state it would have left."""
        choice = self.gpu_choice
        return all(p.pure for p, _ in self.plugins) and (choice is None or getattr(choice, "pure", False))

    def combined(self, pending: PendingJob, ctx: CycleContext) -> FloatArray:
        if len(self.plugins) == 1 and self.plugins[0][1] == 1.0:
            return self.plugins[0][0].score(pending.job, pending.job.request, ctx)
        total = np.zeros(len(ctx.state.nodes), dtype=np.float64)
        for plugin, weight in self.plugins:
            total += weight * plugin.score(pending.job, pending.job.request, ctx)
        return total


def place_job(
    pending: PendingJob,
    allowed: BoolArray,
    ctx: CycleContext,
    scoring: Scoring,
    topology: PlaceGangPlugin | None,
    *,
    all_or_nothing: bool = False,
) -> tuple[list[TaskPlacement], Status]:
    """Place as many of the job's remaining tasks as fit, updating ``ctx.state``.

    Returns the placements made and SUCCESS, or the placements made before
    the first task that could not be placed and the reason it could not.
    The caller decides (``permit``) whether to keep a partial placement.

    ``all_or_nothing``: the caller discards any placement short of the remaining tasks (a gang
    permit). Where the allowed nodes cannot hold them by count, the default node-by-node rule
    would fill every allowed node and fail (each node's capacity falls by exactly the tasks it
    takes, whatever the order it visits nodes in); with pure scores and a whole-GPU or GPU-less
    request, that failure is returned at once, with the same reason, and nothing is placed. On a
    large cluster with a blocked gang at the head of the queue this is most of a strict FIFO
    cycle (docs/simulator.md, "Repeat cycles skipped (strict FIFO)").
    """
    request = pending.job.request
    remaining = pending.job.tasks - len(pending.bound)
    if remaining == 1 and topology is None:
        return _place_one(pending, allowed, ctx, scoring)
    if topology is None and request.mig_profile is None and scoring.pure:
        # No allowed node has the GPUs of one task: every node's capacity is 0, so the loop below
        # would score the nodes (pure: no draw to skip), find no node and fail with this reason.
        short = fit.block_shortfall(ctx.state, request, allowed)
        if short is not None:
            return [], unschedulable(_shortfall(pending, 0, allowed, ctx, why=short), "fit")
    used: list[int] = []
    placed: list[TaskPlacement] = []
    choose = topology.choose_node if topology is not None else default_choose_node
    take = _task_taker(pending, scoring)
    # Tasks of a whole-GPU or GPU-less request on one node, GPUs chosen by fit: one update for all.
    batched = scoring.gpu_choice is None and not request.is_fractional and request.mig_profile is None
    if request.mig_profile is not None:
        # MIG instances cannot talk over NVLink: a gang of them gains nothing from sharing a node
        # or a rack, so no topology rule applies: the best-scoring node with room, then the next.
        choose, take = mig_choose_node, _take_mig_task
    # Taking t tasks from a node lowers its capacity by exactly t (every term of the minimum in
    # fit.capacity drops by t) and leaves other nodes alone: computed once, then kept in step.
    cap = np.where(allowed, fit.capacity(ctx.state, request), 0)
    if (
        all_or_nothing
        and topology is None
        and request.mig_profile is None
        and not request.is_fractional
        and scoring.pure
        and int(cap.sum()) < remaining
    ):
        return [], unschedulable(_shortfall(pending, int(cap.sum()), allowed, ctx, taken=cap), "fit")
    while remaining > 0:
        scores = scoring.combined(pending, ctx)
        node = choose(cap.copy(), remaining, used, scores, ctx.state.nodes)
        if node < 0:
            return placed, unschedulable(_shortfall(pending, len(placed), allowed, ctx), "fit")
        taken = min(int(cap[node]), remaining)
        if batched:
            placed.extend(ctx.state.take_whole(node, request, taken))
        else:
            for _ in range(taken):
                placed.append(take(ctx, node, request))
        cap[node] -= taken
        remaining -= taken
        used.append(node)
    return placed, SUCCESS


def _place_one(
    pending: PendingJob, allowed: BoolArray, ctx: CycleContext, scoring: Scoring
) -> tuple[list[TaskPlacement], Status]:
    """The common case, one task left: the best-scoring node that fits (what the general loop does)."""
    request = pending.job.request
    short = fit.block_shortfall(ctx.state, request, allowed)  # the usual failure, found without a scan
    if short is not None:
        return [], unschedulable(_shortfall(pending, 0, allowed, ctx, why=short), "fit")
    fits = allowed & fit.fits_one(ctx.state, request)
    if not fits.any():
        return [], unschedulable(_shortfall(pending, 0, allowed, ctx), "fit")
    node = _best(fits, scoring.combined(pending, ctx))
    take = _task_taker(pending, scoring) if request.mig_profile is None else _take_mig_task
    return [take(ctx, node, request)], SUCCESS


def _task_taker(
    pending: PendingJob, scoring: Scoring
) -> Callable[[CycleContext, int, TaskRequest], TaskPlacement]:
    """``_take_task`` with the GPUs chosen by the profile's GPU-choice plugin, where it has one."""
    choice = scoring.gpu_choice
    if choice is None:
        return _take_task
    job = pending.job

    def take(ctx: CycleContext, node: int, request: TaskRequest) -> TaskPlacement:
        return _take_task(ctx, node, request, choice.choose_gpus(job, request, node, ctx))

    return take


def _take_task(
    ctx: CycleContext, node: int, request: TaskRequest, gpus: tuple[int, ...] | None = None
) -> TaskPlacement:
    """One task of ``request`` on ``node``'s chosen GPUs (``gpus``, else ``fit.choose_gpus``), taken from
    ``ctx.state``."""
    placement = TaskPlacement(
        node=node,
        gpu_indices=gpus if gpus is not None else fit.choose_gpus(ctx.state, node, request),
        gpu_milli=min(request.gpu_milli, MILLI_PER_GPU),
        cpu_milli=request.cpu_milli,
        memory_mib=request.memory_mib,
    )
    ctx.state.take(placement)
    return placement


def mig_choose_node(
    capacity: npt.NDArray[np.int64],
    remaining: int,
    used: Sequence[int],
    scores: FloatArray,
    nodes: NodeTable,
) -> int:
    """Node rule for MIG tasks: the best-scoring node with a free instance, one task at a time.

    No fewest-nodes or same-rack preference: MIG instances are never
    NVLink-connected, so a MIG gang has no topology to gain.
    """
    del remaining, used, nodes
    has_room = capacity > 0
    return _best(has_room, scores) if has_room.any() else -1


def _take_mig_task(ctx: CycleContext, node: int, request: TaskRequest) -> TaskPlacement:
    """One MIG instance of ``request``'s profile on ``node``, taken from ``ctx.state``."""
    profile = request.mig_profile or ""
    placement = ctx.state.take_mig(node, profile, request.cpu_milli, request.memory_mib)
    if placement is None:
        raise ModelError(f"node {node}: fit found a free MIG {profile} instance that the state does not have")
    return placement


def _shortfall(
    pending: PendingJob,
    placed: int,
    allowed: BoolArray,
    ctx: CycleContext,
    taken: npt.NDArray[np.int64] | None = None,
    *,
    why: str | None = None,
) -> str:
    """Why task ``placed + 1`` (after the bound ones) found no node; ``taken``: see ``fit.explain``;
    ``why``: the resource's reason where the caller has it (``fit.block_shortfall``)."""
    job = pending.job
    if why is None:
        why = fit.explain(ctx.state, job.request, allowed, taken)
    if job.cuda is not None and CUDA_FILTERED in ctx.data:  # say which drivers the counted nodes have
        why = f"{why} (counting only nodes with {requirement(job.cuda, job.cuda_compat)} for CUDA {job.cuda})"
    done = len(pending.bound) + placed
    if job.tasks == 1:
        return why
    return f"gang of {job.tasks} tasks: {done} placed, task {done + 1}: {why}"
