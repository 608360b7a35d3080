"""Kubernetes chaos: many runs of the stateful chaos model, counting steps and invariant violations.

The model (``tests/kube/chaos.py``) drives two scheduler replicas through
the official client against the API double while Hypothesis interleaves
node, pod and PodGroup churn, evictions with grace periods, API errors and
latency, watch drops and 410s, crashes (also mid-bind) and lease expiry
mid-cycle. After every step it checks: no node over-committed (Terminating
pods count), no pod bound twice, no gang partly bound past its timeout, no
exception from a scheduler step. Each round is one Hypothesis run with its
own seed (``--seed`` + round); a violation is reported with the sequence
of steps that produced it (not shrunk: shrinking takes minutes) and the
Hypothesis blob that replays it (``@reproduce_failure``).

Target (issue 18): 0 violations.

    python benchmarks/kube_chaos.py [--rounds 10] [--examples 20] [--steps 50] [--seed 0]

Prints a table and writes benchmarks/results/kube_chaos.json.
"""

from __future__ import annotations

import argparse
import os
import platform
import sys
import time
import traceback
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

import hypothesis
from hypothesis import HealthCheck, Phase, settings
from hypothesis.stateful import run_state_machine_as_test

from kube.chaos import TALLY, KubeChaos
from results_io import print_targets, provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "kube_chaos.json"


def one_round(seed: int, examples: int, steps: int) -> str | None:
    """One Hypothesis run of the model with ``seed``; the failure's text, or None."""
    machine = type(f"KubeChaos{seed}", (KubeChaos,), {})
    hypothesis.seed(seed)(machine)
    config = settings(
        max_examples=examples,
        stateful_step_count=steps,
        deadline=None,
        database=None,
        print_blob=True,
        suppress_health_check=list(HealthCheck),
        phases=[Phase.explicit, Phase.generate],  # no shrinking: minutes per failure; the blob replays it
    )
    try:
        run_state_machine_as_test(machine, settings=config)
    except Exception as exc:  # an invariant or a scheduler step failed: report it, go on with the next seed
        what = "".join(traceback.format_exception_only(type(exc), exc))
        return f"{what[:2000]}\n...\n{what[-1500:]}" if len(what) > 3500 else what
    return None


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=10)
    parser.add_argument("--examples", type=int, default=20, help="Hypothesis examples per round")
    parser.add_argument("--steps", type=int, default=50, help="rule steps per example")
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    source = provenance(ROOT)
    started = time.perf_counter()
    failures: list[dict[str, Any]] = []
    for r in range(args.rounds):
        seed = args.seed + r
        failure = one_round(seed, args.examples, args.steps)
        if failure is not None:
            failures.append({"seed": seed, "failure": failure})
        print(
            f"round {r + 1}/{args.rounds} (seed {seed}): steps {TALLY.steps}, scheduler steps "
            f"{TALLY.scheduler_steps}, binds {TALLY.binds}, violations {len(failures)}",
            flush=True,
        )
    elapsed = time.perf_counter() - started
    rows = {
        "rule steps run": TALLY.steps,
        "scheduler steps": TALLY.scheduler_steps,
        "pods bound": TALLY.binds,
        "evictions (preemption)": TALLY.evictions,
        "gang releases (steps)": TALLY.rollbacks,
        "replica crashes": TALLY.crashes,
        "writes fenced (lease not held)": TALLY.fenced,
        "rounds with a violation": len(failures),
    }
    for name, value in rows.items():
        print(f"{name:<34}{value:>10}")
    targets: dict[str, dict[str, object]] = {
        "violations": {"target": "0", "measured": len(failures), "pass": not failures},
    }
    print_targets(targets)
    result: dict[str, Any] = {
        "benchmark": "kube_chaos",
        "command": (
            f"python benchmarks/kube_chaos.py --rounds {args.rounds} --examples {args.examples} "
            f"--steps {args.steps} --seed {args.seed}"
        ),
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "elapsed_s": round(elapsed, 1),
        "counts": rows,
        "rules": dict(sorted(TALLY.rules.items())),
        "failures": failures,
        "targets": targets,
    }
    write_results(RESULTS, ROOT, result, source)


if __name__ == "__main__":
    main()
