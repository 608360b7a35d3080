"""Trace I/O: read a 1,000,000-row SWF log and a 1,000,000-row sacct dump and write each as Parquet.

Targets (issue "Real workloads: trace readers"): each conversion (read_trace
+ write_parquet) under 60 s and under 2 GiB peak RSS.

The files are generated first (seeded, so every run reads the same bytes),
with realistic values: exponential inter-arrivals, log-normal run times,
power-of-two gang sizes, a mix of final states. The sacct file is one record
per job, as ``sacct --allocations --parsable2`` prints it, with pending,
running and cancelled jobs among them. Each conversion runs in a fresh child
process pinned to one core, so its peak RSS is its own and not the
generator's. The same child then times a baseline over the same file: a plain
Python pass that reads every line and splits it into fields, the least any
pure-Python reader must do; the result reports the reader's cost as a ratio
to it, which is steadier than seconds on a noisy machine.

    python benchmarks/trace_io.py [--rows N]

Prints a table and writes benchmarks/results/trace_io.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import random
import resource
import subprocess
import sys
import tempfile
import time
from datetime import UTC, datetime, timedelta
from pathlib import Path

from results_io import provenance, write_results

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "trace_io.json"
TARGET_WALL_S = 60.0
TARGET_RSS_MIB = 2048.0
SEED = 20240301
SEPARATORS = {"swf": None, "sacct": "|"}
"""How the baseline splits a line of each format (None: on whitespace)."""


def generate_swf(path: Path, rows: int, rng: random.Random) -> None:
    """An SWF log of ``rows`` jobs on a 4,096-processor machine."""
    with path.open("w", encoding="utf-8") as out:
        out.write(f"; Version: 2.2\n; MaxJobs: {rows}\n; MaxRecords: {rows}\n; MaxProcs: 4096\n")
        submit = 0
        for job in range(1, rows + 1):
            submit += int(rng.expovariate(1 / 30))
            procs = 2 ** min(int(rng.expovariate(0.6)), 12)
            run = max(1, int(rng.lognormvariate(7, 1.8)))
            wait = int(rng.expovariate(1 / 600))
            limit = run * rng.choice((1, 2, 4)) + 60
            status = rng.choices((1, 0, 5), (85, 10, 5))[0]
            user = rng.randrange(1, 400)
            out.write(
                f"{job} {submit} {wait} {run} {procs} {run * 0.9:.1f} {rng.randrange(1, 1 << 20)} "
                f"{procs} {limit} -1 {status} {user} {user % 40 + 1} {rng.randrange(1, 90)} "
                f"{rng.randrange(1, 5)} 1 -1 -1\n"
            )


SACCT_HEADER = (
    "JobID|JobName|User|Account|Partition|Submit|Start|End|Elapsed|Timelimit|"
    "NNodes|AllocTRES|ReqTRES|State|ExitCode"
)
STATES = ("COMPLETED", "FAILED", "CANCELLED by 1042", "TIMEOUT", "OUT_OF_MEMORY", "RUNNING", "PENDING")
STATE_WEIGHTS = (70, 10, 10, 4, 2, 2, 2)
LIMITS = ("30:00", "04:00:00", "12:00:00", "1-00:00:00", "2-00:00:00", "7-00:00:00", "UNLIMITED")


def generate_sacct(path: Path, rows: int, rng: random.Random) -> None:
    """A ``sacct --allocations --parsable2`` dump of ``rows`` jobs on 8-GPU nodes."""
    origin = datetime(2024, 3, 1, tzinfo=UTC)
    with path.open("w", encoding="utf-8") as out:
        out.write(SACCT_HEADER + "\n")
        submit = 0
        for job in range(1, rows + 1):
            submit += int(rng.expovariate(1 / 20))
            out.write(_sacct_line(job, submit, origin, rng) + "\n")


def _sacct_line(job: int, submit: int, origin: datetime, rng: random.Random) -> str:
    state = rng.choices(STATES, STATE_WEIGHTS)[0]
    nodes = rng.choices((1, 2, 4, 8), (80, 10, 6, 4))[0]
    gpus = nodes * rng.choice((1, 2, 4, 8)) if nodes > 1 else rng.choice((0, 1, 1, 2, 4, 8))
    model = rng.choice(("a100", "h100", "v100"))
    tres = f"billing={gpus * 4 or 2},cpu={gpus * 8 or 4},gres/gpu:{model}={gpus},gres/gpu={gpus},"
    tres += f"mem={gpus * 64 or 16}G,node={nodes}" if gpus else f"mem=16G,node={nodes}"
    start_at = submit + int(rng.expovariate(1 / 900))
    run = max(1, int(rng.lognormvariate(7.5, 1.7)))
    start, end = _stamp(origin, start_at), _stamp(origin, start_at + run)
    alloc = tres
    if state == "PENDING":
        start, end, alloc, run = "Unknown", "Unknown", "", 0
    elif state == "RUNNING":
        end = "Unknown"
    user = rng.randrange(1, 600)
    jid = f"{job}_{rng.randrange(100)}" if rng.random() < 0.1 else str(job)
    elapsed = f"{run // 3600:02d}:{run // 60 % 60:02d}:{run % 60:02d}"
    return (
        f"{jid}|job{job % 97}|user{user}|acct{user % 50}|{rng.choice(('gpu', 'gpu-long', 'debug'))}|"
        f"{_stamp(origin, submit)}|{start}|{end}|{elapsed}|{rng.choice(LIMITS)}|{nodes}|{alloc}|{tres}|"
        f"{state}|0:0"
    )


def _stamp(origin: datetime, seconds: int) -> str:
    return (origin + timedelta(seconds=seconds)).strftime("%Y-%m-%dT%H:%M:%S")


def child(fmt: str, path: Path, out: Path) -> dict[str, float]:
    """Convert ``path`` to Parquet in this process; then time the baseline pass over the same file."""
    # Imported here so that the parent process stays small and only the child is measured.
    from loadmaster.traces import read_trace, write_parquet  # noqa: PLC0415

    started = time.perf_counter()
    trace = read_trace(path, fmt)
    read = time.perf_counter()
    write_parquet(trace, out)
    finished = time.perf_counter()
    peak_rss_mib = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss / 1024
    return {
        "rows": float(len(trace)),
        "skipped": float(trace.report.skipped),
        "read_s": read - started,
        "write_s": finished - read,
        "wall_s": finished - started,
        "peak_rss_mib": peak_rss_mib,
        "file_mib": path.stat().st_size / 2**20,
        "parquet_mib": out.stat().st_size / 2**20,
        "baseline_s": _baseline(path, SEPARATORS[fmt]),
    }


def _baseline(path: Path, separator: str | None) -> float:
    """Seconds to read every line of ``path`` and split it into fields: the floor for a Python reader."""
    started = time.perf_counter()
    fields = 0
    with path.open(encoding="utf-8", newline="") as handle:
        for line in handle:
            fields += len(line.split(separator))
    return time.perf_counter() - started


def run_child(fmt: str, path: Path, out: Path) -> dict[str, float]:
    """Run :func:`child` in a fresh process on one core."""
    command = [sys.executable, __file__, "--child", fmt, str(path), str(out)]
    if hasattr(os, "sched_setaffinity"):
        command = ["taskset", "-c", "0", *command]
    done = subprocess.run(command, check=True, capture_output=True, text=True)
    measured: dict[str, float] = json.loads(done.stdout.strip().splitlines()[-1])
    return measured


def measure(rows: int) -> dict[str, dict[str, float]]:
    """Generate both files in a temporary folder and convert each in its own child process."""
    measured: dict[str, dict[str, float]] = {}
    with tempfile.TemporaryDirectory(prefix="trace_io_") as folder:
        for fmt, generate, name in (
            ("swf", generate_swf, "jobs.swf"),
            ("sacct", generate_sacct, "jobs.sacct"),
        ):
            path = Path(folder) / name
            started = time.perf_counter()
            generate(path, rows, random.Random(SEED))
            generated_s = time.perf_counter() - started
            measured[fmt] = run_child(fmt, path, Path(folder) / f"{fmt}.parquet") | {
                "generate_s": generated_s
            }
    return measured


def _target(measured: float, limit: float) -> dict[str, object]:
    return {"target": f"< {limit}", "measured": round(measured, 2), "pass": measured < limit}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rows", type=int, default=1_000_000)
    parser.add_argument("--child", nargs=3, metavar=("FORMAT", "PATH", "OUT"), help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.child:
        fmt, path, out = args.child
        print(json.dumps(child(fmt, Path(path), Path(out))))
        return
    source = provenance(ROOT)
    measured = measure(args.rows)
    head = f"{'format':<8}{'rows':>11}{'wall s':>9}{'read s':>9}{'write s':>9}{'RSS MiB':>9}{'x base':>8}"
    print(f"{head}  target")
    for fmt, m in measured.items():
        ok = m["wall_s"] < TARGET_WALL_S and m["peak_rss_mib"] < TARGET_RSS_MIB
        print(
            f"{fmt:<8}{m['rows']:>11,.0f}{m['wall_s']:>9.1f}{m['read_s']:>9.1f}{m['write_s']:>9.2f}"
            f"{m['peak_rss_mib']:>9.0f}{m['read_s'] / m['baseline_s']:>8.1f}  "
            f"< {TARGET_WALL_S:g} s, < {TARGET_RSS_MIB:g} MiB: {'PASS' if ok else 'FAIL'}"
        )
    result = {
        "benchmark": "trace_io",
        "command": f"python benchmarks/trace_io.py --rows {args.rows}",
        "setup": "seeded SWF and sacct --allocations files; read_trace + write_parquet, child on one core",
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "measured": {fmt: {k: round(v, 4) for k, v in m.items()} for fmt, m in measured.items()},
        "read_over_baseline": {fmt: round(m["read_s"] / m["baseline_s"], 2) for fmt, m in measured.items()},
        "targets": {
            f"{fmt}_{name}": _target(m[key], limit)
            for fmt, m in measured.items()
            for name, key, limit in (
                ("wall_s", "wall_s", TARGET_WALL_S),
                ("peak_rss_mib", "peak_rss_mib", TARGET_RSS_MIB),
            )
        },
    }
    write_results(RESULTS, ROOT, result, source)


if __name__ == "__main__":
    main()
