"""Kubernetes chaos: many runs of the stateful chaos model, counting steps and invariant violations.

The model (``tests/kube/chaos.py``) drives two scheduler replicas through
the official client against the API double while Hypothesis interleaves
node, pod and PodGroup churn, evictions with grace periods, API errors and
latency, watch drops and 410s, crashes (also mid-bind) and lease expiry
mid-cycle. After every step it checks: no node over-committed (Terminating
pods count), no pod bound twice, no gang partly bound past its timeout, no
exception from a scheduler step. Each round runs every scenario once, each
a Hypothesis run with its own seed (``--seed`` + round): ``shipped`` (the
``priority`` profile as shipped, whose 600 s ``min_runtime_s`` keeps it
from preempting in runs this short) and ``preempt`` (``min_runtime_s`` 10 s,
nodes crowded with low-priority pods and high-priority pods sent after them:
preemption happens, and the invariants are judged while victims are still
Terminating). A violation is reported with the sequence
of steps that produced it (not shrunk: shrinking takes minutes) and the
Hypothesis blob that replays it (``@reproduce_failure``).

Target (issue 18): 0 violations.

    python benchmarks/kube_chaos.py [--rounds 10] [--examples 20] [--steps 50] [--seed 0]
                                    [--scenarios shipped,preempt]

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

from kube.chaos import TALLY, KubeChaos, KubePreemptChaos
from results_io import print_targets, provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "kube_chaos.json"
SCENARIOS: dict[str, type[KubeChaos]] = {"shipped": KubeChaos, "preempt": KubePreemptChaos}


def one_round(model: type[KubeChaos], seed: int, examples: int, steps: int) -> str | None:
    """One Hypothesis run of ``model`` with ``seed``; the failure's text, or None."""
    machine = type(f"{model.__name__}{seed}", (model,), {})
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
    parser.add_argument(
        "--scenarios", default=",".join(SCENARIOS), help=f"comma-separated, of {list(SCENARIOS)}"
    )
    args = parser.parse_args()
    source = provenance(ROOT)
    scenarios = [name.strip() for name in args.scenarios.split(",") if name.strip()]
    unknown = sorted(set(scenarios) - set(SCENARIOS))
    if unknown or not scenarios:
        parser.error(f"--scenarios: unknown {unknown or 'none given'}; allowed: {', '.join(SCENARIOS)}")
    started = time.perf_counter()
    failures: list[dict[str, Any]] = []
    per_scenario: dict[str, dict[str, int]] = {}
    for r in range(args.rounds):
        seed = args.seed + r
        for scenario in scenarios:
            before = TALLY.snapshot()
            failure = one_round(SCENARIOS[scenario], seed, args.examples, args.steps)
            after = TALLY.snapshot()
            tally = per_scenario.setdefault(scenario, dict.fromkeys(after, 0) | {"violations": 0})
            for name, value in after.items():
                tally[name] += value - before[name]
            if failure is not None:
                tally["violations"] += 1
                failures.append({"scenario": scenario, "seed": seed, "failure": failure})
            print(
                f"round {r + 1}/{args.rounds} {scenario:<8} (seed {seed}): steps {TALLY.steps}, scheduler "
                f"steps {TALLY.scheduler_steps}, binds {TALLY.binds}, evictions {TALLY.evictions}, "
                f"violations {len(failures)}",
                flush=True,
            )
    elapsed = time.perf_counter() - started
    rows = {
        "rule steps run": TALLY.steps,
        "scheduler steps": TALLY.scheduler_steps,
        "pods bound": TALLY.binds,
        "evictions (preemption)": TALLY.evictions,
        "checks with victims Terminating": TALLY.checks_with_victims_terminating,
        "gang releases (steps)": TALLY.rollbacks,
        "replica crashes": TALLY.crashes,
        "writes fenced (lease not held)": TALLY.fenced,
        "runs with a violation": len(failures),
    }
    for name, value in rows.items():
        print(f"{name:<34}{value:>10}")
    for scenario, tally in per_scenario.items():
        print(f"{scenario}: " + ", ".join(f"{k} {v}" for k, v in tally.items()))
    preempted = per_scenario.get("preempt", {})
    targets: dict[str, dict[str, object]] = {
        "violations": {"target": "0", "measured": len(failures), "pass": not failures},
    }
    if preempted:  # the claim "victims keep their GPUs" is only tested if victims were in flight
        targets["invariant checks with preemption victims Terminating (preempt scenario)"] = {
            "target": "> 0",
            "measured": preempted["checks_with_victims_terminating"],
            "pass": preempted["checks_with_victims_terminating"] > 0,
        }
    print_targets(targets)
    result: dict[str, Any] = {
        "benchmark": "kube_chaos",
        "command": (
            f"python benchmarks/kube_chaos.py --rounds {args.rounds} --examples {args.examples} "
            f"--steps {args.steps} --seed {args.seed} --scenarios {','.join(scenarios)}"
        ),
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "elapsed_s": round(elapsed, 1),
        "counts": rows,
        "scenarios": per_scenario,
        "rules": dict(sorted(TALLY.rules.items())),
        "failures": failures,
        "targets": targets,
    }
    write_results(RESULTS, ROOT, result, source)


if __name__ == "__main__":
    main()
