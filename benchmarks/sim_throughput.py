"""Simulator throughput: 100,000 research-lab jobs on 1,000 nodes x 8 GPUs at load 0.9.

Profile: strict FIFO + gang + bin packing (the built-in ``binpack`` profile).
Targets (issue "Foundation"): the whole run (workload generation, simulation,
summary) under 30 s on one core, peak RSS under 2 GiB.

The run happens in a child process pinned to one core, so its peak RSS is its
own. Because these machines are noisy, the same child also times a
calibration loop (pushing and popping the same number of events through a
plain heap) and the result reports the simulation's cost as a ratio to it.

    python benchmarks/sim_throughput.py [--jobs N]

Prints a table and writes benchmarks/results/sim_throughput.json.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import resource
import subprocess
import sys
import time
from pathlib import Path

RESULTS = Path(__file__).resolve().parent / "results" / "sim_throughput.json"
TARGET_WALL_S = 30.0
TARGET_RSS_MIB = 2048.0


def child(jobs: int) -> dict[str, float]:
    """Do the measured work in this process and return its timings."""
    # Imported here so that the parent process stays small and only the child is measured.
    from loadmaster.config import load_cluster, load_profiles, load_workload  # noqa: PLC0415
    from loadmaster.metrics import summarize  # noqa: PLC0415
    from loadmaster.scheduling import Scheduler  # noqa: PLC0415
    from loadmaster.sim import SimOptions, simulate  # noqa: PLC0415

    started = time.perf_counter()
    cluster = load_cluster("large")
    workload = load_workload("large", cluster, jobs=jobs)
    generated = time.perf_counter()
    result = simulate(cluster.nodes, Scheduler(load_profiles()["binpack"]), workload.jobs, SimOptions(seed=0))
    simulated = time.perf_counter()
    summary = summarize(result.jobs, result.timeline)
    finished = time.perf_counter()
    return {
        "jobs": float(len(workload.jobs)),
        "cycles": float(len(result.timeline.time_s)),
        "generate_s": generated - started,
        "simulate_s": simulated - generated,
        "summarize_s": finished - simulated,
        "wall_s": finished - started,
        "calibration_s": _calibration(2 * len(workload.jobs)),
        "peak_rss_mib": resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024,
        "jobs_ran": float(summary.jobs_ran),
        "mean_wait_s": summary.mean_wait_s,
        "allocation_mean": summary.allocation_mean,
    }


def _calibration(events: int) -> float:
    """Seconds to push and pop ``events`` tuples through a heap: the machine's speed today."""
    started = time.perf_counter()
    heap: list[tuple[float, int, int]] = []
    for i in range(events):
        heapq.heappush(heap, ((i * 7919) % events * 1.0, 1, i))
    while heap:
        heapq.heappop(heap)
    return time.perf_counter() - started


def run_child(jobs: int) -> dict[str, float]:
    """Run :func:`child` in a fresh process on one core."""
    command = [sys.executable, __file__, "--child", "--jobs", str(jobs)]
    if hasattr(os, "sched_setaffinity"):
        command = ["taskset", "-c", "0", *command]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(command, check=True, capture_output=True, text=True, env=env)
    measured: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--jobs", type=int, default=100_000)
    parser.add_argument("--child", action="store_true", help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        print(json.dumps(child(args.jobs)))
        return
    m = run_child(args.jobs)
    rows = [
        ("whole run (s)", m["wall_s"], f"< {TARGET_WALL_S:g}", m["wall_s"] < TARGET_WALL_S),
        ("peak RSS (MiB)", m["peak_rss_mib"], f"< {TARGET_RSS_MIB:g}", m["peak_rss_mib"] < TARGET_RSS_MIB),
    ]
    print(f"{'measure':<28}{'value':>14}  target")
    for name, value, target, ok in rows:
        print(f"{name:<28}{value:>14,.1f}  {target}  {'PASS' if ok else 'FAIL'}")
    for name, value in (
        ("jobs simulated", m["jobs"]),
        ("scheduling cycles", m["cycles"]),
        ("simulated jobs per second", m["jobs"] / m["simulate_s"]),
        ("generate (s)", m["generate_s"]),
        ("simulate (s)", m["simulate_s"]),
        ("summarize (s)", m["summarize_s"]),
        ("calibration heap (s)", m["calibration_s"]),
        ("simulate / calibration", m["simulate_s"] / m["calibration_s"]),
    ):
        print(f"{name:<28}{value:>14,.2f}")
    result = {
        "benchmark": "sim_throughput",
        "command": f"python benchmarks/sim_throughput.py --jobs {args.jobs}",
        "setup": "cluster 'large' (1,000 x 8 GPUs), workload 'large' (load 0.9), profile 'binpack', one core",
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "measured": {k: round(v, 4) for k, v in m.items()},
        "simulated_jobs_per_s": round(m["jobs"] / m["simulate_s"], 1),
        "simulate_over_calibration": round(m["simulate_s"] / m["calibration_s"], 2),
        "targets": {
            "whole_run_s": {
                "target": f"< {TARGET_WALL_S}",
                "measured": round(m["wall_s"], 2),
                "pass": rows[0][3],
            },
            "peak_rss_mib": {
                "target": f"< {TARGET_RSS_MIB}",
                "measured": round(m["peak_rss_mib"], 1),
                "pass": rows[1][3],
            },
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
