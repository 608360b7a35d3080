"""Startup of the command line: `loadmaster --help` and `loadmaster version`, against Python alone.

Runs each command RUNS times as a fresh process and reports wall and CPU time
(user + system; CPU time is what a loaded machine inflates least) at the
median, p90 and max, beside `python -c pass` and `python -c "import typer"`
measured in the same run, so the ratio shows what loadmaster adds.
Target (issue 20): both print within 0.3 s. Writes benchmarks/results/startup.json.

    python benchmarks/startup.py [--runs 20]
"""

from __future__ import annotations

import argparse
import os
import platform
import resource
import statistics
import subprocess
import sys
import time
from pathlib import Path

from results_io import print_targets, provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "startup.json"
TARGET_S = 0.3
CASES = {
    "python -c pass": [sys.executable, "-c", "pass"],
    "python -c 'import typer'": [sys.executable, "-c", "import typer"],
    "loadmaster --help": [sys.executable, "-m", "loadmaster.cli", "--help"],
    "loadmaster version": [sys.executable, "-m", "loadmaster.cli", "version"],
}


def _once(command: list[str]) -> tuple[float, float]:
    before = resource.getrusage(resource.RUSAGE_CHILDREN)
    started = time.perf_counter()
    subprocess.run(command, capture_output=True, check=True, cwd=ROOT)
    wall = time.perf_counter() - started
    after = resource.getrusage(resource.RUSAGE_CHILDREN)
    return wall, after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime


def _spread(values: list[float]) -> dict[str, float]:
    ordered = sorted(values)
    return {
        "median": round(statistics.median(ordered), 4),
        "p90": round(ordered[int(0.9 * (len(ordered) - 1))], 4),
        "max": round(ordered[-1], 4),
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--runs", type=int, default=20)
    args = parser.parse_args()
    source = provenance(ROOT)
    measured: dict[str, dict[str, dict[str, float]]] = {}
    for name, command in CASES.items():
        _once(command)  # warm the file cache
        runs = [_once(command) for _ in range(args.runs)]
        measured[name] = {"wall_s": _spread([w for w, _ in runs]), "cpu_s": _spread([c for _, c in runs])}
    print(f"{'command':<28}{'wall median':>12}{'wall p90':>10}{'cpu median':>12}{'cpu p90':>10}")
    for name, m in measured.items():
        wall, cpu = m["wall_s"], m["cpu_s"]
        print(
            f"{name:<28}{wall['median']:>12.3f}{wall['p90']:>10.3f}{cpu['median']:>12.3f}{cpu['p90']:>10.3f}"
        )
    base = measured["python -c pass"]["cpu_s"]["median"]
    checks = {
        f"{name} (CPU median)": {
            "target": f"< {TARGET_S} s",
            "measured": measured[name]["cpu_s"]["median"],
            "ratio_to_python_alone": round(measured[name]["cpu_s"]["median"] / max(base, 1e-3), 1),
            "pass": measured[name]["cpu_s"]["median"] < TARGET_S,
        }
        for name in ("loadmaster --help", "loadmaster version")
    }
    print_targets(checks)
    write_results(
        RESULTS,
        ROOT,
        {
            "benchmark": "startup",
            "command": f"python benchmarks/startup.py --runs {args.runs}",
            "machine": {"python": platform.python_version(), "cpus": os.cpu_count()},
            "measured": measured,
            "targets": checks,
        },
        source,
    )


if __name__ == "__main__":
    main()
