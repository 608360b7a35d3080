"""Simulator throughput: every shipped profile on 1,000 x 8 GPUs, 20,000 and 100,000 jobs, loads 0.9 and 1.1.

Targets:

* issue "Foundation": ``binpack`` (strict FIFO + gang + bin packing) runs the
  whole 100,000-job run at load 0.9 (workload generation, simulation,
  summary) under 30 s on one core, peak RSS under 2 GiB;
* issue 19: every production profile (kube-default, fifo, sds, nsml, slurm,
  fair, learned) simulates 100,000 jobs at load 1.1 in at most 3 times
  ``binpack``'s time in the same run, and its cost grows linearly: its time at
  100,000 jobs is at most 6 times its time at 20,000 jobs (each load).

Each run happens in a child process of its own (one thread), so its peak RSS
is its own, and is stopped after ``--timeout`` CPU seconds (a run that did not
finish fails its targets and says so; at the largest size a profile is stopped once it has
used 3 times binpack's time there, where it has failed its target). Simulation times are the child's CPU
time: on a machine shared with other work, wall time says more about the
neighbours than about the simulator (both are recorded). Because machines
differ in speed, the targets are ratios measured in the same run; the same
child also times a calibration loop (pushing and popping the same number of
events through a plain heap).

    python benchmarks/sim_throughput.py                # the full matrix (hours on a busy 2-core machine)
    python benchmarks/sim_throughput.py --quick        # 2,000 and 10,000 jobs: minutes, for development
    python benchmarks/sim_throughput.py --profiles binpack,slurm --jobs 20000 --loads 1.1

The full matrix writes benchmarks/results/sim_throughput.json (stamped with
the commit); ``--quick`` and partial runs only print, unless ``--out`` is given.
"""

from __future__ import annotations

import argparse
import heapq
import json
import os
import platform
import resource
import signal
import subprocess
import sys
import time
from concurrent.futures import ThreadPoolExecutor
from pathlib import Path

from results_io import print_targets, provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results" / "sim_throughput.json"
TARGET_WALL_S = 30.0
TARGET_RSS_MIB = 2048.0
TARGET_RATIO = 3.0
"""A production profile's simulation time at 100,000 jobs and load 1.1, at most this times binpack's."""
TARGET_GROWTH = 6.0
"""A profile's time at 100,000 jobs at most this times its time at 20,000 jobs (linear cost: 5)."""
BASELINE = "binpack"
PROFILES = ("binpack", "kube-default", "fifo", "sds", "nsml", "slurm", "fair", "learned")
LOADS = (0.9, 1.1)
JOBS = (20_000, 100_000)
QUICK_JOBS = (2_000, 10_000)


def child(profile: str, jobs: int, load: float) -> dict[str, float]:
    """Do the measured work in this process and return its timings."""
    # Imported here so that the parent process stays small and only the child is measured.
    from loadmaster.config import load_cluster, load_profiles, load_workload  # noqa: PLC0415
    from loadmaster.metrics import summarize  # noqa: PLC0415
    from loadmaster.scheduling import Scheduler  # noqa: PLC0415
    from loadmaster.sim import SimOptions, simulate  # noqa: PLC0415

    started, started_cpu = time.perf_counter(), time.process_time()
    cluster = load_cluster("large")
    workload = load_workload("large", cluster, jobs=jobs, load=load)
    generated, generated_cpu = time.perf_counter(), time.process_time()
    result = simulate(cluster.nodes, Scheduler(load_profiles()[profile]), workload.jobs, SimOptions(seed=0))
    simulated, simulated_cpu = time.perf_counter(), time.process_time()
    summary = summarize(result.jobs, result.timeline)
    finished, finished_cpu = time.perf_counter(), time.process_time()
    return {
        "jobs": float(len(workload.jobs)),
        "cycles": float(len(result.timeline.time_s)),
        "generate_s": generated - started,
        "simulate_wall_s": simulated - generated,
        "simulate_s": simulated_cpu - generated_cpu,
        "summarize_s": finished - simulated,
        "wall_s": finished - started,
        "cpu_s": finished_cpu - started_cpu,
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


def _limit_cpu(seconds: float) -> None:
    """Stop the child (SIGXCPU, then SIGKILL) once it has used ``seconds`` of CPU time."""
    limit = max(1, int(seconds))
    resource.setrlimit(resource.RLIMIT_CPU, (limit, limit + 5))


def run_child(profile: str, jobs: int, load: float, timeout_s: float) -> dict[str, float] | None:
    """Run :func:`child` in a fresh process on one core; None if it used more than ``timeout_s`` of CPU.

    The limit is on CPU time, not wall time: on a machine shared with other
    work, wall time says more about the neighbours than about the simulator.
    """
    command = [sys.executable, __file__, "--child", profile, "--jobs", str(jobs), "--loads", str(load)]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1", "MKL_NUM_THREADS": "1"}
    done = subprocess.run(
        command,
        check=False,
        capture_output=True,
        text=True,
        env=env,
        preexec_fn=lambda: _limit_cpu(timeout_s),
    )
    if done.returncode in {-signal.SIGXCPU, -signal.SIGKILL}:
        return None
    if done.returncode != 0:
        sys.exit(f"{profile}, {jobs} jobs, load {load:g} failed:\n{done.stderr[-3000:]}")
    measured: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def _key(profile: str, jobs: int, load: float) -> str:
    return f"{profile}/{jobs}/{load:g}"


def _targets(
    runs: dict[str, dict[str, float] | None],
    profiles: list[str],
    jobs: tuple[int, ...],
    loads: tuple[float, ...],
) -> dict[str, dict[str, object]]:
    checks: dict[str, dict[str, object]] = {}
    small, large = min(jobs), max(jobs)
    base = runs.get(_key(BASELINE, large, 0.9))
    if base is not None and large == JOBS[-1] and 0.9 in loads:
        checks["binpack whole run at 100,000 jobs, load 0.9 (s)"] = {
            "target": f"< {TARGET_WALL_S:g}",
            "measured": round(base["wall_s"], 2),
            "pass": base["wall_s"] < TARGET_WALL_S,
        }
        checks["binpack peak RSS at 100,000 jobs, load 0.9 (MiB)"] = {
            "target": f"< {TARGET_RSS_MIB:g}",
            "measured": round(base["peak_rss_mib"], 1),
            "pass": base["peak_rss_mib"] < TARGET_RSS_MIB,
        }
    top_load = max(loads)
    reference = runs.get(_key(BASELINE, large, top_load))
    for profile in profiles:
        if profile == BASELINE:
            continue
        mine = runs.get(_key(profile, large, top_load))
        ratio = mine["simulate_s"] / reference["simulate_s"] if mine and reference else None
        checks[f"{profile}: time / binpack's at {large:,} jobs, load {top_load:g}"] = {
            "target": f"<= {TARGET_RATIO:g}",
            "measured": round(ratio, 2) if ratio is not None else "did not finish",
            "pass": ratio is not None and ratio <= TARGET_RATIO,
        }
    for profile in profiles:
        for load in loads:
            first, last = runs.get(_key(profile, small, load)), runs.get(_key(profile, large, load))
            growth = last["simulate_s"] / first["simulate_s"] if first and last else None
            checks[f"{profile}: time at {large:,} / at {small:,} jobs, load {load:g}"] = {
                "target": f"<= {TARGET_GROWTH * large / small / 5:g}",
                "measured": round(growth, 2) if growth is not None else "did not finish",
                "pass": growth is not None and growth <= TARGET_GROWTH * large / small / 5,
            }
    return checks


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--child", help=argparse.SUPPRESS)
    parser.add_argument("--quick", action="store_true", help=f"{QUICK_JOBS[0]:,} and {QUICK_JOBS[1]:,} jobs")
    parser.add_argument(
        "--profiles", default=",".join(PROFILES), help="comma-separated (binpack is the baseline)"
    )
    parser.add_argument("--jobs", default=None, help="comma-separated job counts (default 20000,100000)")
    parser.add_argument("--loads", default=",".join(f"{x:g}" for x in LOADS), help="comma-separated loads")
    parser.add_argument(
        "--timeout", type=float, default=1800.0, help="CPU seconds a run may use before it is stopped"
    )
    parser.add_argument("--workers", type=int, default=1, help="runs at once (each in its own process)")
    parser.add_argument("--out", type=Path, default=None, help="write the results here (default: see above)")
    args = parser.parse_args()
    loads = tuple(float(x) for x in args.loads.split(","))
    if args.child:
        print(json.dumps(child(args.child, int(args.jobs), loads[0])))
        return
    jobs = QUICK_JOBS if args.quick else tuple(int(x) for x in (args.jobs or "20000,100000").split(","))
    profiles = [p.strip() for p in args.profiles.split(",") if p.strip()]
    if BASELINE not in profiles:
        profiles.insert(0, BASELINE)
    source = provenance(ROOT)  # before the runs, which take long enough for the checkout to move on
    full = not args.quick and jobs == JOBS and loads == LOADS and tuple(profiles) == PROFILES
    runs: dict[str, dict[str, float] | None] = {}
    why: dict[str, str] = {}
    """Why each run without a result has none."""
    header = f"{'profile':<14}{'jobs':>9}{'load':>6}{'simulate s':>12}{'jobs/s':>10}{'x binpack':>11}"
    print(f"{header}{'RSS MiB':>9}")
    for count in jobs:
        todo = []
        for load in loads:
            for profile in profiles:
                smaller = [c for c in jobs if c < count and runs.get(_key(profile, c, load), {}) is None]
                if smaller:  # it did not finish fewer jobs in time: it cannot finish these
                    runs[_key(profile, count, load)] = None
                    why[_key(profile, count, load)] = f"skipped: {smaller[0]:,} jobs did not finish"
                else:
                    todo.append((profile, load))
        for load in loads:  # the baseline first: the others' limits follow from its time
            if (BASELINE, load) in todo:
                todo.remove((BASELINE, load))
                runs[_key(BASELINE, count, load)] = run_child(BASELINE, count, load, args.timeout)
                if runs[_key(BASELINE, count, load)] is None:
                    why[_key(BASELINE, count, load)] = f"did not finish in {args.timeout:.0f} CPU s"

        def limit(profile: str, load: float, count: int = count) -> float:
            """At the largest size, a run past 3x binpack's time has failed its target: stop it there."""
            base = runs.get(_key(BASELINE, count, load))
            if count != max(jobs) or base is None:
                return args.timeout
            return min(args.timeout, 1.05 * TARGET_RATIO * base["simulate_s"] + 5)

        with ThreadPoolExecutor(args.workers) as pool:  # each run is a process: threads only wait
            measured = pool.map(lambda item, n=count: run_child(item[0], n, item[1], limit(*item)), todo)
            for (profile, load), m in zip(todo, measured, strict=True):
                runs[_key(profile, count, load)] = m
                if m is None:
                    why[_key(profile, count, load)] = f"did not finish in {limit(profile, load):.0f} CPU s"
        for load in loads:
            base = runs.get(_key(BASELINE, count, load))
            for profile in profiles:
                m = runs.get(_key(profile, count, load))
                if m is None:
                    print(f"{profile:<14}{count:>9,}{load:>6g}  {why.get(_key(profile, count, load), '')}")
                    continue
                ratio = m["simulate_s"] / base["simulate_s"] if base else float("nan")
                m["jobs_per_s"] = m["jobs"] / m["simulate_s"]
                m["over_binpack"] = ratio
                print(
                    f"{profile:<14}{count:>9,}{load:>6g}{m['simulate_s']:>12.2f}{m['jobs_per_s']:>10,.0f}"
                    f"{ratio:>11.2f}{m['peak_rss_mib']:>9.0f}",
                    flush=True,
                )
    checks = _targets(runs, profiles, jobs, loads)
    print_targets(checks)
    out = args.out or (RESULTS if full else None)
    out = out.resolve() if out is not None else None
    if out is None:
        return
    result = {
        "benchmark": "sim_throughput",
        "command": "python " + " ".join([Path(sys.argv[0]).as_posix(), *sys.argv[1:]]),
        "setup": "cluster 'large' (1,000 x 8 GPUs), workload 'large' (lab mix, seed 11) at each load; "
        "scheduler seed 0; each run in its own process; simulate_s is CPU time",
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "timeout_cpu_s": args.timeout,
        "runs": {
            key: ({k: round(v, 4) for k, v in m.items()} if m is not None else why.get(key, "did not finish"))
            for key, m in runs.items()
        },
        "targets": checks,
    }
    write_results(out, ROOT, result, source)


if __name__ == "__main__":
    main()
