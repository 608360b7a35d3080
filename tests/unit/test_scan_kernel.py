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
from fuzzing import examples
from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model.resources import MILLI_PER_GPU
from loadmaster.scheduling import Scheduler, scan_kernel
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

    def walk(self, fn: Callable[..., tuple[float, int]]) -> list[float]:
        """Every time ``fn`` stops at, asking again after each (as a search does when a placement fails)."""
        found: list[float] = []
        after = -math.inf
        times = np.array(self.times, dtype=np.float64)
        asked = np.array(self.request, dtype=np.int64)
        while True:
            time_s, upto = fn(
                self.start, times, self.first, np.sort(self.res_ends), after, self.until, self.released,
                self.base, self.res_starts, self.res_ends, self.res_flat, self.allowed, self.gpus, asked,
                self.need, self.run_s,
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
    compiled = scan_kernel.FIRST_ROOMY.load()
    if compiled is not None:
        assert case.walk(compiled) == expected


@pytest.mark.skipif(not scan_kernel.available(), reason="numba is not installed")
@pytest.mark.parametrize(("name", "count"), [("slurm", 500), ("sds", 500)])
def test_a_simulation_decides_the_same_with_and_without_the_compiled_count(
    name: str, count: int, monkeypatch: pytest.MonkeyPatch
) -> None:
    cluster = load_cluster("lab")
    jobs = load_workload("lab", cluster, jobs=count, load=1.2).jobs
    profile = load_profiles()[name]
    # the compiled count from the 20th scan on: both ways in one run, as a long run switches
    loader = scan_kernel.Loader(after=20)
    monkeypatch.setattr(reservation, "FIRST_ROOMY", loader)
    calls = []
    counted = reservation._counted_scan

    def spying(*args: object, **kwargs: object) -> object:
        calls.append(1)
        return counted(*args, **kwargs)  # type: ignore[arg-type]

    monkeypatch.setattr(reservation, "_counted_scan", spying)
    compiled = simulate(cluster.nodes, Scheduler(profile), jobs, SimOptions()).jobs
    assert len(calls) > 20, len(calls)  # the compiled count made most searches
    made = len(calls)
    monkeypatch.setattr(reservation, "FIRST_ROOMY", scan_kernel.Loader(after=10**9))
    plain = simulate(cluster.nodes, Scheduler(profile), jobs, SimOptions()).jobs
    assert len(calls) == made  # numpy counted every search of this run
    for field in dataclasses.fields(compiled):  # every column, NaN included (its repr)
        assert _column(compiled, field.name) == _column(plain, field.name), field.name


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
