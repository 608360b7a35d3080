"""GPU fragmentation measured against a target workload (Weng et al., "Beware of Fragmentation", ATC'23).

A node's free GPU share is *fragmented* for a task shape when the node cannot
host that task: all of its free share counts when the task does not fit the
node at all (too little CPU, or too few GPUs with enough free share), and the
free share of GPUs too small for the task counts when it does fit. The node's
fragmentation is the expectation over the target workload's task shapes,
weighted by how often each shape occurs:

    F(node) = sum over shapes t of  p_t * (L                 if t does not fit
                                           L - U_t           if it fits)

where ``L`` is the node's free milli-GPU and ``U_t`` the free milli-GPU on GPUs
with at least ``t``'s share free. A task without GPUs (CPU only) counts all of
``L``, as in the FGD authors' simulator, and so does a task that names GPU
models the node does not have (their ``IsNodeAccessibleToPod``: "NoAccess").
Memory is not part of the measure.

Rewritten per group ``k`` of shapes with the same GPU need (share ``m_k`` on
each of ``g_k`` GPUs): ``F = P * L - sum_k W_k * fits_k * U_k``, where ``P`` is
the total weight, ``W_k`` the weight of the group's shapes whose CPU the node
can give and ``fits_k`` whether ``g_k`` GPUs have ``m_k`` free. Everything here
is vectorised over nodes (rows of the per-GPU free array) and pure.
"""

from __future__ import annotations

import dataclasses
from collections import Counter
from collections.abc import Iterable, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ModelError
from loadmaster.model import MILLI_PER_GPU, TaskRequest

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]


@dataclass(frozen=True, slots=True)
class TypicalTask:
    """One task shape of the target workload and its weight (share of tasks)."""

    cpu_milli: int
    """CPU milli-cores the task asks for."""
    gpu_milli: int
    """Milli-GPU as in :class:`TaskRequest`: below 1000 a share of one GPU, else whole GPUs."""
    weight: float
    """How often the shape occurs; weights need not sum to one."""
    gpu_models: frozenset[str] = frozenset()
    """GPU models the task may run on (openb's ``gpu_spec``); empty: any."""

    def __post_init__(self) -> None:
        TaskRequest(gpu_milli=self.gpu_milli, cpu_milli=self.cpu_milli)  # validates the shape
        if self.weight < 0:
            raise ModelError(f"typical task {self}: weight must be >= 0")


def typical_workload(
    requests: Iterable[TaskRequest],
    coverage: float = 0.95,
    models: Iterable[str] | None = None,
) -> tuple[TypicalTask, ...]:
    """The most frequent task shapes that together make up ``coverage`` of the tasks, weights summing to one.

    Shapes are (CPU, milli-GPU), and the GPU models a task may use when
    ``models`` gives them (one ``|``-separated list per request, as openb's
    ``gpu_spec``; empty: any); the most frequent come first, ties broken by
    larger CPU, then larger GPU need, then the larger model list (the FGD
    simulator's "typical pods", with a popularity threshold of ``coverage``).
    As in their simulator, a model list is told apart by its text:
    ``V100M16|V100M32`` and ``V100M16|V100M32|V100M32`` are two shapes.
    """
    if not 0 < coverage <= 1:
        raise ModelError(f"coverage must be in (0, 1], got {coverage}")
    listed = list(requests)
    specs = list(models) if models is not None else [""] * len(listed)
    counts = Counter((r.cpu_milli, r.gpu_milli, m) for r, m in zip(listed, specs, strict=True))
    if not counts:
        return ()
    ranked = sorted(counts.items(), key=lambda item: (item[1], item[0]), reverse=True)
    total = sum(counts.values())
    chosen: list[tuple[tuple[int, int, str], int]] = []
    covered = 0
    for shape, count in ranked:
        if covered >= coverage * total:
            break
        chosen.append((shape, count))
        covered += count
    # The weight in the authors' arithmetic, (count / total) / (covered / total): it is count / covered,
    # but rounded differently in the last bit, and their sums of weights (authors_fragmentation) are
    # reproduced bit for bit.
    return tuple(
        TypicalTask(cpu, gpu, (count / total) / (covered / total), frozenset(m for m in spec.split("|") if m))
        for (cpu, gpu, spec), count in chosen
    )


@dataclass(frozen=True, eq=False)
class CompiledWorkload:
    """A target workload as arrays: GPU shapes grouped by their GPU need, for vectorised measures."""

    group_share: IntArray
    """Per group: milli-GPU needed on each GPU (1000 for whole GPUs)."""
    group_gpus: IntArray
    """Per group: GPUs needed with that share free."""
    cpu_steps: IntArray
    """The distinct CPU milli-cores of the GPU shapes, ascending."""
    step_weight: FloatArray
    """Shape (steps + 1, groups): row ``j`` is the weight of each group's shapes asking at most
    ``cpu_steps[j - 1]`` (row 0: none)."""
    total_weight: float
    """Weight of all shapes, CPU-only ones included."""
    cpu_per_gpu_milli: float
    """CPU milli-cores the workload asks per milli-GPU (weighted over all shapes; 0 without GPUs)."""
    model_weight: FloatArray | None = None
    """When some shapes name GPU models: per model of :attr:`models` (and last, any other model)
    the ``step_weight`` of the shapes a node of that model can host (the others count the node's
    whole free share); None: every shape runs anywhere."""
    models: tuple[str, ...] = ()
    """The GPU models the shapes name, in the order of :attr:`model_weight`."""
    gpu_models: tuple[frozenset[str], ...] = ()
    """The model sets the shapes name (empty when none does)."""
    shapes: ShapeTable | None = None
    """The shapes one by one, in the workload's order (for :func:`authors_fragmentation`)."""

    @classmethod
    def of(cls, tasks: Iterable[TypicalTask]) -> CompiledWorkload:
        listed = list(tasks)
        gpu_tasks = [t for t in listed if t.gpu_milli > 0]
        needs = sorted({_need(t.gpu_milli) for t in gpu_tasks})
        steps = sorted({t.cpu_milli for t in gpu_tasks})

        def table(hosted: list[TypicalTask]) -> FloatArray:
            step_weight = np.zeros((len(steps) + 1, len(needs)), dtype=np.float64)
            for task in hosted:
                step_weight[steps.index(task.cpu_milli) + 1, needs.index(_need(task.gpu_milli))] += (
                    task.weight
                )
            cumulative: FloatArray = np.cumsum(step_weight, axis=0)
            return cumulative

        sets = tuple(sorted({t.gpu_models for t in gpu_tasks if t.gpu_models}, key=sorted))
        models: list[str] = sorted(set().union(*sets)) if sets else []
        by_model = None
        if sets:
            hosted = [[t for t in gpu_tasks if not t.gpu_models or m in t.gpu_models] for m in models]
            hosted.append([t for t in gpu_tasks if not t.gpu_models])  # a node of any other model
            by_model = np.stack([table(tasks) for tasks in hosted])
        return cls(
            shapes=ShapeTable.of(listed, models),
            group_share=np.array([share for share, _ in needs], dtype=np.int64),
            group_gpus=np.array([gpus for _, gpus in needs], dtype=np.int64),
            cpu_steps=np.array(steps, dtype=np.int64),
            step_weight=table(gpu_tasks),
            total_weight=float(sum(t.weight for t in listed)),
            cpu_per_gpu_milli=_ratio(
                sum(t.weight * t.cpu_milli for t in listed), sum(t.weight * t.gpu_milli for t in listed)
            ),
            model_weight=by_model,
            models=tuple(models),
            gpu_models=sets,
        )

    def model_index(self, node_models: Sequence[str | None]) -> IntArray:
        """Per node, the row of :attr:`model_weight` for its GPU model (the last: a model no shape names)."""
        at = {m: i for i, m in enumerate(self.models)}
        return np.array([at.get(m or "", len(self.models)) for m in node_models], dtype=np.int64)

    def for_rows(self, index: IntArray) -> CompiledWorkload:
        """This workload as nodes with ``index`` (from :meth:`model_index`, one per row) see it: each
        row weighs only the shapes its GPU model can host. Itself when no shape names a model."""
        if self.model_weight is None:
            return self
        return dataclasses.replace(self, row_weight=self.model_weight[index], row_model=index)

    row_weight: FloatArray | None = None
    """Per row (node) its ``step_weight`` (from :meth:`for_rows`); None: ``step_weight`` for all."""
    row_model: IntArray | None = None
    """Per row (node) its index from :meth:`model_index` (from :meth:`for_rows`); None: any model."""

    def group_weight(self, cpu_free: IntArray) -> FloatArray:
        """Per node and group: the weight of the group's shapes whose CPU the node can give.

        A lookup in a table of cumulative weights, not a matrix product: two nodes (or one node before and
        after a placement) that fit the same shapes get bit-identical weights, so a placement that
        changes nothing has a growth of exactly 0, as in the FGD authors' per-shape sums. (BLAS
        accumulates in an order that depends on the matrix shape, which left growths of 1e-12 that
        FGD's integer score turns from 50 into 49.)
        """
        at = np.searchsorted(self.cpu_steps, cpu_free, side="right")
        if self.row_weight is not None:
            rows: FloatArray = self.row_weight[np.arange(len(at)), at]
            return rows
        weights: FloatArray = self.step_weight[at]
        return weights

    def gpu_stats(self, gpu_free: IntArray) -> tuple[IntArray, IntArray]:
        """Per node and group: GPUs with the group's share free, and the free milli-GPU on them."""
        big = gpu_free[:, :, None] >= self.group_share[None, None, :]
        counts: IntArray = big.sum(axis=1)
        usable: IntArray = (gpu_free[:, :, None] * big).sum(axis=1)
        return counts, usable


@dataclass(frozen=True, eq=False)
class ShapeTable:
    """A target workload's shapes one by one, in its order: what :func:`authors_fragmentation` sums."""

    cpu: IntArray
    """CPU milli-cores of each shape."""
    share: IntArray
    """Milli-GPU each shape needs on each of its GPUs (1000 for whole GPUs; 0: CPU only)."""
    gpus: IntArray
    """GPUs each shape needs (0: CPU only)."""
    weight: FloatArray
    """Weight of each shape."""
    access: npt.NDArray[np.bool_]
    """Shape (models + 1, shapes): whether a node of each model of :attr:`CompiledWorkload.models`
    (last: any other model) may host each shape."""

    @classmethod
    def of(cls, tasks: Sequence[TypicalTask], models: Sequence[str]) -> ShapeTable:
        needs = [_need(t.gpu_milli) if t.gpu_milli > 0 else (0, 0) for t in tasks]
        kinds = [*models, None]
        return cls(
            cpu=np.array([t.cpu_milli for t in tasks], dtype=np.int64),
            share=np.array([share for share, _ in needs], dtype=np.int64),
            gpus=np.array([gpus for _, gpus in needs], dtype=np.int64),
            weight=np.array([t.weight for t in tasks], dtype=np.float64),
            access=np.array(
                [[not t.gpu_models or m in t.gpu_models for t in tasks] for m in kinds], dtype=bool
            ).reshape(len(kinds), len(tasks)),
        )


def authors_fragmentation(gpu_free: IntArray, cpu_free: IntArray, workload: CompiledWorkload) -> FloatArray:
    """Fragmentation of each node (rows of ``gpu_free``) in the FGD authors' floating-point arithmetic.

    The same measure as :func:`fragmentation`, summed as their simulator sums it
    (hkust-adsl/kubernetes-scheduler-simulator, ``pkg/utils/frag.go``:
    ``NodeGpuShareFragAmount``, ``GetNodePodFrag``, ``FragAmountSumExceptQ3``):
    each shape, in the workload's order, adds ``weight x amount`` to the sum of
    its class (lack both, lack GPU, satisfied, lack CPU, CPU-only with and without
    CPU, no access to the node's model), the amount being the node's free
    milli-GPU, or for a shape the node can host, the free milli-GPU on GPUs too
    small for it (added to "lack GPU"); the node's value is the sum of the
    classes but "satisfied", in that order. Mathematically it is
    :func:`fragmentation`; in floating point a shape that moves between two
    classes that both count the whole free share (lack GPU to lack both as the
    node's CPU drops, a CPU-only shape losing its CPU) changes the rounding of
    the sums, so a placement that changes nothing can show a growth of about
    1e-12 of either sign, and FGD's integer score turns a negative one from 50
    into 49 (see ``FragmentationGradient``).
    """
    table = workload.shapes
    if table is None:
        raise ModelError("the workload has no shape table")
    rows = gpu_free.shape[0]
    if workload.row_model is not None:
        allowed = table.access[workload.row_model]
    else:
        allowed = np.ones((rows, len(table.cpu)), dtype=bool)
    free = gpu_free.sum(axis=1).astype(np.float64)
    # Per shape (columns): GPUs with its share free, and the free milli-GPU on the others.
    shares, of_shape = np.unique(table.share, return_inverse=True)
    small = gpu_free[:, :, None] < shares[None, None, :]
    big = (~small).sum(axis=1)[:, of_shape]
    stranded = (gpu_free[:, :, None] * small).sum(axis=1)[:, of_shape].astype(np.float64)
    cpu_fits = cpu_free[:, None] >= table.cpu[None, :]
    gpu_fits = big >= table.gpus[None, :]
    cpu_only = np.broadcast_to(table.share == 0, cpu_fits.shape)
    needs_gpu = ~cpu_only & allowed
    whole = table.weight[None, :] * free[:, None]
    hosted = needs_gpu & gpu_fits & cpu_fits

    gpu_columns = np.flatnonzero(table.share > 0)
    cpu_columns = np.flatnonzero(table.share == 0)
    named = np.flatnonzero((table.share > 0) & ~table.access.all(axis=0))

    def summed(where: npt.NDArray[np.bool_], columns: IntArray, amount: FloatArray = whole) -> FloatArray:
        # One class: the terms of its shapes added one by one in the workload's order (cumsum is
        # sequential, as their loop; a sum would pair the terms). Only the shapes that may fall in the
        # class are summed: the others would add exactly 0.
        if len(columns) == 0:
            return np.zeros(rows)
        terms = np.where(where[:, columns], amount[:, columns], 0.0)
        last: FloatArray = np.cumsum(terms, axis=1)[:, -1]
        return last

    lack_gpu_terms = np.where(hosted, table.weight[None, :] * stranded, whole)
    lack_both = summed(needs_gpu & ~gpu_fits & ~cpu_fits, gpu_columns)
    lack_gpu = summed(needs_gpu & cpu_fits, gpu_columns, lack_gpu_terms)
    lack_cpu = summed(needs_gpu & gpu_fits & ~cpu_fits, gpu_columns)
    with_cpu = summed(cpu_only & cpu_fits, cpu_columns)
    without_cpu = summed(cpu_only & ~cpu_fits, cpu_columns)
    no_access = summed(~cpu_only & ~allowed, named)
    total: FloatArray = ((((lack_both + lack_gpu) + lack_cpu) + with_cpu) + without_cpu) + no_access
    return total


def _ratio(cpu: float, gpu: float) -> float:
    return cpu / gpu if gpu > 0 else 0.0


def _need(gpu_milli: int) -> tuple[int, int]:
    """(share per GPU, GPUs) of a task asking ``gpu_milli``."""
    if gpu_milli < MILLI_PER_GPU:
        return gpu_milli, 1
    return MILLI_PER_GPU, gpu_milli // MILLI_PER_GPU


@dataclass(frozen=True, eq=False)
class NodeStats:
    """Per node (rows) and group: GPUs with the group's share free, the free milli-GPU on them; and F."""

    counts: IntArray
    usable: IntArray
    frag: FloatArray

    def rows(self, rows: IntArray) -> NodeStats:
        """The stats of ``rows`` only."""
        return NodeStats(self.counts[rows], self.usable[rows], self.frag[rows])


def node_stats(gpu_free: IntArray, cpu_free: IntArray, workload: CompiledWorkload) -> NodeStats:
    """Group counts, usable milli-GPU and fragmentation of each node (rows of ``gpu_free``)."""
    counts, usable = workload.gpu_stats(gpu_free)
    fits = counts >= workload.group_gpus[None, :]
    weights = workload.group_weight(cpu_free)
    total = gpu_free.sum(axis=1).astype(np.float64)
    frag: FloatArray = workload.total_weight * total - (weights * fits * usable).sum(axis=1)
    return NodeStats(counts, usable, frag)


def fragmentation(gpu_free: IntArray, cpu_free: IntArray, workload: CompiledWorkload) -> FloatArray:
    """Expected fragmented milli-GPU of each node (rows of ``gpu_free``) for ``workload``."""
    return node_stats(gpu_free, cpu_free, workload).frag


def fragmentation_growth(
    gpu_free: IntArray,
    cpu_free: IntArray,
    request: TaskRequest,
    workload: CompiledWorkload,
    stats: NodeStats | None = None,
) -> FloatArray:
    """How much each node's fragmentation grows if it takes one task of ``request``.

    For a share of one GPU the answer has one column per GPU (the task on that
    GPU), NaN where the GPU has too little free; otherwise one column: whole
    GPUs are taken lowest index first, and a CPU-only task changes CPU only.
    Rows are assumed to fit the task's CPU and whole GPUs. ``stats``, when
    given, must be :func:`node_stats` of the same rows.
    """
    now = stats if stats is not None else node_stats(gpu_free, cpu_free, workload)
    weights = workload.group_weight(cpu_free - request.cpu_milli)
    if request.is_fractional:
        return _share_growth(gpu_free, request.gpu_milli, now, weights, workload)
    taken = request.whole_gpus * MILLI_PER_GPU
    fits = (now.counts - request.whole_gpus) >= workload.group_gpus[None, :]
    total = gpu_free.sum(axis=1).astype(np.float64) - taken
    after = workload.total_weight * total - (weights * fits * (now.usable - taken)).sum(axis=1)
    growth: FloatArray = (after - now.frag)[:, None]
    return growth


def _share_growth(
    gpu_free: IntArray, share: int, now: NodeStats, weights: FloatArray, workload: CompiledWorkload
) -> FloatArray:
    """Growth per (node, GPU) when a task of ``share`` milli-GPU goes on that GPU.

    A GPU with ``l`` free changes the groups in three runs of ascending share
    ``m_k``: those with ``m_k <= l - share`` keep the GPU but lose ``share`` of
    usable milli-GPU; those with ``l - share < m_k <= l`` lose the GPU (one
    count and ``l`` usable); the rest never counted it. Prefix sums over the
    groups give each run's total with two lookups per GPU.
    """
    fits = now.counts >= workload.group_gpus[None, :]
    fits_less = (now.counts - 1) >= workload.group_gpus[None, :]
    kept_weight = weights * fits
    less_weight = weights * fits_less
    base = (kept_weight * now.usable).sum(axis=1)
    prefix = np.zeros((4, gpu_free.shape[0], len(workload.group_share) + 1))
    np.cumsum(kept_weight, axis=1, out=prefix[0, :, 1:])
    np.cumsum(kept_weight * now.usable, axis=1, out=prefix[1, :, 1:])
    np.cumsum(less_weight, axis=1, out=prefix[2, :, 1:])
    np.cumsum(less_weight * now.usable, axis=1, out=prefix[3, :, 1:])
    keeps = np.searchsorted(workload.group_share, gpu_free - share, side="right")
    loses = np.searchsorted(workload.group_share, gpu_free, side="right")

    def run(which: int) -> FloatArray:
        table = prefix[which]
        between: FloatArray = np.take_along_axis(table, loses, axis=1) - np.take_along_axis(
            table, keeps, axis=1
        )
        return between

    kept_loss = share * np.take_along_axis(prefix[0], keeps, axis=1)
    lost = run(1) - (run(3) - gpu_free * run(2))
    kept = base[:, None] - kept_loss - lost
    total = gpu_free.sum(axis=1).astype(np.float64) - share
    after = workload.total_weight * total[:, None] - kept
    growth: FloatArray = np.where(gpu_free >= share, after - now.frag[:, None], np.nan)
    return growth
