"""What a Kubernetes scheduling step costs before the policy runs: the snapshot built from the cache.

Every step of ``kube run`` turns the informers' cached objects into the scheduler's snapshot
(``KubeState.view``: each pod's request, each job's Job, the free resources) and reads the pods
that ended into the fair-share history (``JobHistory.observe``). On a large cluster that work,
not the policy (``cycle_latency.py``: 44-54 ms p99 for 7,000 jobs), sets how often the scheduler
can decide. KubeState keeps each pod's parsed request and each job's Job while the informer keeps
the same objects (an event replaces an object, so an unchanged object has an unchanged spec).

Setup: 1,000 nodes x 8 GPUs; 5,000 running pods (single pods of 1 or 2 GPUs and gangs of 4
one-GPU pods with their PodGroups), 2,000 pending pods; objects as the API holds them, no HTTP.
Cases, each timed ``--repeats`` times (wall seconds of observe + view):

* ``cold``: the kept translations dropped before every step, which is what every step cost
  before they were kept (the baseline of the ratios, in the same run);
* ``steady``: nothing changed since the last step;
* ``churn``: 2% of the pods replaced by new objects before every step (status updates, new pods).

No issue sets a target here; the ratios to ``cold`` are what the design claims (docs/kubernetes.md).

    python benchmarks/kube_step.py [--repeats 7]

Prints a table and writes benchmarks/results/kube_step.json.
"""

from __future__ import annotations

import argparse
import copy
import platform
import statistics
import sys
import time
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kube.helpers import a_node, a_pod, a_pod_group
from loadmaster.kube.history import JobHistory
from loadmaster.kube.state import KubeState
from loadmaster.kube.translate import utc_stamp
from results_io import print_targets, provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "kube_step.json"
NODES, RUNNING, PENDING, CHURN = 1_000, 5_000, 2_000, 0.02
T0 = 1_700_000_000.0


def objects(
    rng: np.random.Generator,
) -> tuple[list[dict[str, Any]], list[dict[str, Any]], list[dict[str, Any]]]:
    """Nodes, pods and PodGroups: running pods bound round-robin, pending ones unbound."""
    nodes = [a_node(f"n{i:04d}") for i in range(NODES)]
    pods: list[dict[str, Any]] = []
    groups: list[dict[str, Any]] = []
    made = 0
    while len(pods) < RUNNING + PENDING:
        bound = len(pods) < RUNNING
        if made % 10 == 0:
            name = f"g{made:05d}"
            groups.append(a_pod_group(name, 4))
            members = [a_pod(f"{name}-{m}", 1, name) for m in range(4)]
        else:
            members = [a_pod(f"p{made:05d}", int(rng.integers(1, 3)))]
        for pod in members:
            pod["metadata"]["creationTimestamp"] = utc_stamp(T0 - 3600)
            if bound:
                pod["spec"]["nodeName"] = f"n{len(pods) % NODES:04d}"
                pod["status"] = {"phase": "Running", "startTime": utc_stamp(T0 - 1800)}
        pods.extend(members)
        made += 1
    return nodes, pods, groups


def step(state: KubeState, history: JobHistory) -> float:
    started = time.perf_counter()
    history.observe(state.objects["pods"], state.scheduler_names, T0)
    view = state.view()
    assert view is not None and len(view.snapshot.running) > 0
    return time.perf_counter() - started


def churn(state: KubeState, rng: np.random.Generator) -> None:
    """Replace a share of the pods by copies, as the informer applies MODIFIED events."""
    keys = list(state.objects["pods"])
    for index in rng.choice(len(keys), int(len(keys) * CHURN), replace=False):
        key = keys[int(index)]
        state.apply("pods", "MODIFIED", copy.deepcopy(state.objects["pods"][key]))


def forget(state: KubeState) -> None:
    """Drop what the state keeps between steps (the code before it kept anything)."""
    state._requests.clear()
    state._jobs.clear()
    state._class_objects = ()
    state._node_objects = ()


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--repeats", type=int, default=7)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    source = provenance(ROOT)
    rng = np.random.default_rng(args.seed)
    nodes, pods, groups = objects(rng)
    state = KubeState()
    state.replace("nodes", nodes)
    state.replace("pods", pods)
    state.replace("podgroups", groups)
    history = JobHistory()
    step(state, history)  # warm-up: imports, the node table
    times: dict[str, list[float]] = {"cold": [], "steady": [], "churn": []}
    for _ in range(args.repeats):  # interleaved, so that a change of load falls on every case
        forget(state)
        times["cold"].append(step(state, history))
        times["steady"].append(step(state, history))
        churn(state, rng)
        times["churn"].append(step(state, history))
    summary = {
        case: {
            "median_ms": round(statistics.median(values) * 1e3, 1),
            "min_ms": round(min(values) * 1e3, 1),
            "max_ms": round(max(values) * 1e3, 1),
            "ratio_to_cold": round(statistics.median(values) / statistics.median(times["cold"]), 3),
        }
        for case, values in times.items()
    }
    print(f"{'case':8} {'median ms':>10} {'min':>8} {'max':>8} {'x cold':>8}")
    for case, row in summary.items():
        cells = (row["median_ms"], row["min_ms"], row["max_ms"])
        print(f"{case:8} {cells[0]:10.1f} {cells[1]:8.1f} {cells[2]:8.1f} {row['ratio_to_cold']:8.3f}")
    targets: dict[str, dict[str, object]] = {}
    print_targets(targets)
    write_results(
        RESULTS,
        ROOT,
        {
            "benchmark": "kube_step",
            "command": "python benchmarks/kube_step.py " + " ".join(sys.argv[1:]),
            "setup": (
                f"{NODES} nodes x 8 GPUs, {RUNNING} running and {PENDING} pending pods (gangs of 4 and "
                f"single pods), {CHURN:.0%} of pods replaced per churn step; observe + view, wall seconds"
            ),
            "machine": f"{platform.machine()}, {platform.python_version()}",
            "repeats": args.repeats,
            "times_s": {case: [round(v, 4) for v in values] for case, values in times.items()},
            "summary": summary,
            "targets": targets,
        },
        source,
    )


if __name__ == "__main__":
    main()
