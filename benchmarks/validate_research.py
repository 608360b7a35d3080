"""Validation: Tiresias' schedulers (NSDI'19) against the authors' own simulator, and the time each takes.

Cases: the shipped 60-job testbed trace and the derived 480-job stress trace
(``loadmaster.validation.tiresias.STRESS``) on the shipped clusters ``n32g4``
(128 GPUs) and ``cluster_spec`` (64 GPUs), under ``fifo`` (placement
``yarn``), ``dlas-gpu`` and ``dlas`` (1D). The authors' outputs (their
``job.csv``) are committed under ``benchmarks/reference/tiresias/`` with the
commands and commit that made them
(its README). A case passes when loadmaster's average JCT and makespan are
within 2% of the authors'.

    python benchmarks/validate_research.py [--tiresias DIR] [--python2 CMD] [--record] [--repeats N]

``--tiresias DIR`` (the ``simulator/`` folder of SymbioticLab/Tiresias at the
pinned commit) also runs the authors' simulator on every case in the same run,
timed beside ours, and checks that it still produces the committed outputs;
``--record`` rewrites those outputs instead. Without it the JSON says the
authors' side was not run and why. Writes benchmarks/results/validate_research.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from loadmaster.validation.tiresias import POLICIES, STRESS, Outcome, derive_stress, reference, replay
from results_io import print_targets, provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "reference" / "tiresias"
REFERENCE = ROOT / "benchmarks" / "reference" / "tiresias"
RESULTS = ROOT / "benchmarks" / "results" / "validate_research.json"
TIRESIAS_COMMIT = "959f9b08f44fa1b4f2b3aed79b01e4d439264a94"
TRACES = ("60_job", "480_job_stress")
SPECS = ("n32g4", "cluster_spec")
TOLERANCE = 0.02


def data_dir(given: Path | None) -> Path:
    """Where the Tiresias traces are: ``--data``, else the vendored copy (data/reference/tiresias)."""
    folder = given or DATA
    if not (folder / "60_job.csv").is_file():
        sys.exit(f"no Tiresias traces (60_job.csv) in {folder}")
    return folder


def authors_command(python2: str, trace: Path, spec: Path, policy: str, log: Path) -> list[str]:
    """The authors' command line (their README's form; ``--scheme=yarn`` as their example)."""
    return [
        *shlex.split(python2),
        "run_sim.py",
        f"--cluster_spec={spec}",
        "--scheme=yarn",
        f"--trace_file={trace}",
        f"--schedule={policy}",
        f"--log_path={log}",
    ]


def run_authors(simulator: Path, command: list[str], log: Path) -> tuple[float, Path]:
    start = time.perf_counter()
    done = subprocess.run(command, cwd=simulator, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the authors' simulator failed ({' '.join(command)}):\n{done.stderr[-2000:]}")
    return elapsed, log / "job.csv"


def delta(ours: float, theirs: float) -> float:
    return ours / theirs - 1.0 if theirs else 0.0


def case_result(ours: Outcome, theirs: Outcome) -> dict[str, object]:
    jct, makespan = delta(ours.avg_jct_s, theirs.avg_jct_s), delta(ours.makespan_s, theirs.makespan_s)
    return {
        "loadmaster": {
            "avg_jct_s": ours.avg_jct_s,
            "makespan_s": ours.makespan_s,
            "preemptions": ours.preemptions,
        },
        "tiresias": {
            "avg_jct_s": theirs.avg_jct_s,
            "makespan_s": theirs.makespan_s,
            "preemptions": theirs.preemptions,
        },
        "avg_jct_delta": round(jct, 5),
        "makespan_delta": round(makespan, 5),
        "pass": abs(jct) <= TOLERANCE and abs(makespan) <= TOLERANCE,
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument(
        "--data", type=Path, default=None, help="folder with 60_job.csv and the cluster specs"
    )
    parser.add_argument("--tiresias", type=Path, default=None, help="the authors' simulator/ folder")
    parser.add_argument("--python2", default="python2.7", help="command that runs Python 2.7 with numpy 1.16")
    parser.add_argument("--record", action="store_true", help="rewrite the committed reference outputs")
    parser.add_argument("--repeats", type=int, default=3, help="timed runs per case and simulator (median)")
    args = parser.parse_args()
    source = provenance(ROOT)
    data = data_dir(args.data)
    cases: dict[str, dict[str, object]] = {}
    ours_total = theirs_total = 0.0
    with tempfile.TemporaryDirectory() as tmp:
        work = Path(tmp)
        traces = {"60_job": data / "60_job.csv", "480_job_stress": work / "480_job_stress.csv"}
        derive_stress(data / "60_job.csv", traces["480_job_stress"])
        for trace_name in TRACES:
            for spec_name in SPECS:
                for policy in POLICIES:
                    name = f"{trace_name}/{policy}-{spec_name}"
                    trace, spec = traces[trace_name], data / f"{spec_name}.csv"
                    print(f"{name} ...", flush=True)
                    ours_times, ours = [], None
                    for _ in range(args.repeats):
                        start = time.perf_counter()
                        ours = replay(trace, spec, policy)
                        ours_times.append(time.perf_counter() - start)
                    assert ours is not None
                    committed = REFERENCE / trace_name / f"{policy}-{spec_name}.csv"
                    entry: dict[str, object] = {"loadmaster_s": statistics.median(ours_times)}
                    if args.tiresias is not None:
                        log = work / name.replace("/", "-")
                        command = authors_command(args.python2, trace, spec, policy, log)
                        times = []
                        for _ in range(args.repeats):
                            shutil.rmtree(log, ignore_errors=True)
                            elapsed, fresh = run_authors(args.tiresias.resolve(), command, log)
                            times.append(elapsed)
                        if args.record:
                            committed.parent.mkdir(parents=True, exist_ok=True)
                            shutil.copyfile(fresh, committed)
                        elif reference(fresh) != reference(committed):
                            sys.exit(f"{name}: the authors' simulator no longer gives the committed output")
                        entry["tiresias_s"] = statistics.median(times)
                        entry["tiresias_over_loadmaster"] = round(
                            entry["tiresias_s"] / entry["loadmaster_s"], 2
                        )
                        theirs_total += float(entry["tiresias_s"])
                    ours_total += float(entry["loadmaster_s"])
                    cases[name] = {**case_result(ours, reference(committed)), "time": entry}
    print(
        f"\n{'case':42} {'JCT ours':>10} {'JCT theirs':>10} {'dJCT':>7} {'makespan':>9} {'dmksp':>7} "
        f"{'ours s':>7} {'theirs s':>8}"
    )
    for name, case in cases.items():
        mine, theirs, timing = case["loadmaster"], case["tiresias"], case["time"]
        assert isinstance(mine, dict) and isinstance(theirs, dict) and isinstance(timing, dict)
        their_s = f"{timing['tiresias_s']:.2f}" if "tiresias_s" in timing else "-"
        print(
            f"{name:42} {mine['avg_jct_s']:10.1f} {theirs['avg_jct_s']:10.1f} {case['avg_jct_delta']:+7.2%} "
            f"{mine['makespan_s']:9.0f} {case['makespan_delta']:+7.2%} "
            f"{timing['loadmaster_s']:7.2f} {their_s:>8}"
        )
    checks = {
        f"{name} within 2%": {
            "measured": f"JCT {case['avg_jct_delta']:+.2%}, makespan {case['makespan_delta']:+.2%}",
            "target": "|delta| <= 2% for both",
            "pass": case["pass"],
        }
        for name, case in cases.items()
    }
    if args.tiresias is not None:
        checks["loadmaster not slower than the authors' simulator (all cases)"] = {
            "measured": f"{ours_total:.2f} s vs {theirs_total:.2f} s"
            f" (ratio theirs/ours {theirs_total / ours_total:.2f})",
            "target": "ratio >= 1",
            "pass": theirs_total >= ours_total,
        }
    print_targets(checks)
    write_results(
        RESULTS,
        ROOT,
        {
            "benchmark": "validate_research",
            "command": "python benchmarks/validate_research.py "
            + " ".join(shlex.quote(a) for a in sys.argv[1:]),
            "tiresias_commit": TIRESIAS_COMMIT,
            "stress_trace": STRESS,
            "authors_simulator": "run in this benchmark"
            if args.tiresias is not None
            else "not run: pass --tiresias DIR (Python 2.7 with numpy 1.16 needed)",
            "machine": {
                "python": platform.python_version(),
                "processor": platform.machine(),
                "cpus": os.cpu_count(),
            },
            "repeats": args.repeats,
            "cases": cases,
            "targets": checks,
            "pass": all(bool(c["pass"]) for c in checks.values()),
        },
        source,
    )


if __name__ == "__main__":
    main()
