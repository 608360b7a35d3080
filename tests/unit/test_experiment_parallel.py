"""Profiles simulated in parallel processes give the same runs as one after the other; outputs written
by helper processes are the files written in this one."""

from __future__ import annotations

import importlib
import os
import re
from collections import Counter
from pathlib import Path

import numpy as np
import pytest

from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.experiment import (
    OUTPUT_PARTS,
    compare,
    context,
    expected_cost,
    output_helpers,
    write_outputs,
)
from loadmaster.scheduling import scan_kernel


def test_two_workers_give_the_same_job_tables_and_full_progress() -> None:
    cluster = load_cluster("lab")
    workload = load_workload("lab", cluster, jobs=80)
    profiles = [load_profiles()[name] for name in ("fifo", "sds", "slurm")]
    serial = compare(cluster, workload, profiles, seed=3)
    seen: Counter[str] = Counter()
    parallel = compare(
        cluster, workload, profiles, seed=3, workers=2, progress=lambda n, k: seen.update({n: k})
    )
    assert [r.profile for r in parallel] == profiles  # the caller's objects, in the caller's order
    assert seen == {"fifo": 80, "sds": 80, "slurm": 80}
    for one, other in zip(serial, parallel, strict=True):
        for column in ("job_id", "start_s", "end_s", "node_names", "wait_reason", "reason"):
            assert np.array_equal(getattr(one.result.jobs, column), getattr(other.result.jobs, column)), (
                column
            )
        assert one.summary.mean_wait_s == other.summary.mean_wait_s


def test_a_run_expected_to_search_often_loads_the_compiled_count_once_before_the_workers_fork(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """80 jobs under fifo, sds (1 reservation per lane) and slurm (8): about 720 searches expected,
    fewer than a process makes before loading the count itself; from a lower threshold on, the
    parent loads it before the fork (once, whatever the number of workers), and the forked workers'
    runs are those of a serial run."""
    cluster = load_cluster("lab")
    workload = load_workload("lab", cluster, jobs=80)
    profiles = [load_profiles()[name] for name in ("fifo", "sds", "slurm")]
    serial = compare(cluster, workload, profiles, seed=3)
    loads: list[int] = []  # this process's loads (a worker appends to its own copy)
    real_load = scan_kernel.KERNELS.load

    def load() -> scan_kernel.Kernels | None:
        loads.append(os.getpid())
        return real_load()

    monkeypatch.setattr(scan_kernel.KERNELS, "load", load)
    compare(cluster, workload, profiles, seed=3, workers=2)
    assert loads == []
    monkeypatch.setattr(scan_kernel, "SCANS_BEFORE_LOADING", 720)
    parallel = compare(cluster, workload, profiles, seed=3, workers=2)
    assert loads == [os.getpid()]
    for one, other in zip(serial, parallel, strict=True):
        assert np.array_equal(one.result.jobs.start_s, other.result.jobs.start_s)
        assert np.array_equal(one.result.jobs.node_names, other.result.jobs.node_names)


_DIV_ID = re.compile(rb"[0-9a-f]{8}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{4}-[0-9a-f]{12}")
"""plotly names each chart's div with a fresh uuid4: the one part of the report that differs run to run."""


def test_outputs_written_by_helper_processes_are_the_files_written_here(tmp_path: Path) -> None:
    cluster = load_cluster("lab")
    workload = load_workload("lab", cluster, jobs=40)
    runs = compare(cluster, workload, [load_profiles()[name] for name in ("fifo", "sds")], seed=1)
    ctx = context(cluster, workload, 1)
    here = write_outputs(tmp_path / "here", runs, ctx)
    with output_helpers() as helpers:
        forked = write_outputs(tmp_path / "forked", runs, ctx, helpers)
    assert all(p.is_relative_to(tmp_path / "forked") for p in forked.values())
    names = sorted(p.name for p in (tmp_path / "here").iterdir())
    assert names == sorted(p.name for p in (tmp_path / "forked").iterdir())
    expected = {"report.html", "metrics.json", "wait_cdf.png", "jobs.fifo.parquet", "timeline.sds.csv"}
    assert expected <= set(names)
    for name in names:
        mine, theirs = ((tmp_path / d / name).read_bytes() for d in ("here", "forked"))
        if name == "report.html":
            mine, theirs = _DIV_ID.sub(b"-", mine), _DIV_ID.sub(b"-", theirs)
        assert mine == theirs, name
    assert here["report"].name == forked["report"].name == "report.html"


def test_every_warm_up_names_a_function_of_its_parts_modules_and_writes_nothing(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    """A misspelt warm-up would only be logged in the helper (warming up is optional): check here."""
    monkeypatch.chdir(tmp_path)
    for part in OUTPUT_PARTS.values():
        for name in part.warm_ups:
            module, _, function = name.partition(":")
            assert module in part.modules, name
            getattr(importlib.import_module(module), function)()
    for module in ("loadmaster.report.plots", "loadmaster.report.html"):  # off in OUTPUT_PARTS for now
        importlib.import_module(module).warm_up()
    assert os.listdir(tmp_path) == []


def test_dearest_profiles_start_first() -> None:
    """The demo's profiles ranked as their measured times order them (docs/simulator.md): conservative
    backfill, then EASY backfill and preemption, then the non-strict walk, then strict FIFO."""
    shipped = load_profiles()
    rank = {
        name: expected_cost(shipped[name])
        for name in ("slurm", "sds", "nsml", "fair", "kube-default", "fifo")
    }
    assert rank["slurm"] > rank["sds"] == rank["nsml"] > rank["fair"] > rank["kube-default"] > rank["fifo"]
