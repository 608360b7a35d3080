"""The reservation search's compiled count gives the times, and the answers, of the numpy one.

:func:`scan_kernel.first_roomy` walks a search's candidate times and counts at each how many tasks
fit. It must stop at exactly the candidates at which ``reservation._candidate_times`` and the
count of :class:`reservation._Rooms` (the bound the numpy search skips times by) let a job through,
and a whole simulation must decide the same with it as without it.
"""

from __future__ import annotations

import bisect
import dataclasses
import logging
import math
import os
from collections.abc import Callable

import numpy as np
import numpy.typing as npt
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import loadmaster.scheduling.reservation as reservation
from builders import a_cluster, a_job
from fuzzing import examples
from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model import ClusterSnapshot, PendingJob, TaskPlacement
from loadmaster.model.resources import MILLI_PER_GPU
from loadmaster.scheduling import Scheduler, scan_kernel
from loadmaster.scheduling.framework import CycleContext
from loadmaster.scheduling.placement import Scoring
from loadmaster.scheduling.plugins.yarn import Yarn
from loadmaster.scheduling.state import WorkingState
from loadmaster.sim import SimOptions, simulate

if not scan_kernel.available() and os.environ.get("CI") == "true":
    pytest.fail("numba is not installed: `make test` installs the `fast` extra", pytrace=False)


@dataclasses.dataclass(frozen=True)
class _Case:
    """One search's inputs to :func:`scan_kernel.first_roomy`."""

    times: list[float]
    first: int
    start: float
    until: float
    released: npt.NDArray[np.int64]
    base: npt.NDArray[np.int64]
    res_starts: npt.NDArray[np.float64]
    res_ends: npt.NDArray[np.float64]
    res_flat: npt.NDArray[np.int64]
    allowed: npt.NDArray[np.bool_]
    gpus: int
    request: tuple[int, int, int, int]
    need: int
    run_s: float

    def counted_times(self) -> list[float]:
        """Every candidate at which the numpy count lets the job through, in order (the reference)."""
        whole, milli, cpu_milli, memory_mib = self.request
        nodes = len(self.allowed)
        cells = nodes * self.gpus
        found = []
        later_ends = [e for e in self.res_ends.tolist() if e > self.start]
        for time_s in reservation._candidate_times(self.start, self.times, self.first, later_ends):
            if time_s > self.until:
                break
            free = self.released[bisect.bisect_right(self.times, time_s)] + self.base
            for s, e, row in zip(self.res_starts, self.res_ends, self.res_flat, strict=True):
                if s < time_s + self.run_s and time_s < e:
                    free = free - row
            gpu = free[:cells].reshape(nodes, self.gpus)
            if whole:
                cap = (gpu == MILLI_PER_GPU).sum(axis=1) // whole
            else:
                cap = (np.maximum(gpu, 0) // milli).sum(axis=1)
            if cpu_milli:
                cap = np.minimum(cap, np.maximum(free[cells : cells + nodes], 0) // cpu_milli)
            if memory_mib:
                cap = np.minimum(cap, np.maximum(free[cells + nodes :], 0) // memory_mib)
            if cap[self.allowed].sum() >= self.need:
                found.append(time_s)
        return found

    def rows(self) -> tuple[npt.NDArray[np.int64], ...]:
        """The releases as a plan holds them (:class:`reservation.ReleasePlan`): rows of (node, GPU,
        milli-GPU) and of (node, milli-CPU, MiB), release k owning rows ``upto[k]:upto[k + 1]``."""
        nodes = len(self.allowed)
        cells = nodes * self.gpus
        gpu_rows: list[tuple[int, int, int]] = []
        node_rows: list[tuple[int, int, int]] = []
        gpu_upto, node_upto = [0], [0]
        for k in range(1, len(self.released)):
            step = (self.released[k] - self.released[k - 1]).tolist()
            gpu_rows += [(c // self.gpus, c % self.gpus, step[c]) for c in range(cells) if step[c]]
            node_rows += [(n, step[cells + n], step[cells + nodes + n]) for n in range(nodes)]
            gpu_upto.append(len(gpu_rows))
            node_upto.append(len(node_rows))
        return (
            np.array(gpu_rows, dtype=np.int64).reshape(-1, 3),
            np.array(gpu_upto, dtype=np.int64),
            np.array(node_rows, dtype=np.int64).reshape(-1, 3),
            np.array(node_upto, dtype=np.int64),
        )

    def walk(self, fn: Callable[..., tuple[float, int]]) -> list[float]:
        """Every time ``fn`` stops at, asking again after each (as a search does when a placement
        fails), always from the state after the first releases."""
        found: list[float] = []
        after = -math.inf
        times = np.array(self.times, dtype=np.float64)
        asked = np.array(self.request, dtype=np.int64)
        gpu_rows, gpu_upto, node_rows, node_upto = self.rows()
        nodes = len(self.allowed)
        held = [sorted({*(np.flatnonzero(row[: nodes * self.gpus]) // self.gpus).tolist(),
                        *(np.flatnonzero(row[nodes * self.gpus :]) % nodes).tolist()})
                for row in self.res_flat]  # fmt: skip
        res_nodes = np.array([n for h in held for n in h], dtype=np.int64)
        res_nodes_upto = np.cumsum([0, *map(len, held)]).astype(np.int64)
        base = self.base + self.released[self.first]
        while True:
            time_s, upto = fn(
                self.start, times, self.first, np.sort(self.res_ends), after, self.until, gpu_rows,
                gpu_upto, node_rows, node_upto, base, self.res_starts, self.res_ends, self.res_flat,
                res_nodes, res_nodes_upto, self.allowed, self.gpus, asked, self.need, self.run_s,
            )  # fmt: skip
            if upto < 0:
                return found
            assert upto == bisect.bisect_right(self.times, time_s)
            found.append(time_s)
            after = time_s


@st.composite
def _cases(draw: st.DrawFn) -> _Case:
    nodes = draw(st.integers(1, 5))
    gpus = draw(st.integers(1, 4))
    cells = nodes * gpus
    steps = draw(st.integers(0, 8))
    # few distinct times, so that releases, reservation ends and the start often coincide
    instants = st.sampled_from([0.0, 10.0, 20.0, 30.0, 45.5, 60.0, 90.0, 120.0])
    times = sorted(draw(st.lists(instants, min_size=steps, max_size=steps)))

    def row(units: st.SearchStrategy[int], most: int) -> list[int]:
        return draw(st.lists(units, min_size=cells, max_size=cells)) + draw(
            st.lists(st.integers(0, most), min_size=2 * nodes, max_size=2 * nodes)
        )

    base = np.array(row(st.sampled_from([0, 250, 500, MILLI_PER_GPU]), 8), dtype=np.int64)
    released = [np.zeros(cells + 2 * nodes, dtype=np.int64)]
    for _ in range(steps):
        released.append(released[-1] + np.array(row(st.sampled_from([0, 0, 500, MILLI_PER_GPU]), 3)))
    count = draw(st.integers(0, 4))
    spans = [sorted(draw(st.lists(instants, min_size=2, max_size=2, unique=True))) for _ in range(count)]
    held = [row(st.sampled_from([0, 250, MILLI_PER_GPU]), 4) for _ in range(count)]
    first = draw(st.integers(0, steps))
    whole = draw(st.integers(0, 2))
    milli = 0 if whole else draw(st.sampled_from([250, 500]))
    return _Case(
        times=times,
        first=first,
        start=times[first - 1] if first else draw(st.sampled_from([0.0, 5.0])),
        until=draw(st.sampled_from([math.inf, 60.0, 30.0])),
        released=np.stack(released),
        base=base,
        res_starts=np.array([a for a, _ in spans], dtype=np.float64),
        res_ends=np.array([b for _, b in spans], dtype=np.float64),
        res_flat=np.array(held, dtype=np.int64).reshape(count, cells + 2 * nodes),
        allowed=np.array(draw(st.lists(st.booleans(), min_size=nodes, max_size=nodes)), dtype=np.bool_),
        gpus=gpus,
        request=(whole, milli, draw(st.integers(0, 2)), draw(st.integers(0, 2))),
        need=draw(st.integers(1, 4)),
        run_s=draw(st.sampled_from([5.0, 15.0, 40.0, 200.0])),
    )


@settings(max_examples=examples(300), deadline=None)
@given(_cases())
def test_the_count_stops_where_the_numpy_count_lets_the_job_through(case: _Case) -> None:
    expected = case.counted_times()
    assert case.walk(scan_kernel.first_roomy_py) == expected
    compiled = scan_kernel.KERNELS.load()
    if compiled is not None:
        assert case.walk(compiled.first_roomy) == expected


def _first_fit_reference(case: _Case, whole_free: npt.NDArray[np.int64], asked: tuple[int, int, int]) -> int:
    """The first k at which ``reservation._task_cap``'s count, summed over the allowed nodes, reaches
    the need (every released GPU row counted as a whole GPU), by trying every k; -1 if none."""
    gpu_rows, gpu_upto, node_rows, node_upto = case.rows()
    nodes = len(case.allowed)
    cells = nodes * case.gpus
    whole, cpu_milli, memory_mib = asked
    for k in range(len(gpu_upto)):
        g, n = gpu_rows[: gpu_upto[k]], node_rows[: node_upto[k]]
        gpus = whole_free + np.bincount(g[:, 0], minlength=nodes)
        cpus = case.base[cells : cells + nodes] + np.bincount(n[:, 0], weights=n[:, 1], minlength=nodes)
        memories = case.base[cells + nodes :] + np.bincount(n[:, 0], weights=n[:, 2], minlength=nodes)
        caps = []
        if whole:
            caps.append(np.minimum(gpus, case.gpus) // whole)
        if cpu_milli:
            caps.append(cpus.astype(np.int64) // cpu_milli)
        if memory_mib:
            caps.append(memories.astype(np.int64) // memory_mib)
        if np.minimum.reduce(caps)[case.allowed].sum() >= case.need:
            return k
    return -1


@settings(max_examples=examples(300), deadline=None)
@given(_cases(), st.integers(0, 2), st.integers(0, 2), st.integers(0, 2))
def test_the_first_fit_count_finds_the_first_k_the_count_allows(
    case: _Case, whole: int, cpu_milli: int, memory_mib: int
) -> None:
    if not (whole or cpu_milli or memory_mib):
        whole = 1  # a request asks for something (one of them, at least)
    nodes = len(case.allowed)
    whole_free = (case.base[: nodes * case.gpus].reshape(nodes, case.gpus) == MILLI_PER_GPU).sum(axis=1)
    asked = (whole, cpu_milli, memory_mib)
    expected = _first_fit_reference(case, whole_free, asked)
    gpu_rows, gpu_upto, node_rows, node_upto = case.rows()
    cells = nodes * case.gpus
    arguments = (
        whole_free.astype(np.int64), np.full(nodes, case.gpus, dtype=np.int64),
        case.base[cells : cells + nodes].copy(), case.base[cells + nodes :].copy(), gpu_rows, gpu_upto,
        node_rows, node_upto, case.allowed, np.array(asked, dtype=np.int64), case.need,
    )  # fmt: skip
    assert scan_kernel.first_fit_py(*arguments) == expected
    compiled = scan_kernel.KERNELS.load()
    if compiled is not None:
        assert compiled.first_fit(*arguments) == expected


@pytest.mark.skipif(not scan_kernel.available(), reason="numba is not installed")
@pytest.mark.parametrize(
    ("name", "count", "long_plans"), [("slurm", 500, False), ("sds", 500, False), ("slurm", 500, True)]
)
def test_a_simulation_decides_the_same_with_and_without_the_compiled_count(
    name: str, count: int, long_plans: bool, monkeypatch: pytest.MonkeyPatch
) -> None:
    if long_plans:  # every plan counts as too long to sum for all k, as a large cluster's are
        monkeypatch.setattr(reservation, "CUMULATIVE_CELLS", 0)
    cluster = load_cluster("lab")
    jobs = load_workload("lab", cluster, jobs=count, load=1.2).jobs
    profile = load_profiles()[name]
    # the compiled count from the 20th scan on: both ways in one run, as a long run switches
    loader = scan_kernel.Loader(after=20)
    monkeypatch.setattr(reservation, "KERNELS", loader)
    calls = []
    counted = reservation._counted_scan

    def spying(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return counted(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(reservation, "_counted_scan", spying)
    compiled = simulate(cluster.nodes, Scheduler(profile), jobs, SimOptions()).jobs
    assert len(calls) > 20, len(calls)  # the compiled count made most searches
    made = len(calls)
    monkeypatch.setattr(reservation, "KERNELS", scan_kernel.Loader(after=10**9))
    plain = simulate(cluster.nodes, Scheduler(profile), jobs, SimOptions()).jobs
    assert len(calls) == made  # numpy counted every search of this run
    for field in dataclasses.fields(compiled):  # every column, NaN included (its repr)
        assert _column(compiled, field.name) == _column(plain, field.name), field.name


def test_a_failed_placement_that_kept_tasks_does_not_change_the_count() -> None:
    """A gang placement (``yarn``) that fails keeps the tasks it placed on the view it was given,
    which is the scan's own state where nothing is held. The count must not read them: past many
    releases the scan builds its state afresh, and the job fits there.

    4 nodes of 4 GPUs: node 0 free, node 1 with 3 GPUs taken (2 back at t=10, 1 at t=1000), node 2
    with 3 (back at t=1000), node 3 full; 16 releases of no GPU at t=10 (more than ``JUMP``). A
    job of 6 one-GPU tasks: at t=0 yarn takes node 0 and fails; at t=10 nodes 0 and 1 hold 6.
    """
    nodes = a_cluster().nodes(4, gpus=4).build()
    snapshot = ClusterSnapshot.empty(nodes)
    state = WorkingState.from_snapshot(snapshot)
    two, one, three = (
        TaskPlacement(1, (0, 1), MILLI_PER_GPU, 0, 0),
        TaskPlacement(1, (2,), MILLI_PER_GPU, 0, 0),
        TaskPlacement(2, (0, 1, 2), MILLI_PER_GPU, 0, 0),
    )
    full = TaskPlacement(3, (0, 1, 2, 3), MILLI_PER_GPU, 0, 0)
    cpu_only = [TaskPlacement(3, (), 0, 1, 0) for _ in range(reservation.JUMP)]
    for placement in [two, one, three, full, *cpu_only]:
        state.take(placement)
    plan = reservation.ReleasePlan(
        [
            *(reservation.Release(10.0, (p,)) for p in cpu_only),
            reservation.Release(10.0, (two,)),
            reservation.Release(1000.0, (one,)),
            reservation.Release(1000.0, (three,)),
            reservation.Release(5000.0, (full,)),
        ],
        {},
    )
    pending = PendingJob(a_job("j").gpus(1).tasks(6).limit(30.0).build())
    placer = reservation.Placer(np.ones(4, dtype=bool), Scoring(()), Yarn())

    def start(counting: Callable[..., tuple[float, int]] | None) -> float | None:
        view = state.copy()
        ctx = CycleContext(now=0.0, rng=np.random.default_rng(0), snapshot=snapshot, state=view)
        future = reservation.Future(view, plan)
        first = reservation._first_fit(future, 6, placer, pending.job.request)
        assert first == 0  # by count the job fits now: yarn's placement fails there
        sums = reservation.HeldSums([])
        found = (
            reservation._scan(
                pending, 30.0, first, ctx=ctx, future=future, reservations=[], placer=placer, sums=sums
            )
            if counting is None
            else reservation._counted_scan(
                pending,
                30.0,
                first,
                ctx=ctx,
                future=future,
                placer=placer,
                sums=sums,
                settled=None,
                counting=counting,
            )
        )
        return None if found is None else float(found.start_s)

    with pytest.MonkeyPatch.context() as patch:  # the numpy count in _scan
        patch.setattr(reservation, "KERNELS", scan_kernel.Loader(after=10**9))
        assert start(None) == 10.0
    assert start(scan_kernel.first_roomy_py) == 10.0
    compiled = scan_kernel.KERNELS.load()
    if compiled is not None:
        assert start(compiled.first_roomy) == 10.0


def _column(table: object, name: str) -> str:
    return repr(np.asarray(getattr(table, name)).tolist())


def test_the_loader_counts_with_numpy_until_the_threshold_then_loads_once(
    monkeypatch: pytest.MonkeyPatch, caplog: pytest.LogCaptureFixture
) -> None:
    loads = []

    def compiling() -> object:
        loads.append(1)
        return scan_kernel.first_roomy_py

    monkeypatch.setattr(scan_kernel, "_compiled", compiling)
    loader = scan_kernel.Loader(after=3)
    with caplog.at_level(logging.INFO, logger="loadmaster.scheduling.scan_kernel"):
        assert [loader.get() for _ in range(2)] == [None, None]
        assert not caplog.records
        assert loader.get() is scan_kernel.first_roomy_py
        assert loader.get() is scan_kernel.first_roomy_py
    assert loads == [1]
    assert [r.getMessage().split(" (")[0] for r in caplog.records] == [
        "reservation searches now count candidates with the compiled count"
    ]
    assert "after 3 scans" in caplog.records[0].getMessage()


def test_without_numba_the_loader_tries_once_and_counts_with_numpy(monkeypatch: pytest.MonkeyPatch) -> None:
    loads = []
    monkeypatch.setattr(scan_kernel, "_compiled", lambda: loads.append(1))
    loader = scan_kernel.Loader(after=1)
    assert [loader.get() for _ in range(5)] == [None] * 5
    assert loads == [1]
