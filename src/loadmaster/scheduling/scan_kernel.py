"""The reservation search's count by candidate time, compiled where numba is installed.

A search (:func:`loadmaster.scheduling.reservation.earliest_start`) tries candidate times in order;
at most of them fewer tasks of the job fit, by count, on the cluster after the releases up to that
time less the reservations its run would overlap, and the time is skipped without building the
view. That count is a few small array operations per candidate, and on a cluster of tens of nodes
numpy's cost per call, not the arithmetic, is the time: the slurm profile's demo makes about fifty
thousand searches. :func:`first_roomy_py`, compiled, walks the candidates and counts in one compiled loop and
returns the first time the count allows, where the search then builds the view and places the
job exactly as before. The count is the one the search used to skip times by (an upper bound of
what the view holds), so the times the search places at, and its answer, are the same.

numba is optional (the ``fast`` extra, which ``make demo`` and ``make test`` install): without it
the search counts with numpy as it did. A process loads the compiled count only once it has
scanned enough for the count to pay for its loading (:data:`SCANS_BEFORE_LOADING`). The machine
code is cached on disk by numba (``cache=True``), so only the first run on a machine compiles it.
"""

from __future__ import annotations

import importlib.util
import logging
import math
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.model.resources import MILLI_PER_GPU

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def first_roomy_py(  # noqa: PLR0915, PLR0917 - positional arrays and numbers: what numba compiles best
    start: float,
    times: FloatArray,
    first: int,
    ends: FloatArray,
    after: float,
    until: float,
    gpu_rows: IntArray,
    gpu_upto: IntArray,
    node_rows: IntArray,
    node_upto: IntArray,
    base: IntArray,
    res_starts: FloatArray,
    res_ends: FloatArray,
    res_flat: IntArray,
    res_nodes: IntArray,
    res_nodes_upto: IntArray,
    allowed: BoolArray,
    gpus: int,
    request: IntArray,
    need: int,
    run_s: float,
) -> tuple[float, int]:
    """The first candidate time after ``after`` and at most ``until`` at which enough tasks fit by count,
    and the releases up to it; ``(nan, -1)`` if none.

    Candidates are ``start``, then the release times from ``times[first]`` on and the reservation
    ends (``ends``, ascending), those after ``start``, ascending and once each (as
    ``reservation._candidate_times`` makes them). At a candidate ``t`` the free resources are
    ``base`` (what is free after the first ``first`` releases) plus the releases from ``first`` up
    to ``upto`` (the releases at or before ``t``; ``upto >= first`` at every candidate) less the
    summed rows of ``res_flat`` of the reservations overlapping ``[t, t + run_s)``, all in
    :attr:`Held.flat`'s layout (``gpus`` per node, GPUs row by row, then CPU, then memory per node).
    ``request`` holds the task's whole GPUs, milli-GPU of a shared one, milli-CPU and MiB (0: not
    asked); a node holds ``min`` over what is asked of the tasks its free resources (clamped at 0)
    take, whole GPUs counting only GPUs wholly free. Written so that numba compiles it as it stands.

    The count is kept, not redone at each candidate: the releases are the plan's own rows
    (:class:`~loadmaster.scheduling.reservation.ReleasePlan`: ``gpu_rows`` of (node, GPU,
    milli-GPU), ``node_rows`` of (node, milli-CPU, MiB), release ``k`` owning rows
    ``upto[k]:upto[k + 1]``), added as the walk passes them, and only the nodes they touch are
    counted again. A candidate's overlapping reservations change only the nodes they hold
    (``res_nodes[res_nodes_upto[r]:res_nodes_upto[r + 1]]``: every node where row ``r`` of
    ``res_flat`` is not zero), which are counted on their own. On a cluster of a thousand nodes
    a candidate then costs what its releases and reservations touch, not the whole cluster, and no
    matrix of every ``k``'s sums (which would not fit in memory there) is needed.
    """
    nodes = allowed.shape[0]
    cells = nodes * gpus
    whole, milli, cpu_milli, memory_mib = request[0], request[1], request[2], request[3]
    current = base.copy()
    scratch = np.empty(gpus + 2, dtype=np.int64)

    def cap(n: int, with_held: bool, overlapping: BoolArray) -> int:
        """Tasks node ``n`` holds: on ``current``, or less the overlapping reservations' rows."""
        for g in range(gpus):
            scratch[g] = current[n * gpus + g]
        scratch[gpus] = current[cells + n]
        scratch[gpus + 1] = current[cells + nodes + n]
        if with_held:
            for r in range(overlapping.shape[0]):
                if overlapping[r]:
                    for g in range(gpus):
                        scratch[g] -= res_flat[r, n * gpus + g]
                    scratch[gpus] -= res_flat[r, cells + n]
                    scratch[gpus + 1] -= res_flat[r, cells + nodes + n]
        tasks = -1
        if whole:
            count = 0
            for g in range(gpus):
                if scratch[g] == MILLI_PER_GPU:
                    count += 1
            tasks = count // whole
        elif milli:
            count = 0
            for g in range(gpus):
                if scratch[g] > 0:
                    count += scratch[g] // milli
            tasks = count
        if cpu_milli:
            cpu = max(scratch[gpus], 0) // cpu_milli
            tasks = cpu if tasks < 0 else min(tasks, cpu)
        if memory_mib:
            memory = max(scratch[gpus + 1], 0) // memory_mib
            tasks = memory if tasks < 0 else min(tasks, memory)
        return int(tasks)

    overlapping = np.zeros(res_starts.shape[0], dtype=np.bool_)
    caps = np.zeros(nodes, dtype=np.int64)
    total = 0
    for n in range(nodes):
        if allowed[n]:
            caps[n] = cap(n, False, overlapping)
            total += caps[n]
    stamp = np.zeros(nodes, dtype=np.int64)
    mark = 0
    applied = first
    n_times, n_ends = times.shape[0], ends.shape[0]
    # positions in the two ascending lists of the candidates after ``after``
    i = max(first, int(np.searchsorted(times, after, side="right")))
    e = int(np.searchsorted(ends, after, side="right"))
    while True:
        if after < start:
            time_s = start
        else:  # the next candidate: the smaller of the two lists' next ones (both after ``after``)
            while i < n_times and times[i] <= after:
                i += 1
            while e < n_ends and ends[e] <= after:
                e += 1
            if i < n_times and (e >= n_ends or times[i] <= ends[e]):
                time_s = times[i]
            elif e < n_ends:
                time_s = ends[e]
            else:
                return math.nan, -1
        if time_s > until:
            return math.nan, -1
        upto = int(np.searchsorted(times, time_s, side="right"))
        mark += 1  # nodes counted again at this candidate: stamped with ``mark``
        for row in range(gpu_upto[applied], gpu_upto[upto]):
            n = gpu_rows[row, 0]
            current[n * gpus + gpu_rows[row, 1]] += gpu_rows[row, 2]
            stamp[n] = mark
        for row in range(node_upto[applied], node_upto[upto]):
            n = node_rows[row, 0]
            current[cells + n] += node_rows[row, 1]
            current[cells + nodes + n] += node_rows[row, 2]
            stamp[n] = mark
        for row in range(gpu_upto[applied], gpu_upto[upto]):
            n = gpu_rows[row, 0]
            if stamp[n] == mark:
                stamp[n] = 0  # counted once, however many rows it had
                if allowed[n]:
                    fresh = cap(n, False, overlapping)
                    total += fresh - caps[n]
                    caps[n] = fresh
        for row in range(node_upto[applied], node_upto[upto]):
            n = node_rows[row, 0]
            if stamp[n] == mark:
                stamp[n] = 0
                if allowed[n]:
                    fresh = cap(n, False, overlapping)
                    total += fresh - caps[n]
                    caps[n] = fresh
        applied = upto
        end_s = time_s + run_s
        any_held = False
        for r in range(res_starts.shape[0]):
            overlapping[r] = res_starts[r] < end_s and time_s < res_ends[r]
            any_held = any_held or overlapping[r]
        room = total
        if any_held:
            mark += 1
            for r in range(res_starts.shape[0]):
                if overlapping[r]:
                    for j in range(res_nodes_upto[r], res_nodes_upto[r + 1]):
                        n = res_nodes[j]
                        if allowed[n] and stamp[n] != mark:
                            stamp[n] = mark
                            room += cap(n, True, overlapping) - caps[n]
        if room >= need:
            return time_s, upto
        after = time_s


def first_fit_py(  # noqa: PLR0917 - positional arrays and numbers: what numba compiles best
    whole_free: IntArray,
    node_gpus: IntArray,
    cpu_free: IntArray,
    memory_free: IntArray,
    gpu_rows: IntArray,
    gpu_upto: IntArray,
    node_rows: IntArray,
    node_upto: IntArray,
    allowed: BoolArray,
    request: IntArray,
    need: int,
) -> int:
    """The fewest releases after which ``need`` tasks fit by count, or -1 if none: the count of
    ``reservation._task_cap`` (every released GPU counted as wholly free), walked release by release.

    The count only grows with the releases, so the first ``k`` at which it suffices is the one a
    bisection over ``k`` finds; walking the plan's rows (as :func:`first_roomy_py` reads them)
    changes only the nodes a release touches, where a bisection sums every node at each step.
    ``request`` holds the task's whole GPUs, milli-CPU and MiB (0: not asked; at least one is).
    """
    whole, cpu_milli, memory_mib = request[0], request[1], request[2]
    nodes = allowed.shape[0]
    gpus = whole_free.copy()
    cpus = cpu_free.copy()
    memories = memory_free.copy()

    def cap(n: int) -> int:  # reservation._task_cap for one node (numba inlines a local function)
        tasks = -1
        if whole:
            tasks = min(gpus[n], node_gpus[n]) // whole
        if cpu_milli:
            cpu = cpus[n] // cpu_milli
            tasks = cpu if tasks < 0 else min(tasks, cpu)
        if memory_mib:
            memory = memories[n] // memory_mib
            tasks = memory if tasks < 0 else min(tasks, memory)
        return int(tasks)

    total = 0
    for n in range(nodes):
        if allowed[n]:
            total += cap(n)
    if total >= need:
        return 0
    for k in range(1, gpu_upto.shape[0]):
        for row in range(gpu_upto[k - 1], gpu_upto[k]):
            n = gpu_rows[row, 0]
            if allowed[n]:
                total -= cap(n)
                gpus[n] += 1
                total += cap(n)
        for row in range(node_upto[k - 1], node_upto[k]):
            n = node_rows[row, 0]
            if allowed[n]:
                total -= cap(n)
                cpus[n] += node_rows[row, 1]
                memories[n] += node_rows[row, 2]
                total += cap(n)
        if total >= need:
            return k
    return -1


@dataclass(frozen=True, slots=True)
class Kernels:
    """The compiled counts: :func:`first_roomy_py` and :func:`first_fit_py`."""

    first_roomy: Callable[..., tuple[float, int]]
    first_fit: Callable[..., int]


def _compiled() -> Kernels | None:
    """:func:`first_roomy_py` and :func:`first_fit_py` compiled by numba, or None where numba is not
    installed."""
    try:
        import numba  # noqa: PLC0415 - optional, and half a second to import: loaded when it pays
    except ImportError:
        log.info("numba is not installed: reservation searches count candidates with numpy")
        return None
    # One signature each, compiled (or loaded from the cache) now: the caller passes exactly these
    # types, so no call compiles another version for, say, an integer time.
    f8, i8, floats, ints, table, flags = (
        numba.float64,
        numba.int64,
        numba.float64[:],
        numba.int64[:],
        numba.int64[:, :],
        numba.boolean[:],
    )
    roomy = numba.types.Tuple((f8, i8))(  # type: ignore[no-untyped-call]
        f8, floats, i8, floats, f8, f8, table, ints, table, ints, ints, floats, floats, table, ints,
        ints, flags, i8, ints, i8, f8,
    )  # fmt: skip
    fit = i8(ints, ints, ints, ints, table, ints, table, ints, flags, ints, i8)
    try:
        return Kernels(
            numba.njit(roomy, cache=True, nogil=True)(first_roomy_py),
            numba.njit(fit, cache=True, nogil=True)(first_fit_py),
        )
    except RuntimeError as error:  # no writable cache beside the module or in the user's cache folder
        log.warning("numba cannot cache the search's counts (%s): compiled at each start instead", error)
        return Kernels(
            numba.njit(roomy, nogil=True)(first_roomy_py), numba.njit(fit, nogil=True)(first_fit_py)
        )


SCANS_BEFORE_LOADING = 5_000
"""Scans a process makes with numpy before it loads the compiled count.

Loading costs about 1.2 s of CPU once per process (0.55 s to import numba, 0.6 s to load the
cached machine code; 2.3 billion instructions under callgrind), and the count saves about 0.47
million instructions per scan (`slurm` on the lab cluster, 2,000 jobs): it pays for itself after
about 4,900 scans. A short run, or a profile that rarely searches (on the demo `sds` makes 4,544
scans, `learned` 4,315, `nsml` 3,809; `slurm` 33,945), never loads it; a run that scans more pays
at most the scans before the threshold twice (the rent-or-buy rule: rent until the rent paid
equals the price). Both counts give the same answers, so the switch changes no decision."""


class Loader:
    """The compiled counts, loaded at the :data:`SCANS_BEFORE_LOADING`-th scan of the process
    (``after``), or never where numba is not installed."""

    def __init__(self, after: int = SCANS_BEFORE_LOADING) -> None:
        self.after = after
        self.scans = 0
        self._loaded = False
        self._fn: Kernels | None = None

    def get(self) -> Kernels | None:
        """The compiled counts for this scan, or None: count with numpy (not yet, or no numba)."""
        if self._loaded:
            return self._fn
        self.scans += 1
        return self.load() if self.scans >= self.after else None

    def loaded(self) -> Kernels | None:
        """The compiled counts if they are loaded, without counting a scan."""
        return self._fn

    def load(self) -> Kernels | None:
        """Load it now (None where numba is not installed)."""
        if not self._loaded:
            self._fn, self._loaded = _compiled(), True
            if self._fn is not None:  # a long-running scheduler says once why its searches sped up
                log.info(
                    "reservation searches now count candidates with the compiled count (after %d scans)",
                    self.scans,
                )
        return self._fn


KERNELS = Loader()
"""The process's compiled counts, as its scans reach the threshold."""


def available() -> bool:
    """Whether numba is installed (without importing it)."""
    return importlib.util.find_spec("numba") is not None
