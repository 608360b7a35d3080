"""The frozen, per-cycle view of a cluster that the scheduler decides on."""

from __future__ import annotations

import operator
from collections.abc import Collection, Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any, Protocol

import numpy as np
import numpy.typing as npt

from loadmaster.model.job import PendingJob, RunningJob, job_group, job_user
from loadmaster.model.node import NodeTable
from loadmaster.model.pending_log import PendingLog
from loadmaster.model.resources import MILLI_PER_GPU
from loadmaster.model.running import RunningSerials

# map() with attribute getters: C loops over every running and waiting job (thousands on a large
# cluster), where comprehensions step through Python for each.
_JOB = operator.attrgetter("job")


class MigView(Protocol):
    """What a snapshot's reader may ask of the MIG-mode GPUs it carries.

    The state itself (layouts, instances in use, ready GPUs) is runtime state of the
    simulator and the scheduler, :class:`loadmaster.scheduling.mig_pool.MigPool`;
    ``model`` only names the read-only questions, so it depends on nothing above it.
    """

    def free_count(self, profile: str) -> npt.NDArray[np.int64]:
        """Free instances of ``profile`` per node."""
        ...

    def idle_gpus(self) -> npt.NDArray[np.float64]:
        """Per node: the compute of its MIG-mode GPUs that no task holds, in GPUs."""
        ...

    def node_gpus(self, node: int) -> tuple[int, ...]:
        """The MIG-mode GPU indices of ``node``."""
        ...


@dataclass(frozen=True, eq=False)
class ClusterSnapshot:
    """What the scheduler sees in one cycle.

    ``gpu_free_milli`` has shape (nodes, max_gpus): free milli-GPU of each GPU
    (1000 = wholly free, 0 = fully taken or no such GPU). ``cpu_free_milli``
    and ``memory_free_mib`` are per node. Arrays are read-only; the scheduler
    works on its own copies. ``pending`` iterates in submission order.

    A snapshot is valid for the cycle it was taken for: a driver may hand the
    scheduler live read-only views rather than copies, so a scheduler must not
    keep a snapshot past the cycle.
    """

    nodes: NodeTable
    gpu_free_milli: npt.NDArray[np.int64]
    cpu_free_milli: npt.NDArray[np.int64]
    memory_free_mib: npt.NDArray[np.int64]
    whole_free: npt.NDArray[np.int64]
    """Wholly free GPUs per node."""
    largest_share: npt.NDArray[np.int64]
    """Largest free milli-GPU on any one GPU of each node."""
    free_milli: npt.NDArray[np.int64]
    """Free milli-GPU per node, summed over its GPUs."""
    running: Collection[RunningJob]
    pending: Collection[PendingJob]
    pending_queues: frozenset[str] | None = None
    """Names of the queues that hold pending jobs, when the driver tracks them (else computed)."""
    active_owners: tuple[frozenset[str], frozenset[str]] | None = None
    """The users and the groups with a job running or pending, when the driver counts them as
    jobs come and go (else computed from ``running`` and ``pending``; see :meth:`owners`)."""

    usage_gpu_s: Mapping[str, float] = field(default_factory=dict)
    """Past GPU-seconds with half-life decay, keyed ``user/<name>`` and ``group/<name>`` (fair share)."""
    recent_runtimes_s: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Run times of each user's most recent finished jobs, newest last (runtime prediction)."""
    recent_limits_s: Mapping[str, tuple[float, ...]] = field(default_factory=dict)
    """Requested time limits of the same jobs as ``recent_runtimes_s``, in the same order (how far
    each user over-asks; empty where the driver does not keep them)."""
    mig: MigView | None = None
    """The MIG-mode GPUs with their layouts and free instances (None: no GPU is in MIG mode).
    A MIG-mode GPU shows 0 free in ``gpu_free_milli``: only MIG requests can use it. Read only."""

    pods_free: npt.NDArray[np.int64] | None = None
    """Tasks each node may still take in all, whatever their size (Kubernetes ``allocatable.pods`` less
    the pods on the node, of every scheduler); None: no such limit. Read only."""

    running_held: tuple[Mapping[str, Sequence[int]], Mapping[str, Sequence[int]]] | None = None
    """What the running jobs of each user, and of each group, hold: milli-GPU of whole and shared
    GPUs (MIG instances not counted), milli-CPU and memory MiB, summed by the driver as jobs start
    and stop (None: a reader sums ``running``). A fair-share order needs them at every cycle, and a
    large cluster runs thousands of jobs. Integer sums, so any order of adding gives the same
    numbers; an owner with nothing running may be missing or hold zeros. Read only."""

    running_serials: RunningSerials | None = None
    """The running jobs' serial numbers (:mod:`loadmaster.model.running`), whose ``array()`` is in
    ``running``'s order, when the driver numbers its runs as they start (else None: books key jobs
    by object). A number names one run of one job in the process, so equal arrays mean the same
    runs in the same order; a book then finds its rows with one gather, not a dict look-up per job.
    The driver's own keeper, read only: the array is made when a scheduler asks for it (only those
    with per-job books do), not for every snapshot."""

    service_s: Mapping[str, tuple[float, float, float]] = field(default_factory=dict)
    """Per job id that ran and was preempted with its progress kept (a checkpointing driver):
    (seconds it ran before its current run, when its last run stopped, how long that run was).
    Attained-service orders (Tiresias' LAS) read it; empty where preemption restarts jobs."""

    pending_log: PendingLog | None = None
    """The driver's log of changes to ``pending``, at the version that leads to ``pending`` as it is
    (:mod:`loadmaster.model.pending_log`), where the driver keeps one (else None: a reader reads the
    whole queue). Read only."""

    def queues(self) -> frozenset[str]:
        """Names of the queues that hold pending jobs."""
        if self.pending_queues is not None:
            return self.pending_queues
        return frozenset(p.job.queue for p in self.pending)

    def serials(self) -> npt.NDArray[np.int64] | None:
        """``running_serials``' array, in ``running``'s order, or None where the driver keeps none."""
        keeper = self.running_serials
        return None if keeper is None else keeper.array()

    def owners(self) -> tuple[frozenset[str], frozenset[str]]:
        """The users and the groups with a job running or pending."""
        if self.active_owners is not None:
            return self.active_owners
        jobs = [*map(_JOB, self.running), *map(_JOB, self.pending)]
        return frozenset(map(job_user, jobs)), frozenset(map(job_group, jobs))

    @classmethod
    def empty(cls, nodes: NodeTable, pending: Collection[PendingJob] = ()) -> ClusterSnapshot:
        """The cluster with nothing running: every resource free."""
        gpu_free = np.where(nodes.gpu_exists(), MILLI_PER_GPU, 0).astype(np.int64)
        whole, largest, total = gpu_summary(gpu_free)
        return cls(
            nodes=nodes,
            gpu_free_milli=gpu_free,
            whole_free=whole,
            largest_share=largest,
            free_milli=total,
            cpu_free_milli=nodes.cpu_milli.copy(),
            memory_free_mib=nodes.memory_mib.copy(),
            running=(),
            pending=tuple(pending),
        )


def gpu_summary(
    gpu_free: npt.NDArray[np.int64],
) -> tuple[npt.NDArray[np.int64], npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Per node: wholly free GPUs, largest free share of one GPU, and free milli-GPU in total.

    The ufuncs' own reductions, each into a new int64 array: ``count_nonzero`` with an axis and
    the array methods go through Python-level wrappers, most of the cost on a small cluster (a
    reservation search summarises every view it builds); on many nodes, across the GPUs
    (:func:`per_node`: about a quarter of the time on 1,000 x 8 GPUs)."""
    if gpu_free.shape[1] == 0:
        zeros = np.zeros(gpu_free.shape[0], dtype=np.int64)
        return zeros.copy(), zeros, zeros.copy()
    whole = per_node(np.add, gpu_free == MILLI_PER_GPU, dtype=np.int64)
    largest = per_node(np.maximum, gpu_free).astype(np.int64, copy=False)
    return whole, largest, per_node(np.add, gpu_free, dtype=np.int64)


TRANSPOSED_FROM_NODES = 64
"""Nodes from which :func:`per_node` reduces a transposed copy (the lab's 24 nodes stay below it)."""


def per_node(ufunc: np.ufunc, values: npt.NDArray[Any], dtype: type | None = None) -> npt.NDArray[Any]:
    """``ufunc`` reduced over the last axis (a node's GPUs) of ``values`` (..., nodes, GPUs).

    From :data:`TRANSPOSED_FROM_NODES` nodes on, through a contiguous copy with the GPUs first: a
    reduction along rows of a few GPUs runs its inner loop once per node, one across them a few
    long vectorised loops. Exact either way for the integer and boolean arrays it is given."""
    if values.ndim >= 2 and values.shape[-2] >= TRANSPOSED_FROM_NODES:
        values = np.ascontiguousarray(np.moveaxis(values, -1, 0))
        reduced: npt.NDArray[Any] = ufunc.reduce(values, axis=0, dtype=dtype)
        return reduced
    reduced = ufunc.reduce(values, axis=-1, dtype=dtype)
    return reduced


def node_gpu_summary(row: npt.NDArray[np.int64]) -> tuple[int, int, int]:
    """One node's row of :func:`gpu_summary`: whole free GPUs, largest free share, free milli-GPU."""
    if row.size == 0:
        return 0, 0, 0
    # Python's list methods: a node has a handful of GPUs, where each numpy call's fixed cost
    # (three reductions and a comparison, about 4 us) is several times the work.
    values: list[int] = row.tolist()
    return values.count(MILLI_PER_GPU), max(values), sum(values)
