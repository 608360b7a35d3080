"""Whole-process time of ``loadmaster simulate`` against Tiresias' own simulator, side by side.

The trace (issue 19): Tiresias' 60-job testbed trace (``60_job.csv``) copied
125 times, copy k with every submit time shifted by +k s, then every submit
time divided by C = 10 and rounded down (Tiresias reads whole seconds):
7,500 jobs, interleaved, arriving over a few minutes. Cluster: 1,000 nodes x
8 GPUs. Policy: strict FIFO (loadmaster's ``fifo`` profile; Tiresias'
``--schedule=fifo --scheme=yarn``: consolidated placement).

Tiresias is the public source of SymbioticLab/Tiresias at commit 959f9b0
(Apache-2.0; the simulator's files are in peers/tiresias-959f9b0-simulator.tar.gz
with peers/TIRESIAS-LICENSE). It runs under Python 2.7 with numpy 1.16,
which this script installs into a cache folder with Python 2.7's pip on first
use; without Python 2.7 it says so and measures loadmaster alone. Its
``lp.py`` imports IBM CPLEX at start-up, used only by the LP placement
scheme; a stand-in module that raises on any use takes its place (FIFO with
the yarn scheme never calls it).

Target: loadmaster's whole-process time at most half of Tiresias' (median
of ``--repeats`` runs each, alternating, with the spread).

Both run as a user's second run does: Python's bytecode cache on (the script
drops ``PYTHONDONTWRITEBYTECODE`` from both environments) and one untimed run
of each first, which writes both simulators' ``.pyc`` files, as installing a
package does. ``--no-bytecode`` keeps the variable set, so that both compile
every module from source in every run (the cost of a first run, or of an
environment that forbids the cache).

    python benchmarks/peer_speed.py [--repeats 3] [--no-bytecode] [--tiresias-trace PATH]

Prints a table and writes benchmarks/results/peer_speed.json.
"""

from __future__ import annotations

import argparse
import csv
import io
import os
import shutil
import statistics
import subprocess
import sys
import tarfile
import tempfile
import time
from pathlib import Path

from results_io import print_targets, provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
RESULTS = HERE / "results" / "peer_speed.json"
ARCHIVE = HERE / "peers" / "tiresias-959f9b0-simulator.tar.gz"
TIRESIAS_COMMIT = "959f9b08f44fa1b4f2b3aed79b01e4d439264a94"
COPIES = 125
COMPRESSION = 10
TARGET = 0.5
"""loadmaster's whole-process time at most this share of Tiresias'."""
PYTHON27 = ("python2.7", "/root/.pyenv/versions/2.7.18/bin/python")
NUMPY27 = "numpy==1.16.6"
CACHE = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "loadmaster" / "tiresias-py27"
CPLEX_STANDIN = '''"""Stand-in for IBM CPLEX: Tiresias imports it at start-up; only its LP placement uses it.
"""
class CplexError(Exception):
    pass
class Cplex(object):
    def __init__(self, *args, **kwargs):
        raise CplexError("CPLEX is not installed (loadmaster benchmarks/peer_speed.py stand-in)")
'''


def default_trace() -> Path:
    """60_job.csv from the vendored reference data (data/reference/tiresias, as the tests find it)."""
    path = ROOT / "data" / "reference" / "tiresias" / "60_job.csv"
    if path.exists():
        return path
    sys.exit(f"{path} not found; pass --tiresias-trace PATH")


def scaled_trace(source: Path, copies: int = COPIES, compression: int = COMPRESSION) -> str:
    """The 7,500-job trace as Tiresias CSV text (job ids k*60 + j, in submit order)."""
    with source.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    jobs = []
    for k in range(copies):
        for j, row in enumerate(rows):
            submit = (int(row["submit_time"]) + k) // compression
            jobs.append((submit, k * len(rows) + j, row))
    jobs.sort(key=lambda item: (item[0], item[1]))
    out = io.StringIO()
    fields = ["job_id", "num_gpu", "submit_time", "iterations", "model_name", "duration", "interval"]
    writer = csv.DictWriter(out, fields, lineterminator="\n")
    writer.writeheader()
    for submit, job_id, row in jobs:
        writer.writerow({**{f: row[f] for f in fields}, "job_id": job_id, "submit_time": submit})
    return out.getvalue()


def python27() -> str | None:
    """A working Python 2.7 interpreter, or None."""
    for candidate in PYTHON27:
        path = shutil.which(candidate) or (candidate if Path(candidate).exists() else None)
        if (
            path
            and subprocess.run([path, "-c", "import sys"], capture_output=True, check=False).returncode == 0
        ):
            return path
    return None


def setup_tiresias(python: str, work: Path) -> Path:
    """Unpack the simulator, install numpy 1.16 for Python 2.7 (once, cached), add the CPLEX stand-in."""
    if not (CACHE / "numpy").exists():
        print(f"installing {NUMPY27} for Python 2.7 into {CACHE} (once)", flush=True)
        subprocess.run([python, "-m", "pip", "install", "-q", "--target", str(CACHE), NUMPY27], check=True)
    with tarfile.open(ARCHIVE) as archive:
        archive.extractall(work, filter="data")
    simulator = work / "simulator"
    (simulator / "cplex").mkdir()
    (simulator / "cplex" / "__init__.py").write_text(CPLEX_STANDIN + "from . import exceptions, six\n")
    (simulator / "cplex" / "exceptions.py").write_text("from . import CplexError\n")
    (simulator / "cplex" / "six").mkdir()
    (simulator / "cplex" / "six" / "__init__.py").write_text("")
    (simulator / "cplex" / "six" / "moves.py").write_text("range = xrange\n")
    (simulator / "n1000g8.csv").write_text(
        "num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n4,250,8,128,256\n"
    )
    return simulator


def timed(command: list[str], cwd: Path, env: dict[str, str]) -> float:
    """Whole-process wall time of ``command``; fails loudly if it fails."""
    started = time.perf_counter()
    done = subprocess.run(command, cwd=cwd, env=env, capture_output=True, text=True, check=False)
    took = time.perf_counter() - started
    if done.returncode != 0:
        sys.exit(
            f"{' '.join(command)} failed ({done.returncode}):\n{done.stdout[-2000:]}\n{done.stderr[-2000:]}"
        )
    return took


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--repeats", type=int, default=3, help="runs of each, alternating")
    parser.add_argument("--tiresias-trace", type=Path, default=None, help="Tiresias' 60_job.csv")
    parser.add_argument(
        "--no-bytecode",
        action="store_true",
        help="compile every module from source in every run (PYTHONDONTWRITEBYTECODE=1 for both)",
    )
    args = parser.parse_args()
    source = provenance(ROOT)
    work = Path(tempfile.mkdtemp(prefix="peer-speed-"))
    trace = work / "tiresias_7500.csv"
    trace.write_text(scaled_trace(args.tiresias_trace or default_trace()))
    spec = work / "tiresias_7500.yaml"
    spec.write_text(f"kind: trace\npath: {trace}\nformat: tiresias\n")
    ours_cmd = [
        str(Path(sys.executable).parent / "loadmaster"),
        "simulate",
        "--cluster",
        "large",
        "--workload",
        str(spec),
        "--profiles",
        "fifo",
        "--out",
        str(work / "out"),
    ]
    if not Path(ours_cmd[0]).exists():
        ours_cmd[:1] = [sys.executable, "-m", "loadmaster.cli"]
    env = {**os.environ, "OMP_NUM_THREADS": "1", "OPENBLAS_NUM_THREADS": "1"}
    # Why: the bytecode cache is Python's default and an installed package ships
    # compiled; a machine-wide PYTHONDONTWRITEBYTECODE would time compilation,
    # which a user pays once. --no-bytecode measures that cost, for both sides.
    if args.no_bytecode:
        env["PYTHONDONTWRITEBYTECODE"] = "1"
    else:
        env.pop("PYTHONDONTWRITEBYTECODE", None)
    python = python27()
    simulator = setup_tiresias(python, work) if python else None
    if python is None:
        print(
            "SKIP Tiresias: no Python 2.7 here (looked for: "
            + ", ".join(PYTHON27)
            + "); timing loadmaster alone"
        )
    theirs_cmd = [
        python or "python2.7",
        "run_sim.py",
        "--cluster_spec=n1000g8.csv",
        f"--trace_file={trace}",
        "--scheme=yarn",
        "--schedule=fifo",
        f"--log_path={work / 'tiresias-log'}",
    ]
    env27 = {**env, "PYTHONPATH": str(CACHE)}
    if not args.no_bytecode:
        # Untimed: writes both simulators' bytecode, as a user's first run does.
        timed(ours_cmd, ROOT, env)
        if simulator is not None:
            timed(theirs_cmd, simulator, env27)
    ours: list[float] = []
    theirs: list[float] = []
    for _ in range(args.repeats):
        ours.append(timed(ours_cmd, ROOT, env))
        if simulator is not None:
            theirs.append(timed(theirs_cmd, simulator, env27))
    shutil.rmtree(work, ignore_errors=True)
    print(f"{'simulator':<14}{'median s':>10}{'min s':>8}{'max s':>8}  runs")
    rows = [("loadmaster", ours), ("Tiresias", theirs)]
    for name, times in rows:
        if times:
            middle = statistics.median(times)
            print(f"{name:<14}{middle:>10.2f}{min(times):>8.2f}{max(times):>8.2f}  {len(times)}")
    checks = {}
    if theirs:
        share = statistics.median(ours) / statistics.median(theirs)
        checks["loadmaster / Tiresias whole-process time (median)"] = {
            "target": f"<= {TARGET:g}",
            "measured": round(share, 3),
            "pass": share <= TARGET,
        }
    print_targets(checks)
    write_results(
        RESULTS,
        ROOT,
        {
            "benchmark": "peer_speed",
            "command": "python benchmarks/peer_speed.py " + " ".join(sys.argv[1:]),
            "setup": f"Tiresias 60_job.csv x {COPIES} copies (copy k +k s), submit // {COMPRESSION}: "
            "7,500 jobs; 1,000 x 8 GPUs; FIFO (loadmaster profile fifo; Tiresias --schedule=fifo "
            "--scheme=yarn)",
            "bytecode": "compiled from source in every run (PYTHONDONTWRITEBYTECODE=1)"
            if args.no_bytecode
            else "cached (one untimed run of each first)",
            "tiresias_commit": TIRESIAS_COMMIT,
            "tiresias": "measured" if theirs else "skipped: no Python 2.7",
            "loadmaster_s": [round(t, 3) for t in ours],
            "tiresias_s": [round(t, 3) for t in theirs],
            "targets": checks,
        },
        source,
    )


if __name__ == "__main__":
    main()
