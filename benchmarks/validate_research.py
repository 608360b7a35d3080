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

Then it validates Gavel's policies the same way (``benchmarks/validate_gavel.py``, run as its own
process with the same ``--repeats``, and ``--gavel DIR`` with ``--gavel-python`` when given; it writes
benchmarks/results/validate_gavel.json); ``--skip-gavel`` leaves it out.
"""

from __future__ import annotations

import argparse
import shlex
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

from against_authors import delta, machine, print_cases, run_authors, targets
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
    parser.add_argument("--gavel", type=Path, default=None, help="the Gavel authors' scheduler/ folder")
    parser.add_argument("--gavel-python", default="python3", help="the Python that runs Gavel's simulator")
    parser.add_argument("--skip-gavel", action="store_true", help="validate Tiresias only")
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
                            elapsed, _stdout = run_authors(args.tiresias.resolve(), command)
                            fresh = log / "job.csv"
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
    print_cases(cases, theirs="tiresias", time_key="tiresias_s")
    checks = targets(
        cases,
        "|delta| <= 2% for both",
        ("theirs", ours_total, theirs_total) if args.tiresias is not None else None,
    )
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
            "machine": machine(),
            "repeats": args.repeats,
            "cases": cases,
            "targets": checks,
            "pass": all(bool(c["pass"]) for c in checks.values()),
        },
        source,
    )
    if not args.skip_gavel:
        gavel = [
            sys.executable,
            str(ROOT / "benchmarks" / "validate_gavel.py"),
            "--repeats",
            str(args.repeats),
        ]
        if args.gavel is not None:
            gavel += ["--gavel", str(args.gavel), "--python", args.gavel_python]
        print(f"\n{shlex.join(gavel)}", flush=True)
        subprocess.run(gavel, check=True)


if __name__ == "__main__":
    main()
