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
import os
import platform
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadmaster.parallel import Executor, InProcess, LocalPool, RayPool, connect_ray
from loadmaster.sweep import Store, load_sweep, run_sweep
from loadmaster.sweep.report import results_table
from results_io import print_targets, write_results

ROOT = Path(__file__).resolve().parents[1]
PROFILES = ("kube-default", "fifo", "sds", "nsml", "slurm", "fair")
LOADS = (0.7, 0.9, 1.1, 1.3)
TARGET_OVERHEAD = 0.10


def _commit() -> str:
    done = subprocess.run(
        ["git", "-C", str(ROOT), "rev-parse", "HEAD"], capture_output=True, text=True, check=False
    )
    return done.stdout.strip() or "unknown"


def _timed(sweep_path: Path, folder: Path, executor: Executor) -> tuple[float, object]:
    sweep = load_sweep(sweep_path)
    started = time.perf_counter()
    outcome = run_sweep(sweep, Store(folder), executor, poll_s=0.02)
    wall = time.perf_counter() - started
    if outcome.failed or outcome.skipped:
        raise SystemExit(f"{folder}: {len(outcome.failed)} failed, {outcome.skipped} skipped")
    return wall, results_table(sweep, Store(folder))


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--quick", action="store_true", help="2 seeds x 300 jobs instead of 10 x 2,000")
    parser.add_argument("--workers", type=int, default=os.cpu_count() or 1)
    args = parser.parse_args()
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
        with LocalPool(args.workers) as pool:
            pool_s, pooled = _timed(spec, root / "pool", pool)
        print(f"pool ({args.workers} processes): {pool_s:.1f} s")
        started = time.perf_counter()
        connect_ray("local")
        ray_start_s = time.perf_counter() - started
        with RayPool("local") as ray_pool:
            slots = ray_pool.slots
            ray_s, on_ray = _timed(spec, root / "ray", ray_pool)
        print(f"ray ({slots} CPUs): {ray_s:.1f} s (+ {ray_start_s:.1f} s to start Ray)")
    same = serial.equals(pooled) and serial.equals(on_ray)  # type: ignore[attr-defined]
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
        "command": f"python benchmarks/sweep_scale.py{quick} --workers {args.workers}",
        "commit": _commit(),
        "grid": {
            "profiles": list(PROFILES),
            "loads": list(LOADS),
            "seeds": seeds,
            "jobs": jobs,
            "cells": cells,
        },
        "machine": {"python": platform.python_version(), "cpus": os.cpu_count(), "load_avg": os.getloadavg()},
        "note": "a shared development machine: other work ran beside it (see load_avg); "
        "simulation speed of the day",
        "measured": {
            "serial_s": round(serial_s, 2),
            "pool_s": round(pool_s, 2),
            "ray_s": round(ray_s, 2),
            "ray_start_s": round(ray_start_s, 2),
            "ray_cpus": slots,
        },
        "targets": checks,
    }
    name = "sweep_scale_quick.json" if args.quick else "sweep_scale.json"
    write_results(ROOT / "benchmarks" / "results" / name, ROOT, result)
    sys.exit(0)


if __name__ == "__main__":
    main()
