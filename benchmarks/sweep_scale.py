"""Sweep scale: 240 cells (6 profiles x 4 loads x 10 seeds, 2,000 jobs each) run serially, on the
local process pool and on a local Ray instance, in the same run.

Targets (issue 25): Ray's overhead over the local pool at most 10% (wall time of the same cells,
Ray's start-up excluded and reported apart); the pool's speed-up over serial reported. The three
runs must give the same table (checked). ``--quick`` runs a small grid (2 seeds, 300 jobs) for a
shared development machine; its JSON says which grid it measured.

    python benchmarks/sweep_scale.py [--quick] [--workers N]

Prints a table and writes benchmarks/results/sweep_scale.json (or sweep_scale_quick.json).
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from loadmaster.parallel import Executor, InProcess, LocalPool, RayPool, connect_ray
from loadmaster.sweep import Store, load_sweep, run_sweep
from loadmaster.sweep.report import results_table
from results_io import print_targets, provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ("kube-default", "fifo", "sds", "nsml", "slurm", "fair")
LOADS = (0.7, 0.9, 1.1, 1.3)
TARGET_OVERHEAD = 0.10


def _timed(sweep_path: Path, folder: Path, executor: Executor) -> tuple[float, object]:
    sweep = load_sweep(sweep_path)
    started = time.perf_counter()
    outcome = run_sweep(sweep, Store(folder), executor, poll_s=0.02)
    wall = time.perf_counter() - started
    if outcome.failed or outcome.skipped:
        raise SystemExit(f"{folder}: {len(outcome.failed)} failed, {outcome.skipped} skipped")
    return wall, results_table(sweep, Store(folder))


def ray_child(spec: Path, folder: Path) -> None:
    """Start a private local Ray, run the sweep on it, print the timings as JSON."""
    started = time.perf_counter()
    ray = connect_ray("local")
    start_s = time.perf_counter() - started
    with RayPool("local") as pool:
        slots = pool.slots
        wall, _ = _timed(spec, folder, pool)
    ray.shutdown()
    print(json.dumps({"wall_s": wall, "start_s": start_s, "slots": slots}))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds x 300 jobs instead of 10 x 2,000")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    parser.add_argument(
        "--repeats", type=int, default=2, help="pool and Ray runs each, alternating which goes first"
    )
    parser.add_argument("--ray-child", nargs=2, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.ray_child:
        ray_child(Path(args.ray_child[0]), Path(args.ray_child[1]))
        return
    source = provenance(ROOT)
    seeds, jobs = (2, 300) if args.quick else (10, 2000)
    cells = len(PROFILES) * len(LOADS) * seeds
    with tempfile.TemporaryDirectory(prefix="sweep-scale-") as tmp:
        root = Path(tmp)
        spec = root / "sweep.yaml"
        spec.write_text(
            f"name: sweep-scale\njobs: {jobs}\nloads: {list(LOADS)}\nprofiles: {list(PROFILES)}\n"
            f"seeds: {{first: 0, count: {seeds}}}\nretries: 0\n"
        )
        serial_s, serial = _timed(spec, root / "serial", InProcess())
        print(f"serial: {serial_s:.1f} s")
        pool_runs: list[float] = []
        ray_runs: list[float] = []
        tables = [serial]
        for repeat in range(args.repeats):
            order = ("pool", "ray") if repeat % 2 == 0 else ("ray", "pool")
            for kind in order:
                folder = root / f"{kind}-{repeat}"
                if kind == "pool":
                    with LocalPool(args.workers) as pool:
                        wall, table = _timed(spec, folder, pool)
                    pool_runs.append(wall)
                else:
                    # In a child process: a forked pool must not inherit a connected Ray driver's threads.
                    child = [sys.executable, __file__, "--ray-child", str(spec), str(folder)]
                    done = subprocess.run(child, capture_output=True, text=True, check=True)
                    measured = json.loads(done.stdout.strip().splitlines()[-1])
                    wall, slots = measured["wall_s"], measured["slots"]
                    ray_start_s = measured["start_s"]
                    table = results_table(load_sweep(spec), Store(folder))
                    ray_runs.append(wall)
                tables.append(table)
                print(f"{kind} (repeat {repeat + 1}): {wall:.1f} s")
        print(f"Ray took {ray_start_s:.1f} s to start ({slots} CPUs)")
    pool_s, ray_s = float(np.median(pool_runs)), float(np.median(ray_runs))
    same = all(serial.equals(t) for t in tables[1:])  # type: ignore[attr-defined]
    overhead = ray_s / pool_s - 1
    checks = {
        "ray_overhead_over_pool": {
            "target": f"<= {TARGET_OVERHEAD:.0%}",
            "measured": f"{overhead:+.1%}",
            "pass": overhead <= TARGET_OVERHEAD,
        },
        "speedup_pool_over_serial": {
            "target": "reported",
            "measured": f"{serial_s / pool_s:.2f}x on {args.workers} processes",
            "pass": True,
        },
        "same_table_serial_pool_ray": {"target": "identical", "measured": same, "pass": same},
    }
    print(f"\n{'run':<10}{'wall s':>10}{'cells/s':>10}")
    for name, wall in (("serial", serial_s), ("pool", pool_s), ("ray", ray_s)):
        print(f"{name:<10}{wall:>10.1f}{cells / wall:>10.2f}")
    print_targets(checks)
    quick = " --quick" if args.quick else ""
    result = {
        "benchmark": "sweep_scale",
        "command": f"python benchmarks/sweep_scale.py{quick} --workers {args.workers} "
        f"--repeats {args.repeats}",
        "grid": {
            "profiles": list(PROFILES),
            "loads": list(LOADS),
            "seeds": seeds,
            "jobs": jobs,
            "cells": cells,
        },
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "note": "load_avg at the end: about the worker count when nothing else ran beside the "
        "benchmark, more when other work shared the machine; simulation speed of the day",
        "measured": {
            "serial_s": round(serial_s, 2),
            "pool_s": round(pool_s, 2),
            "ray_s": round(ray_s, 2),
            "pool_runs_s": [round(x, 2) for x in pool_runs],
            "ray_runs_s": [round(x, 2) for x in ray_runs],
            "statistic": "median of the runs; pool and Ray alternate which goes first",
            "ray_start_s": round(ray_start_s, 2),
            "ray_cpus": slots,
        },
        "targets": checks,
    }
    name = "sweep_scale_quick.json" if args.quick else "sweep_scale.json"
    write_results(ROOT / "benchmarks" / "results" / name, ROOT, result, source)
    sys.exit(0)


if __name__ == "__main__":
    main()
