"""GPU-sharing placement policies of the FGD paper (Weng et al., ATC'23), and a loadmaster variant.

Each policy is a score plugin that also says which GPUs of the chosen node a
task takes (:meth:`SharingPolicy.choose_gpus`): for a task that asks for a
share of one GPU, that choice is half of the policy. Scores follow the FGD
authors' simulator: whole numbers from 0 to 100 (``integer_scores``), which
ties many nodes; the driver breaks ties (lowest node index here, the node
order being a random permutation in the openb experiment). The GPU choice
is the framework's ``choose_gpus`` extension point: the scheduler's placement
(simulator, Kubernetes) and the FGD validation make the same choice.

| plugin | node score (higher wins) | GPU for a share |
|---|---|---|
| ``random-share`` | uniformly random | uniformly random among GPUs with room |
| ``best-fit`` | least CPU and GPU left after placing (each over the largest node) | best fit |
| ``dot-product`` | least dot product of free and asked (CPU, GPU), each over the largest node's | best fit |
| ``gpu-packing`` | partly used GPU with least left > fully free GPU of a used node > idle node | best fit |
| ``gpu-clustering`` | node running only tasks of the same GPU kind > mixed > idle > other kinds | best fit |
| ``fgd`` | least growth of fragmentation against the target workload | least growth |
| ``fgd-balanced`` | ``fgd``, adding the GPU stranded for want of CPU to the growth (ours) | as ``fgd`` |
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field
from typing import Annotated, ClassVar

import numpy as np
from pydantic import Field

from loadmaster.model import MILLI_PER_GPU, Job, TaskPlacement, TaskRequest
from loadmaster.scheduling import fit
from loadmaster.scheduling.framework import CycleContext, FloatArray, GpuChoicePlugin, Plugin, ScorePlugin
from loadmaster.scheduling.plugins.fragmentation import (
    CompiledWorkload,
    IntArray,
    NodeStats,
    TypicalTask,
    authors_fragmentation,
    fragmentation_growth,
    node_stats,
    typical_workload,
)
from loadmaster.scheduling.state import WorkingState

MAX_SCORE = 100
"""Top of the Kubernetes framework's node score range, which the published policies use."""
ZERO_GROWTH = 1e-6
"""Milli-GPU: a growth this small is a fragmentation that does not change (FragmentationGradient)."""

Positive = Annotated[int, Field(gt=0)]


@dataclass(frozen=True, slots=True)
class ScaleArgs:
    cpu_milli_scale: Positive = 128_000
    """CPU milli-cores of the largest node: the CPU axis is divided by it (openb's largest node)."""
    gpu_milli_scale: Positive = 8_000
    """Milli-GPU of the largest node: the GPU axis is divided by it."""


class SharingPolicy(ScorePlugin, GpuChoicePlugin):
    """A score plugin that also chooses the GPUs of the node a task lands on (``choose_gpus``).

    Drivers that place tasks themselves call :meth:`choose_gpus` for the
    chosen node and :meth:`on_placed` after taking the placement.
    """

    def choose_gpus(self, job: Job, request: TaskRequest, node: int, ctx: CycleContext) -> tuple[int, ...]:
        """GPU indices for one task of ``request`` on ``node``: best fit (lowest free whole GPUs)."""
        return fit.choose_gpus(ctx.state, node, request)

    def on_placed(self, job: Job, placement: TaskPlacement, ctx: CycleContext) -> None:
        """``placement`` was just taken from ``ctx.state`` (for policies that track what runs where)."""


def _gpu_request(request: TaskRequest) -> float:
    return float(request.gpu_milli)


class _Scaled(SharingPolicy):
    """A policy whose scores divide CPU and GPU by the largest node's (``ScaleArgs``)."""

    Args: ClassVar[type] = ScaleArgs

    def __init__(self, args: ScaleArgs | None = None) -> None:
        super().__init__(args)
        self.scale = args or ScaleArgs()


class RandomShare(SharingPolicy):
    """Random: a uniformly random node that fits, and a uniformly random GPU with room for a share."""

    name = "random-share"

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        return ctx.rng.random(len(ctx.state.nodes))

    def choose_gpus(self, job: Job, request: TaskRequest, node: int, ctx: CycleContext) -> tuple[int, ...]:
        if not request.is_fractional:
            return fit.choose_gpus(ctx.state, node, request)
        room = np.flatnonzero(ctx.state.gpu_free[node] >= request.gpu_milli)
        return (int(room[ctx.rng.integers(len(room))]),)


class BestFit(_Scaled):
    """Best-fit: score = 100 * (1 - (CPU left / largest CPU + GPU left / largest GPU) / 2) after placing."""

    name = "best-fit"

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        args = self.scale
        state = ctx.state
        cpu_left = (state.cpu_free - request.cpu_milli) / args.cpu_milli_scale * 0.5
        gpu_left = (state.free_milli - _gpu_request(request)) / args.gpu_milli_scale * 0.5
        return np.trunc((1.0 - (cpu_left + gpu_left)) * MAX_SCORE)


class DotProduct(_Scaled):
    """DotProd: score = 100 * (1 - (free . request) / 2), both (CPU, GPU) over the largest node's."""

    name = "dot-product"

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        args = self.scale
        state = ctx.state
        cpu = (state.cpu_free / args.cpu_milli_scale) * (request.cpu_milli / args.cpu_milli_scale)
        gpu = (state.free_milli / args.gpu_milli_scale) * (_gpu_request(request) / args.gpu_milli_scale)
        return np.trunc(MAX_SCORE * (1.0 - (cpu + gpu) / 2))


class GpuPacking(SharingPolicy):
    """GPU-Packing: a partly used GPU (least left first), then a free GPU of a used node, then an idle node.

    Scores: a share on a partly used GPU with ``f`` per cent free scores
    ``max(100 - f // 10, 50)``; whole free GPUs on a used node
    ``max(50 - n, 33)`` for ``n`` GPUs taken; an idle node of ``n`` GPUs
    ``max(33 - n, n)``. A task without GPUs scores 0 everywhere.
    """

    name = "gpu-packing"

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        state = ctx.state
        nodes = len(state.nodes)
        if request.gpu_milli == 0:
            return np.zeros(nodes)
        gpus = state.nodes.gpus
        idle = np.maximum(MAX_SCORE // 3 - gpus, gpus)
        if request.is_fractional:
            row = state.gpu_free
            tightest = np.where(row >= request.gpu_milli, row, MILLI_PER_GPU + 1).min(axis=1)
            percent_free = tightest * 100 // MILLI_PER_GPU
            shared = np.maximum(MAX_SCORE - percent_free // 10, MAX_SCORE // 2)
            used = np.where(tightest >= MILLI_PER_GPU, max(MAX_SCORE // 2 - 1, MAX_SCORE // 3), shared)
        else:
            used = np.full(nodes, max(MAX_SCORE // 2 - request.whole_gpus, MAX_SCORE // 3))
        return np.where(state.whole_free == gpus, idle, used).astype(np.float64)


SHARE_KIND = 0
"""Column of :class:`GpuClustering`'s per-node counts for shares of a GPU; column g counts g-GPU tasks."""


def gpu_kind(request: TaskRequest) -> int:
    """The GPU kind of a task for clustering: 0 a share, g for g whole GPUs, -1 no GPU."""
    if request.is_fractional:
        return SHARE_KIND
    return request.whole_gpus if request.whole_gpus else -1


class GpuClustering(_Scaled):
    """GPU-Clustering: put tasks with the same GPU kind together (shares, 1 GPU, 2 GPUs, ...).

    Score bands of 25, plus ``25 * (8000 - free milli-GPU) // 8000`` inside the
    band: node running only the task's kind (75), several kinds including it
    (50), idle (25), only other kinds (0). A task without GPUs scores 0.

    What runs where comes from the snapshot's running jobs, kept per cycle in
    ``ctx.data["gpu-clustering"]`` and updated by :meth:`on_placed`.
    """

    name = "gpu-clustering"

    def _kinds(self, ctx: CycleContext) -> IntArray:
        found = ctx.data.get(self.name)
        if isinstance(found, np.ndarray):
            kinds: IntArray = found
            return kinds
        nodes = ctx.state.nodes
        kinds = np.zeros((len(nodes), nodes.max_gpus + 1), dtype=np.int64)
        for running in ctx.snapshot.running:
            kind = gpu_kind(running.job.request)
            for placement in running.placements:
                if kind >= 0:
                    kinds[placement.node, kind] += 1
        ctx.data[self.name] = kinds
        return kinds

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        args = self.scale
        kind = gpu_kind(request)
        if kind < 0:
            return np.zeros(len(ctx.state.nodes))
        kinds = self._kinds(ctx)
        quarter = MAX_SCORE // 4
        inner = quarter * (args.gpu_milli_scale - ctx.state.free_milli) // args.gpu_milli_scale
        distinct = np.count_nonzero(kinds, axis=1)
        same = kinds[:, kind] > 0 if kind < kinds.shape[1] else np.zeros(len(distinct), dtype=bool)
        band = np.where(same, np.where(distinct == 1, 3, 2), np.where(distinct == 0, 1, 0))
        scores: FloatArray = (inner + band * quarter).astype(np.float64)
        return scores

    def on_placed(self, job: Job, placement: TaskPlacement, ctx: CycleContext) -> None:
        kind = gpu_kind(job.request)
        kinds = self._kinds(ctx)
        if 0 <= kind < kinds.shape[1]:
            kinds[placement.node, kind] += 1


@dataclass(frozen=True, slots=True)
class FgdArgs:
    workload: tuple[TypicalTask, ...] = ()
    """Target workload: task shapes and weights. Empty: the shapes of the snapshot's pending and
    running jobs (see :func:`typical_workload`), computed once per cycle."""
    coverage: Annotated[float, Field(gt=0, le=1)] = 0.95
    """Share of tasks the derived workload covers with its most frequent shapes (FGD's 95%)."""
    integer_scores: bool = True
    """Score as the published FGD: ``int(100 * sigmoid(-growth / 1000))``, which ties growths a few
    tens of milli-GPU apart; False scores the exact negative growth."""


@dataclass(eq=False)
class _StatsCache:
    """The node stats of one state, with the free GPU and CPU they were computed from."""

    workload: CompiledWorkload
    gpu_free: IntArray
    cpu_free: IntArray
    stats: NodeStats = field(init=False)

    def fits(self, workload: CompiledWorkload, state: WorkingState) -> bool:
        return workload is self.workload and self.gpu_free.shape == state.gpu_free.shape


class FragmentationGradient(SharingPolicy):
    """FGD: the node, and the GPU on it, whose fragmentation against the target workload grows least."""

    name = "fgd"
    Args: ClassVar[type] = FgdArgs

    def __init__(self, args: object | None = None) -> None:
        super().__init__(args)
        workload: tuple[TypicalTask, ...] = getattr(self.args, "workload", ())
        self.coverage: float = getattr(self.args, "coverage", 0.95)
        self._fixed = CompiledWorkload.of(workload) if workload else None

    def workload(self, ctx: CycleContext) -> CompiledWorkload:
        """The compiled target workload: the argument, else derived from the snapshot's jobs."""
        if self._fixed is not None:
            return self._fixed
        key = f"{self.name}.workload"
        found = ctx.data.get(key)
        if isinstance(found, CompiledWorkload):
            return found
        requests = [p.job.request for p in ctx.snapshot.pending]
        requests += [r.job.request for r in ctx.snapshot.running for _ in r.placements]
        compiled = CompiledWorkload.of(typical_workload(requests, self.coverage))
        ctx.data[key] = compiled
        return compiled

    def values(self, growth: FloatArray) -> FloatArray:
        """Score per candidate from its growth (NaN growth: the candidate is impossible)."""
        if not getattr(self.args, "integer_scores", True):
            return np.where(np.isnan(growth), -np.inf, -growth)
        with np.errstate(over="ignore"):
            sigmoid = 1.0 / (1.0 + np.exp(growth / MILLI_PER_GPU))
        return np.where(np.isnan(growth), -np.inf, np.trunc(sigmoid * MAX_SCORE))

    def node_stats(self, ctx: CycleContext) -> NodeStats:
        """:func:`node_stats` of every node of ``ctx.state``, kept in ``ctx.data`` and refreshed
        only for the nodes whose free GPU or CPU changed since the last call."""
        key = f"{self.name}.stats"
        state = ctx.state
        workload = self.workload(ctx)
        cache = ctx.data.get(key)
        if not (isinstance(cache, _StatsCache) and cache.fits(workload, state)):
            fresh = _StatsCache(workload, state.gpu_free.copy(), state.cpu_free.copy())
            index = self._model_index(workload, state)
            fresh.stats = node_stats(state.gpu_free, state.cpu_free, workload.for_rows(index))
            ctx.data[key] = fresh
            return fresh.stats
        changed = (state.gpu_free != cache.gpu_free).any(axis=1) | (state.cpu_free != cache.cpu_free)
        rows = np.flatnonzero(changed)
        if rows.size:
            index = self._model_index(workload, state)
            update = node_stats(state.gpu_free[rows], state.cpu_free[rows], workload.for_rows(index[rows]))
            cache.stats.counts[rows] = update.counts
            cache.stats.usable[rows] = update.usable
            cache.stats.frag[rows] = update.frag
            cache.gpu_free[rows] = state.gpu_free[rows]
            cache.cpu_free[rows] = state.cpu_free[rows]
        return cache.stats

    def growth(self, request: TaskRequest, rows: IntArray, ctx: CycleContext) -> FloatArray:
        """Fragmentation growth of ``rows`` (node indices): one column per GPU for a share, else one."""
        state = ctx.state
        stats = self.node_stats(ctx).rows(rows)
        workload = self.workload(ctx)
        if workload.model_weight is not None:
            workload = workload.for_rows(self._model_index(workload, state)[rows])
        return fragmentation_growth(state.gpu_free[rows], state.cpu_free[rows], request, workload, stats)

    def _model_index(self, workload: CompiledWorkload, state: WorkingState) -> IntArray:
        """Per node, the row of ``workload.model_weight`` for its GPU model (its resource type's)."""
        cached = getattr(self, "_models", None)
        if cached is not None and cached[0] is state.nodes and cached[1] is workload:
            index: IntArray = cached[2]
            return index
        table = state.nodes
        index = workload.model_index([table.resource_types[n.resource_type].gpu_model for n in table.nodes])
        self._models = (table, workload, index)
        return index

    def candidate_scores(self, request: TaskRequest, rows: IntArray, ctx: CycleContext) -> FloatArray:
        """Scores of ``rows`` (node indices), one column per GPU for a share, else one column."""
        growth = self.growth(request, rows, ctx)
        if self.settles_zero_growth and getattr(self.args, "integer_scores", True):
            growth = self._authors_zero_growth(growth, request, rows, ctx)
        return self.values(growth)

    settles_zero_growth: ClassVar[bool] = True
    """Whether a zero growth is recomputed in the FGD authors' arithmetic (:meth:`_authors_zero_growth`)."""

    def _authors_zero_growth(
        self, growth: FloatArray, request: TaskRequest, rows: IntArray, ctx: CycleContext
    ) -> FloatArray:
        """``growth``, with the candidates that leave the fragmentation unchanged recomputed as the FGD
        authors' simulator computes them (:func:`authors_fragmentation`).

        Their score (``calculateGpuShareFragExtendScore`` in
        ``pkg/simulator/plugin/fgd_score.go`` of hkust-adsl/kubernetes-scheduler-simulator,
        for a node and for each GPU of a share) is ``int(100 sigmoid(-growth / 1000))``, and the one edge of
        that integer which placements really meet is a growth of 0: 50 when it
        is 0 or above, 49 below. Our growth is exact there (0), theirs carries
        the rounding of their per-class sums, about 1e-12 of either sign when a
        shape changes class without changing the measure (a CPU-only task on a
        node whose free CPU falls below a shape's that its GPUs could not host
        anyway). On the openb lists whose pods name GPU models, such a residue
        changed their choice on 7 of 10 seeds of ``gpuspec10`` (first at pod
        2,766 of 10,793 on seed 43) and 3 of ``gpuspec33``; their curves differed
        from ours by up to 0.26 pp. Away from 0 the growths agree to far
        better than the distance to the next edge of the integer score, so only
        the zero-growth candidates (|growth| below a millionth of a milli-GPU,
        far less than any real change, which is at least one milli-GPU times a
        weight) are recomputed.
        """
        state = ctx.state
        workload = self.workload(ctx)
        zero = np.abs(np.nan_to_num(growth, nan=1.0)) < ZERO_GROWTH
        if request.gpu_milli == 0 and workload.shapes is not None:
            # A CPU-only task changes no GPU: unless the node's free CPU falls below some shape's, every
            # shape adds the same terms to the same classes, and their sums are bit for bit the same.
            cpu = np.sort(workload.shapes.cpu)
            free = state.cpu_free[rows]
            crosses = np.searchsorted(cpu, free, side="right") != np.searchsorted(
                cpu, free - request.cpu_milli, side="right"
            )
            zero &= crosses[:, None]
        if not zero.any():
            return growth
        at, column = np.nonzero(zero)
        nodes = rows[at]
        before = state.gpu_free[nodes]
        after = before.copy()
        if request.is_fractional:
            after[np.arange(len(nodes)), column] -= request.gpu_milli
        elif request.whole_gpus:
            # Which idle GPUs a whole-GPU task takes does not change the measure: the lowest first.
            idle = after == MILLI_PER_GPU
            taken = idle & (np.cumsum(idle, axis=1) <= request.whole_gpus)
            after[taken] = 0
        cpu = state.cpu_free[nodes]
        if workload.model_weight is not None:
            workload = workload.for_rows(self._model_index(workload, state)[nodes])
        exact = authors_fragmentation(after, cpu - request.cpu_milli, workload) - authors_fragmentation(
            before, cpu, workload
        )
        settled = growth.copy()
        settled[at, column] = exact
        return settled

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        rows = np.flatnonzero(fit.fits_one(ctx.state, request))
        scores = np.full(len(ctx.state.nodes), -np.inf)
        if rows.size:
            scores[rows] = self.candidate_scores(request, rows, ctx).max(axis=1)
        return scores

    def choose_gpus(self, job: Job, request: TaskRequest, node: int, ctx: CycleContext) -> tuple[int, ...]:
        if not request.is_fractional:
            return fit.choose_gpus(ctx.state, node, request)
        values = self.candidate_scores(request, np.array([node]), ctx)[0]
        return (int(np.argmax(values)),)


@dataclass(frozen=True, slots=True)
class FgdBalancedArgs:
    workload: tuple[TypicalTask, ...] = ()
    """Target workload, as for ``fgd``."""
    coverage: Annotated[float, Field(gt=0, le=1)] = 0.95
    """Share of tasks a derived workload covers, as for ``fgd``."""
    integer_scores: bool = True
    """Score as ``fgd`` does (whole numbers through a sigmoid); False: the exact negative growth."""
    balance_weight: Annotated[float, Field(ge=0)] = 0.5
    """Milli-GPU of fragmentation counted per milli-GPU newly stranded for lack of CPU. The openb
    results hardly change between 0.1 and 3 (docs/plugins/sharing.md)."""


class FgdBalanced(FragmentationGradient):
    """fgd-balanced (loadmaster): FGD plus the GPU a placement strands for want of CPU.

    A node's *stranded* GPU is the free milli-GPU its free CPU cannot serve at
    the target workload's CPU per milli-GPU: ``max(0, L - C / r)``. FGD's
    fragmentation counts a node's GPUs as lost only once the CPU of a typical
    task no longer fits; on openb the 8-GPU nodes with 12 cores per GPU run out
    of CPU first, so FGD still fills them with CPU-heavy tasks. Adding the
    growth of stranded GPU (times ``balance_weight``) to the growth of
    fragmentation sends CPU-heavy tasks to CPU-rich nodes before that happens.
    """

    name = "fgd-balanced"
    Args = FgdBalancedArgs
    settles_zero_growth = False  # its growth adds the stranded GPU: not the authors' measure

    def growth(self, request: TaskRequest, rows: IntArray, ctx: CycleContext) -> FloatArray:
        weight = float(getattr(self.args, "balance_weight", 0.5))
        ratio = self.workload(ctx).cpu_per_gpu_milli
        state = ctx.state
        free = state.free_milli[rows].astype(np.float64)
        cpu = state.cpu_free[rows].astype(np.float64)
        stranded = stranded_gpu(free, cpu, ratio)
        after = stranded_gpu(free - request.gpu_milli, cpu - request.cpu_milli, ratio)
        return super().growth(request, rows, ctx) + weight * (after - stranded)[:, None]


def stranded_gpu(free_milli: FloatArray, cpu_free: FloatArray, cpu_per_gpu_milli: float) -> FloatArray:
    """Free milli-GPU that the free CPU cannot serve at ``cpu_per_gpu_milli`` CPU milli-cores each."""
    if cpu_per_gpu_milli <= 0:
        return np.zeros_like(free_milli)
    stranded: FloatArray = np.maximum(free_milli - cpu_free / cpu_per_gpu_milli, 0.0)
    return stranded


SHARING_PLUGINS: Mapping[str, type[Plugin]] = {
    "random-share": RandomShare,
    "best-fit": BestFit,
    "dot-product": DotProduct,
    "gpu-packing": GpuPacking,
    "gpu-clustering": GpuClustering,
    "fgd": FragmentationGradient,
    "fgd-balanced": FgdBalanced,
}
"""Plugin name -> class, merged into ``registry.PLUGINS``."""
