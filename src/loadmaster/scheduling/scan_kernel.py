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

import numpy as np
import numpy.typing as npt

from loadmaster.model.resources import MILLI_PER_GPU

log = logging.getLogger(__name__)

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]
BoolArray = npt.NDArray[np.bool_]


def first_roomy_py(  # noqa: PLR0917 - positional arrays and numbers: what numba compiles best
    start: float,
    times: FloatArray,
    first: int,
    ends: FloatArray,
    after: float,
    until: float,
    released: IntArray,
    base: IntArray,
    res_starts: FloatArray,
    res_ends: FloatArray,
    res_flat: IntArray,
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
    ``base + released[upto]`` (``upto``: releases at or before ``t``) less the summed rows of
    ``res_flat`` of the reservations overlapping ``[t, t + run_s)``, in :attr:`Held.flat`'s layout
    (``gpus`` per node, GPUs row by row, then CPU, then memory per node). ``request`` holds the
    task's whole GPUs, milli-GPU of a shared one, milli-CPU and MiB (0: not asked); a node holds
    ``min`` over what is asked of the tasks its free resources (clamped at 0) take, whole GPUs
    counting only GPUs wholly free. Written so that numba compiles it as it stands.
    """
    nodes = allowed.shape[0]
    cells = nodes * gpus
    whole, milli, cpu_milli, memory_mib = request[0], request[1], request[2], request[3]
    free = np.empty(base.shape[0], dtype=np.int64)
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
        free[:] = released[upto] + base
        end_s = time_s + run_s
        for r in range(res_starts.shape[0]):
            if res_starts[r] < end_s and time_s < res_ends[r]:
                free -= res_flat[r]
        room = 0
        for n in range(nodes):
            if not allowed[n]:
                continue
            cap = -1
            if whole:
                count = 0
                for c in range(n * gpus, (n + 1) * gpus):
                    if free[c] == MILLI_PER_GPU:
                        count += 1
                cap = count // whole
            elif milli:
                count = 0
                for c in range(n * gpus, (n + 1) * gpus):
                    if free[c] > 0:
                        count += free[c] // milli
                cap = count
            if cpu_milli:
                cpu = max(free[cells + n], 0) // cpu_milli
                cap = cpu if cap < 0 else min(cap, cpu)
            if memory_mib:
                memory = max(free[cells + nodes + n], 0) // memory_mib
                cap = memory if cap < 0 else min(cap, memory)
            room += cap
        if room >= need:
            return time_s, upto
        after = time_s


def _compiled() -> Callable[..., tuple[float, int]] | None:
    """:func:`first_roomy_py` compiled by numba, or None where numba is not installed."""
    try:
        import numba  # noqa: PLC0415 - optional, and half a second to import: loaded when it pays
    except ImportError:
        log.info("numba is not installed: reservation searches count candidates with numpy")
        return None
    # One signature, compiled (or loaded from the cache) now: the caller passes exactly these
    # types, so no call compiles another version for, say, an integer time.
    f8, i8, floats, ints, table = (
        numba.float64,
        numba.int64,
        numba.float64[:],
        numba.int64[:],
        numba.int64[:, :],
    )
    signature = numba.types.Tuple((f8, i8))(  # type: ignore[no-untyped-call]
        f8, floats, i8, floats, f8, f8, table, ints, floats, floats, table, numba.boolean[:], i8, ints, i8, f8
    )
    try:
        compiled: Callable[..., tuple[float, int]] = numba.njit(signature, cache=True, nogil=True)(
            first_roomy_py
        )
    except RuntimeError as error:  # no writable cache beside the module or in the user's cache folder
        log.warning("numba cannot cache the search's count (%s): compiled at each start instead", error)
        compiled = numba.njit(signature, nogil=True)(first_roomy_py)
    return compiled


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
    """The compiled count, loaded at the :data:`SCANS_BEFORE_LOADING`-th scan of the process
    (``after``), or never where numba is not installed."""

    def __init__(self, after: int = SCANS_BEFORE_LOADING) -> None:
        self.after = after
        self.scans = 0
        self._loaded = False
        self._fn: Callable[..., tuple[float, int]] | None = None

    def get(self) -> Callable[..., tuple[float, int]] | None:
        """The compiled count for this scan, or None: count with numpy (not yet, or no numba)."""
        if self._loaded:
            return self._fn
        self.scans += 1
        return self.load() if self.scans >= self.after else None

    def load(self) -> Callable[..., tuple[float, int]] | None:
        """Load it now (None where numba is not installed)."""
        if not self._loaded:
            self._fn, self._loaded = _compiled(), True
            if self._fn is not None:  # a long-running scheduler says once why its searches sped up
                log.info(
                    "reservation searches now count candidates with the compiled count (after %d scans)",
                    self.scans,
                )
        return self._fn


FIRST_ROOMY = Loader()
"""The process's compiled :func:`first_roomy_py`, as its scans reach the threshold."""


def available() -> bool:
    """Whether numba is installed (without importing it)."""
    return importlib.util.find_spec("numba") is not None
