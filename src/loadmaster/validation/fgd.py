"""The FGD paper's GPU-sharing experiment on the openb trace, run through loadmaster's scheduling core.

Protocol (Weng et al., ATC'23, and their simulator): the trace's pods in a
random order, then pods drawn from the trace with replacement until the GPU
requested would pass ``ratio`` (130%) of the cluster's GPUs; pods are placed
one by one and never leave; a pod no node can take is skipped. After every
pod the GPU requested so far ("arrived") and the GPU allocated are recorded;
the curve at arrival level ``k`` per cent is the mean allocation over the pods
whose arrival rounds to ``k`` (the authors' discretisation).

Each pod is placed with the policy's score over the nodes that fit
(:func:`loadmaster.scheduling.fit.fits_one` on a :class:`WorkingState`), the
best score winning and the lowest node index breaking ties, then the policy's
own GPU choice. The node order is a random permutation per seed, as the
authors' simulator breaks ties by randomly prefixed node names.

Two sources of randomness: numpy's generator (:func:`arrivals` and a node
permutation from the seed), or the authors' own draws for their seeds
(:class:`ReferenceDraws`, written by ``tools/openb-draws`` from Go's
``math/rand``), with which the deterministic policies reproduce the authors'
cached curves exactly, seed for seed.
"""

from __future__ import annotations

import gzip
import json
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ConfigError, SimulationError
from loadmaster.model import (
    MILLI_PER_GPU,
    ClusterSnapshot,
    Job,
    Node,
    NodeTable,
    ResourceType,
    TaskPlacement,
    TaskRequest,
)
from loadmaster.scheduling import fit
from loadmaster.scheduling.framework import CycleContext
from loadmaster.scheduling.plugins.fragmentation import TypicalTask, typical_workload
from loadmaster.scheduling.plugins.sharing import (
    BestFit,
    DotProduct,
    FgdArgs,
    FgdBalanced,
    FgdBalancedArgs,
    FragmentationGradient,
    GpuClustering,
    GpuPacking,
    RandomShare,
    SharingPolicy,
)
from loadmaster.scheduling.state import WorkingState
from loadmaster.traces import read_trace
from loadmaster.traces.openb import OpenbNode, read_openb_nodes

IntArray = npt.NDArray[np.int64]
FloatArray = npt.NDArray[np.float64]

LEVELS = np.arange(0, 131)
"""Arrival levels of the published curves, in per cent of the cluster's GPUs."""


@dataclass(frozen=True, eq=False)
class OpenbData:
    """The openb pods as distinct shapes, and the GPU nodes."""

    shapes: tuple[TaskRequest, ...]
    """Distinct pod requests."""
    shape_models: tuple[frozenset[str], ...]
    """Per shape: the GPU models it may use (empty: any)."""
    shape_specs: tuple[str, ...]
    """Per shape: its ``gpu_spec`` as written (FGD's typical pods tell lists apart by their text)."""
    pods: IntArray
    """Shape index of every pod of the trace, in file order."""
    nodes: tuple[OpenbNode, ...]

    @property
    def total_gpus(self) -> int:
        return sum(n.gpus for n in self.nodes)

    def requests(self) -> list[TaskRequest]:
        """The request of every pod of the trace."""
        return [self.shapes[i] for i in self.pods]


def load_openb(pods_path: Path, nodes_path: Path) -> OpenbData:
    """Read an openb pod list (format ``openb``) and node list into shapes, pods and nodes."""
    trace = read_trace(pods_path, "openb")
    gpu = trace.column("gpu_milli_per_task")
    cpu = trace.column("cpu_milli_per_task")
    memory = trace.column("memory_mib_per_task")
    models = trace.column("gpu_model")
    index: dict[tuple[int, int, int, str], int] = {}
    pods = np.empty(len(trace), dtype=np.int64)
    for row in range(len(trace)):
        key = (int(gpu[row]), _whole(cpu[row]), _whole(memory[row]), str(models[row] or ""))
        pods[row] = index.setdefault(key, len(index))
    shapes = tuple(TaskRequest(gpu_milli=g, cpu_milli=c, memory_mib=m) for g, c, m, _ in index)
    sets = tuple(frozenset(m for m in k[3].split("|") if m) for k in index)
    specs = tuple(k[3] for k in index)
    return OpenbData(shapes, sets, specs, pods, tuple(read_openb_nodes(nodes_path)))


def _whole(value: float) -> int:
    return 0 if np.isnan(value) else int(value)


def node_table(nodes: Sequence[OpenbNode]) -> NodeTable:
    """The GPU nodes as a node table, in the order given; the GPU model is the resource type."""
    models = sorted({n.gpu_model or "none" for n in nodes})
    types = {m: ResourceType(m, m, 0, 0, 0) for m in models}
    built = [
        Node(n.name, "openb", "z0", "r0", n.gpu_model or "none", n.gpus, n.cpu_milli, n.memory_mib)
        for n in nodes
    ]
    return NodeTable.build(built, types)


def arrivals(data: OpenbData, rng: np.random.Generator, ratio: float = 1.3) -> IntArray:
    """Shape indices in arrival order: the trace shuffled, then draws with replacement up to ``ratio``.

    As the authors' simulator does (``TunePodsByNodeTotalResource``), drawing
    stops at the first pod whose per-GPU share would take the requested total
    past ``ratio`` of the GPUs; a trace that already asks for more loses pods
    at random positions of the shuffled list until it asks for no more.
    """
    order = list(data.pods[rng.permutation(len(data.pods))])
    target = ratio * data.total_gpus * MILLI_PER_GPU
    requested = sum(data.shapes[s].gpu_milli for s in order)
    if requested >= target:
        while requested > target:
            requested -= data.shapes[order.pop(int(rng.integers(len(order))))].gpu_milli
        return np.array(order, dtype=np.int64)
    while True:
        shape = int(data.pods[rng.integers(len(data.pods))])
        request = data.shapes[shape]
        if requested + min(request.gpu_milli, MILLI_PER_GPU) > target:
            break
        requested += request.gpu_milli
        order.append(shape)
    return np.array(order, dtype=np.int64)


@dataclass(frozen=True, eq=False)
class SeedRun:
    """One policy on one seed: per pod, the GPU arrived and allocated so far (milli-GPU), and failures."""

    arrived_milli: IntArray
    allocated_milli: IntArray
    failed: int


def place_all(
    policy: SharingPolicy, data: OpenbData, order: IntArray, node_order: IntArray, rng: np.random.Generator
) -> SeedRun:
    """Place the pods of ``order`` one by one on the nodes in ``node_order`` with ``policy``."""
    nodes = node_table([data.nodes[i] for i in node_order])
    snapshot = ClusterSnapshot.empty(nodes)
    state = WorkingState.from_snapshot(snapshot)
    ctx = CycleContext(now=0.0, rng=rng, snapshot=snapshot, state=state)
    jobs = [_job(i, request) for i, request in enumerate(data.shapes)]
    allowed = [_allowed(nodes, models) for models in data.shape_models]
    arrived = np.empty(len(order), dtype=np.int64)
    allocated = np.empty(len(order), dtype=np.int64)
    total_arrived = total_allocated = failed = 0
    for step, shape in enumerate(order.tolist()):
        request = data.shapes[shape]
        total_arrived += request.gpu_milli
        if _place(policy, jobs[shape], allowed[shape], ctx):
            total_allocated += request.gpu_milli
        else:
            failed += 1
        arrived[step] = total_arrived
        allocated[step] = total_allocated
    if int(state.free_milli.sum()) != nodes.total_gpus * MILLI_PER_GPU - total_allocated:
        raise SimulationError("sharing protocol: allocated GPU does not match the state's free GPU")
    return SeedRun(arrived, allocated, failed)


def _job(index: int, request: TaskRequest) -> Job:
    return Job(
        id=f"shape{index}", user="", group="", submit_s=0.0, tasks=1, request=request, time_limit_s=1.0
    )


def _allowed(nodes: NodeTable, models: frozenset[str]) -> npt.NDArray[np.bool_] | None:
    if not models:
        return None
    return np.array([n.resource_type in models for n in nodes.nodes], dtype=bool)


def _place(policy: SharingPolicy, job: Job, allowed: npt.NDArray[np.bool_] | None, ctx: CycleContext) -> bool:
    """Place one task of ``job`` where ``policy`` scores best; False when no node fits."""
    request = job.request
    fits = fit.fits_one(ctx.state, request)
    if allowed is not None:
        fits &= allowed
    if not fits.any():
        return False
    scores = policy.score(job, request, ctx)
    node = int(np.argmax(np.where(fits, scores, -np.inf)))
    placement = TaskPlacement(
        node=node,
        gpu_indices=policy.choose_gpus(job, request, node, ctx),
        gpu_milli=min(request.gpu_milli, MILLI_PER_GPU),
        cpu_milli=request.cpu_milli,
        memory_mib=request.memory_mib,
    )
    ctx.state.take(placement)
    policy.on_placed(job, placement, ctx)
    return True


def discrete_curve(run: SeedRun, total_gpus: int, levels: IntArray = LEVELS) -> FloatArray:
    """Allocated GPU share (%) per arrival level (%), as the FGD authors discretise their logs.

    Arrival and allocation per pod are in per cent (arrival rounded to whole
    per cent, allocation to 0.01); a level's value is the mean allocation of
    the pods at that arrival, else of those within one per cent; NaN if none.
    The arithmetic is their script's (``merge_alloc_discrete.py``, pandas):
    each pod's values are rounded by Python's ``round`` (pandas' ``apply``
    hands it Python floats), a level's mean is numpy's (pairwise) sum over
    the count, and that mean is rounded by numpy (``round`` of a numpy
    scalar: times 100, to the nearest even integer, over 100). Means that
    fall on a half cent are common (a level holds about 90 pods), and with
    the exact ``math.fsum`` or Python's correctly rounded ``round`` one level
    in a few seeds landed on the other side: on the openb default list and
    the four ``gpuspec`` lists, this arithmetic reproduces every level of
    every seed of DotProd, GPU-Clustering, GPU-Packing and Best-fit.
    """
    arrived = np.array([round(x) for x in (run.arrived_milli / total_gpus / 10).tolist()])
    allocated = np.array([round(x, 2) for x in (run.allocated_milli / total_gpus / 10).tolist()])
    curve = np.full(len(levels), np.nan)
    for i, level in enumerate(levels.tolist()):
        at = arrived == level
        if not at.any():
            at = (arrived >= level - 1) & (arrived <= level + 1)
        if at.any():
            mean = np.sum(allocated[at]) / int(at.sum())
            curve[i] = float(np.round(mean, 2))
    return curve


PolicyFactory = Callable[[Sequence[TypicalTask]], SharingPolicy]
"""Builds a policy, given the target workload (FGD's typical tasks)."""

POLICIES: Mapping[str, PolicyFactory] = {
    "Random": lambda _: RandomShare(),
    "DotProd": lambda _: DotProduct(),
    "GPU-Clustering": lambda _: GpuClustering(),
    "GPU-Packing": lambda _: GpuPacking(),
    "Best-fit": lambda _: BestFit(),
    "FGD": lambda w: FragmentationGradient(FgdArgs(workload=tuple(w))),
    "FGD-balanced": lambda w: FgdBalanced(FgdBalancedArgs(workload=tuple(w))),
}
"""The published policies under the paper's names, and loadmaster's variant."""


@dataclass(frozen=True, eq=False)
class ReferenceDraws:
    """One seed's draws in the FGD authors' simulator: the pods in arrival order and the node order."""

    seed: int
    pods: IntArray
    """Pod indices (file order) in arrival order: the trace shuffled, less the pods dropped from a
    trace that asks for more than the ratio, then the pods drawn to the ratio."""
    node_order: IntArray
    """Node indices (file order), the one that wins a score tie first."""


def load_reference_draws(path: Path, data: OpenbData, ratio: float = 1.3) -> dict[int, ReferenceDraws]:
    """Per seed, the authors' draws written by ``tools/openb-draws`` (JSON, optionally gzipped).

    The file must have been written for ``data`` (its pod and node counts)
    and ``ratio``; every seed's shuffle must be a permutation of the pods and
    its node ranks a permutation of the nodes.
    """
    source = str(path)
    try:
        raw = gzip.decompress(path.read_bytes()) if path.suffix == ".gz" else path.read_bytes()
        document = json.loads(raw)
    except OSError as err:
        raise ConfigError(source, "", f"cannot read: {err.strerror or err}") from err
    except ValueError as err:
        message = f"not JSON (or gzipped JSON) as tools/openb-draws writes: {err}"
        raise ConfigError(source, "", message) from err
    if not isinstance(document, dict):
        raise ConfigError(source, "", "want an object with pods, nodes, ratio and seeds")
    for field, want in (("pods", len(data.pods)), ("nodes", len(data.nodes)), ("ratio", ratio)):
        if document.get(field) != want:
            raise ConfigError(source, field, f"is {document.get(field)!r}; the run needs {want!r}")
    seeds = document.get("seeds")
    if not isinstance(seeds, list) or not seeds:
        raise ConfigError(source, "seeds", "want a non-empty list of per-seed draws")
    out: dict[int, ReferenceDraws] = {}
    for i, entry in enumerate(seeds):
        draws = _seed_draws(source, f"seeds[{i}]", entry, len(data.pods), len(data.nodes))
        out[draws.seed] = draws
    return out


def _seed_draws(source: str, where: str, entry: Any, pods: int, nodes: int) -> ReferenceDraws:
    if not isinstance(entry, dict) or not isinstance(entry.get("seed"), int):
        raise ConfigError(source, where, "want an object with an integer seed, shuffle, drawn and node_rank")
    shuffle = _indices(source, f"{where}.shuffle", entry.get("shuffle"), pods)
    dropped = _indices(source, f"{where}.dropped", entry.get("dropped", []), pods)
    drawn = _indices(source, f"{where}.drawn", entry.get("drawn"), pods)
    rank = _indices(source, f"{where}.node_rank", entry.get("node_rank"), nodes)
    if len(shuffle) != pods or len(np.unique(shuffle)) != pods:
        raise ConfigError(source, f"{where}.shuffle", f"must hold each of the {pods} pods once")
    if len(rank) != nodes or len(np.unique(rank)) != nodes:
        raise ConfigError(source, f"{where}.node_rank", f"must hold each rank 0-{nodes - 1} once")
    if len(np.unique(dropped)) != len(dropped) or (len(dropped) and len(drawn)):
        message = "must name distinct pods, and only when none are drawn (a trace is tuned up or down)"
        raise ConfigError(source, f"{where}.dropped", message)
    kept = shuffle[~np.isin(shuffle, dropped)]  # removing pods keeps the others' order
    # Node i carries the prefix rank[i]; the smallest prefix wins a tie, so it goes first.
    return ReferenceDraws(int(entry["seed"]), np.concatenate([kept, drawn]), np.argsort(rank))


def _indices(source: str, field: str, value: Any, size: int) -> IntArray:
    if not isinstance(value, list) or not all(isinstance(v, int) and 0 <= v < size for v in value):
        raise ConfigError(source, field, f"want a list of integers from 0 to {size - 1}")
    return np.array(value, dtype=np.int64)


def run_seed(
    name: str, data: OpenbData, seed: int, ratio: float = 1.3, draws: ReferenceDraws | None = None
) -> SeedRun:
    """Policy ``name`` (a key of :data:`POLICIES`) on seed ``seed``; every policy sees the same pods.

    With ``draws`` (which must be the seed's), the pods and node order are the
    authors' for that seed; otherwise numpy's generator draws them from ``seed``.
    """
    workload = typical_workload(data.requests(), models=[data.shape_specs[i] for i in data.pods])
    if draws is not None:
        if draws.seed != seed:
            raise ValueError(f"draws are for seed {draws.seed}, not {seed}")
        order, node_order = data.pods[draws.pods], draws.node_order
    else:
        pods_rng = np.random.default_rng(seed)
        order = arrivals(data, pods_rng, ratio)
        node_order = pods_rng.permutation(len(data.nodes))
    policy = POLICIES[name](workload)
    return place_all(policy, data, order, node_order, np.random.default_rng([seed, 1]))
