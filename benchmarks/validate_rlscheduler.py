"""Validation: the RLScheduler heuristic table (SC'20) on Lublin-1, rerun through our simulator.

Five policies (FCFS, WFP3, UNICEP, SJF, F1), with and without EASY
backfilling, on the 10 published sequences of 1,024 jobs of
``data/reference/swf/lublin_256.swf``; the published per-sequence values are
``data/reference/swf/rlscheduler_reference_heuristics.json``. Every run goes
through ``loadmaster.sim.simulate`` with an ordinary scheduling profile (see
``loadmaster.validation.rlscheduler`` and docs/validation.md). A cell passes
when our value and the published one agree to 2 decimals (differ by at most
0.005), for the mean and for every sequence.

    python benchmarks/validate_rlscheduler.py [--workers N]
    python benchmarks/validate_rlscheduler.py --trace OTHER.swf --reference REF.json \
        [--entry NAME] [--procs N] [--out results.json]

Prints both tables (ours / published in each cell) and the per-sequence
differences and writes benchmarks/results/validate_rlscheduler.json (or
``--out``). ``--entry`` names the reference JSON's entry (default: the trace's
file name); ``--procs`` the machine's processors (default: the entry's
``MaxProcs``, else the trace's ``MaxProcs`` header, else 256).
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
from pathlib import Path

from loadmaster.traces import read_trace
from loadmaster.validation.rlscheduler import (
    MACHINE_PROCS,
    POLICIES,
    Cell,
    Reference,
    Table,
    read_reference,
    reproduce,
    same_to_2_decimals,
)
from results_io import provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "reference" / "swf"
TRACE = DATA / "lublin_256.swf"
REFERENCE = DATA / "rlscheduler_reference_heuristics.json"
RESULTS = ROOT / "benchmarks" / "results" / "validate_rlscheduler.json"
METRICS = (("bsld", "bounded slowdown"), ("utilisation", "utilisation"))
MODES = ((False, "no backfill"), (True, "backfill"))


def values(cell: Cell, metric: str) -> tuple[float, ...]:
    return cell.bsld if metric == "bsld" else cell.utilisation


def mean(cell: Cell, metric: str) -> float:
    return cell.mean_bsld if metric == "bsld" else cell.mean_utilisation


def compare(ours: Cell, reference: Reference, metric: str) -> dict[str, object]:
    """One cell of one metric: means, per-sequence values and differences, and whether all agree."""
    published = reference.cells[ours.policy, ours.backfill]
    published_mean = reference.means[ours.policy, ours.backfill, metric]
    mine, theirs = values(ours, metric), values(published, metric)
    per_sequence_pass = [same_to_2_decimals(a, b) for a, b in zip(mine, theirs, strict=True)]
    mean_pass = same_to_2_decimals(mean(ours, metric), published_mean)
    return {
        "ours": round(mean(ours, metric), 4),
        "published": published_mean,
        "per_sequence": {
            "ours": [round(v, 4) for v in mine],
            "published": list(theirs),
            "difference": [round(a - b, 6) for a, b in zip(mine, theirs, strict=True)],
            "pass": per_sequence_pass,
        },
        "max_abs_difference": round(max(abs(a - b) for a, b in zip(mine, theirs, strict=True)), 6),
        "pass": mean_pass and all(per_sequence_pass),
    }


def print_tables(ours: Table, published: Reference, trace: str) -> None:
    policies = list(POLICIES)
    for metric, title in METRICS:
        digits = 2 if metric == "bsld" else 4
        print(f"\n{title}: ours / published ({trace}, mean of {len(published.starts)} sequences)")
        print(f"{'':<14}" + "".join(f"{p:>24}" for p in policies))
        for backfill, mode in MODES:
            row = ""
            for policy in policies:
                a = mean(ours[policy, backfill], metric)
                b = published.means[policy, backfill, metric]
                row += f"{a:>11.{digits}f} / {b:<10.{digits}f}"
            print(f"{mode:<14}{row}")


def print_sequences(ours: Table, published: Reference) -> None:
    print("\nper-sequence differences, ours - published (largest |difference| per cell)")
    for backfill, mode in MODES:
        for policy in POLICIES:
            for metric, _ in METRICS:
                mine = values(ours[policy, backfill], metric)
                theirs = values(published.cells[policy, backfill], metric)
                diffs = [a - b for a, b in zip(mine, theirs, strict=True)]
                worst = max(abs(d) for d in diffs)
                print(
                    f"  {mode:<12}{policy:<8}{metric:<12} max |diff| {worst:.6f}  "
                    + " ".join(f"{d:+.4f}" for d in diffs)
                )


def machine_procs(requested: int | None, published: Reference, trace: Path) -> int:
    """``--procs``, else the reference entry's MaxProcs, else the trace's MaxProcs header, else 256."""
    if requested is not None:
        return requested
    if published.procs is not None:
        return published.procs
    header = read_trace(trace, "swf").meta.get("MaxProcs")
    return int(header) if header and header.isdigit() and int(header) > 0 else MACHINE_PROCS


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--workers", type=int, default=min(os.cpu_count() or 1, 10))
    parser.add_argument("--trace", type=Path, default=TRACE, help="SWF trace (default: Lublin-1)")
    parser.add_argument("--reference", type=Path, default=REFERENCE, help="per-sequence reference JSON")
    parser.add_argument(
        "--entry", default=None, help="entry of the reference JSON (default: the trace's name)"
    )
    parser.add_argument("--procs", type=int, default=None, help="processors of the machine")
    parser.add_argument("--out", type=Path, default=RESULTS, help="results JSON to write")
    args = parser.parse_args()
    source = provenance(ROOT)
    for path in (args.trace, args.reference):
        if not path.exists():
            sys.exit(f"missing {path} (see data/reference/README.md)")
    if args.procs is not None and args.procs < 1:
        sys.exit(f"--procs must be at least 1, got {args.procs}")
    entry = args.entry or args.trace.name
    published = read_reference(args.reference, entry)
    procs = machine_procs(args.procs, published, args.trace)
    started = time.perf_counter()
    ours = reproduce(args.trace, starts=published.starts, workers=args.workers, procs=procs)
    wall_s = time.perf_counter() - started
    print_tables(ours, published, entry)
    print_sequences(ours, published)
    cells = {
        f"{policy} {'backfill' if backfill else 'no backfill'} {metric}": compare(
            ours[policy, backfill], published, metric
        )
        for backfill, _ in MODES
        for policy in POLICIES
        for metric, _ in METRICS
    }
    passed = sum(bool(c["pass"]) for c in cells.values())
    print(f"\n{passed} of {len(cells)} cells agree to 2 decimals, mean and every sequence; {wall_s:.1f} s")
    result = {
        "benchmark": "validate_rlscheduler",
        "command": "python benchmarks/validate_rlscheduler.py"
        + ("" if args.trace == TRACE else f" --trace {args.trace.name}")
        + ("" if args.entry is None else f" --entry {args.entry}")
        + ("" if args.procs is None else f" --procs {args.procs}"),
        "setup": f"{args.trace.name} (reference entry {entry}), {len(published.starts)} sequences x "
        f"1,024 jobs, {procs} processors as one node of {procs} GPU slots; RLScheduler switches: "
        "cycle per event, arrivals first, committed head, backfill ending strictly before the "
        "reservation, in submission order",
        "reference": "DIR-LAB/deep-batch-scheduler README (Zhang et al., SC'20), per-sequence values "
        "in rlscheduler_reference_heuristics.json",
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "workers": args.workers,
        "wall_s": round(wall_s, 1),
        "starts": list(published.starts),
        "cells": cells,
        "cells_passed": passed,
        "cells_total": len(cells),
        "pass": passed == len(cells),
    }
    write_results(args.out, ROOT, result, source)


if __name__ == "__main__":
    main()
