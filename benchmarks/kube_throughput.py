"""Kubernetes binding throughput: pods bound per second by KubeCluster against the API double.

Setup: the in-process API double (real HTTP, every body validated against
the Kubernetes OpenAPI schema), run in a process of its own as an API server
is, answers every request after an injected latency (default 10 ms, a
remote API server's round trip). It holds N nodes x 8 GPUs and a few
thousand pending pods naming loadmaster: gangs of 4 one-GPU pods (each with
a PodGroup) and single pods of 1 or 2 GPUs. KubeCluster runs the real
``Scheduler`` with the gang-capable ``binpack`` profile, steps until every
pod is bound, and the time from its first step as leader (after the list
a new leader makes) to the last bind is the measure.

Targets (issue 18): at 10 ms per API call, at least 500 pods/s on 1,000
nodes and 300 pods/s on 5,000 nodes (ClusterLoader2 asks 100 pods/s of
kube-scheduler; scheduler_perf measures about 810 pods/s at 5,000 nodes).
Baseline in the same run: the same scheduler binding serially (one bind in
flight, as before issue 18) on 1,000 nodes, where throughput is about
1 / latency.

Each configuration runs ``--repeats`` times, interleaved (1,000 nodes, 5,000
nodes, serial, then again), so that a change of load on the machine falls on
all of them alike. Reported per configuration: pods/s of every run, their
median, minimum, maximum and spread (max - min), how many runs met the
target, and each run's Binding latency percentiles (p50, p90, p99 over its
binds). A target passes on the median of its runs; the runs that missed it
are counted beside it, not hidden.

    python benchmarks/kube_throughput.py [--pods N] [--nodes 1000,5000] [--latency-ms 10] [--repeats 5]

Prints a table and writes benchmarks/results/kube_throughput.json.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
import statistics
import sys
import time
from collections import Counter
from multiprocessing.connection import Connection
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kube.helpers import a_node, a_pod, a_pod_group, wait_synced
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import DEFAULT_BIND_WORKERS, KubeCluster
from loadmaster.scheduling import Scheduler
from loadmaster_testing.kube_api import KubeApiDouble
from results_io import print_targets, provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "kube_throughput.json"
TARGETS = {1000: 500.0, 5000: 300.0}
"""Nodes -> pods per second asked at 10 ms per API call."""
GANG = 4


def populate(api: KubeApiDouble, nodes: int, pods: int) -> None:
    """Nodes, then half the pods as gangs of ``GANG`` (with PodGroups), half as single pods."""
    for i in range(nodes):
        api.create("nodes", a_node(f"n{i:04d}", gpus=8))
    gangs = pods // 2 // GANG
    for g in range(gangs):
        api.create("podgroups", a_pod_group(f"g{g:04d}", GANG))
        for m in range(GANG):
            api.create("pods", a_pod(f"g{g:04d}-{m}", 1, f"g{g:04d}"))
    for i in range(pods - gangs * GANG):
        api.create("pods", a_pod(f"p{i:05d}", 1 + i % 2))


def serve_double(conn: Connection, nodes: int, pods: int, latency_s: float) -> None:
    """In a child process: populate a double, serve it, answer ``count`` and ``close`` on ``conn``."""
    api = KubeApiDouble()
    url = api.serve()
    populate(api, nodes, pods)
    api.latency_s = latency_s
    conn.send((url, api.rv))
    while True:
        command = conn.recv()
        if command == "count":
            with api.lock:
                twice = max(Counter(k for k, _ in api.bindings).values(), default=0)
                conn.send((len(api.bindings), len(api.invalid), twice))
        else:
            api.close()
            conn.send(None)
            return


def schedule(nodes: int, pods: int, latency_s: float, workers: int) -> dict[str, float]:
    """Start a double with ``nodes`` and ``pods``; step KubeCluster until every pod is bound; time it."""
    context = multiprocessing.get_context("spawn")
    here, there = context.Pipe()
    child = context.Process(target=serve_double, args=(there, nodes, pods, latency_s), daemon=True)
    child.start()
    url, version = here.recv()
    api = api_client(host=url)
    lease = LeaderElector(api, "bench")
    cluster = KubeCluster(
        api, Scheduler(load_profiles()["binpack"]), "bench", lease=lease, bind_workers=workers
    )
    bind_s: list[float] = []  # appended from the bind pool's threads: list.append is atomic
    cluster.stats.listeners.append(
        lambda name, value: (
            bind_s.append(value) if name in {"bind_latency_s", "bind_error_latency_s"} else None
        )
    )
    started = time.perf_counter()
    cluster.start()
    wait_synced(cluster, version, timeout_s=300)
    if not cluster.lead():  # becoming leader lists everything afresh: part of starting, not of binding
        raise RuntimeError("the benchmark's replica could not take the Lease")
    synced = time.perf_counter()
    steps = 0
    bound = 0
    while bound < pods and steps < 1000:
        bound += len(cluster.step().bound)
        steps += 1
    finished = time.perf_counter()
    cluster.stop()
    here.send("count")
    in_api, invalid, twice = here.recv()
    here.send("close")
    here.recv()
    child.join(10)
    return {
        "nodes": float(nodes),
        "pods": float(pods),
        "bound": float(in_api),
        "bound_twice": float(twice > 1),
        "steps": float(steps),
        "sync_s": synced - started,
        "schedule_s": finished - synced,
        "pods_per_s": in_api / (finished - synced),
        "invalid": float(invalid),
        "bind_workers": float(workers),
        **{f"bind_{name}_ms": 1000 * value for name, value in percentiles(bind_s).items()},
    }


def percentiles(values: list[float]) -> dict[str, float]:
    """p50, p90 and p99 of ``values`` (inclusive method: no value beyond the sample's range)."""
    if len(values) < 2:
        return dict.fromkeys(("p50", "p90", "p99"), values[0] if values else float("nan"))
    cuts = statistics.quantiles(values, n=100, method="inclusive")
    return {"p50": cuts[49], "p90": cuts[89], "p99": cuts[98]}


def summary(runs: list[dict[str, float]], wanted: float | None) -> dict[str, Any]:
    """Pods/s over the repeated runs of one configuration: each run, median, min, max, spread."""
    rates = [m["pods_per_s"] for m in runs]
    result: dict[str, Any] = {
        "runs_pods_per_s": [round(r, 1) for r in rates],
        "median": round(statistics.median(rates), 1),
        "min": round(min(rates), 1),
        "max": round(max(rates), 1),
        "spread": round(max(rates) - min(rates), 1),
        "stdev": round(statistics.stdev(rates), 1) if len(rates) > 1 else 0.0,
        "bind_p50_ms_median": round(statistics.median(m["bind_p50_ms"] for m in runs), 2),
        "bind_p99_ms_median": round(statistics.median(m["bind_p99_ms"] for m in runs), 2),
    }
    if wanted is not None:
        result["runs_meeting_target"] = f"{sum(r >= wanted for r in rates)}/{len(rates)}"
    return result


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,5000", help="comma-separated node counts")
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--serial-pods", type=int, default=600, help="pods for the serial baseline")
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=DEFAULT_BIND_WORKERS)
    parser.add_argument("--repeats", type=int, default=5, help="runs of each configuration, interleaved")
    args = parser.parse_args()
    source = provenance(ROOT)
    if args.repeats < 1:
        parser.error(f"--repeats must be at least 1, got {args.repeats}")
    latency_s = args.latency_ms / 1000
    sizes = [int(n) for n in args.nodes.split(",")]
    runs: dict[int, list[dict[str, float]]] = {n: [] for n in sizes}
    serials: list[dict[str, float]] = []
    for r in range(args.repeats):
        for n in sizes:
            runs[n].append(schedule(n, args.pods, latency_s, args.workers))
            print(
                f"repeat {r + 1}/{args.repeats}: {n} nodes {runs[n][-1]['pods_per_s']:.1f} pods/s", flush=True
            )
        serials.append(schedule(1000, args.serial_pods, latency_s, 1))
        print(f"repeat {r + 1}/{args.repeats}: serial {serials[-1]['pods_per_s']:.1f} pods/s", flush=True)
    columns = ("nodes", "bind_workers", "pods", "bound", "steps", "sync_s", "schedule_s", "pods_per_s",
               "bind_p50_ms", "bind_p99_ms")  # fmt: skip
    print(" ".join(f"{c:>12}" for c in columns))
    for m in [*(m for n in sizes for m in runs[n]), *serials]:
        print(" ".join(f"{m[c]:>12.2f}" if c.endswith(("_s", "_ms")) else f"{m[c]:>12.0f}" for c in columns))
    summaries = {n: summary(runs[n], TARGETS.get(n) if args.latency_ms == 10.0 else None) for n in sizes}
    serial = summary(serials, None)
    targets: dict[str, dict[str, object]] = {}
    for n in sizes:
        wanted = TARGETS.get(n)
        correct = all(
            m["bound"] == m["pods"] and m["invalid"] == 0 and m["bound_twice"] == 0 for m in runs[n]
        )
        if wanted is not None and args.latency_ms == 10.0:
            median = float(summaries[n]["median"])
            targets[f"pods_per_s_{n}_nodes_10ms"] = {
                "target": f">= {wanted:g} pods/s (median of {args.repeats} runs), every pod bound once, "
                "every body valid",
                "measured": median,
                "spread": f"min {summaries[n]['min']}, max {summaries[n]['max']}; "
                f"{summaries[n]['runs_meeting_target']} runs met the target",
                "pass": bool(median >= wanted and correct),
            }
    for n in sizes:
        print(f"{n} nodes: {summaries[n]}")
    print(f"serial baseline (1 bind in flight, 1000 nodes): {serial}")
    print_targets(targets)
    result: dict[str, Any] = {
        "benchmark": "kube_throughput",
        "command": (
            f"python benchmarks/kube_throughput.py --nodes {args.nodes} --pods {args.pods} "
            f"--serial-pods {args.serial_pods} --latency-ms {args.latency_ms:g} --workers {args.workers} "
            f"--repeats {args.repeats}"
        ),
        "setup": (
            f"KubeApiDouble over HTTP in its own process, {args.latency_ms:g} ms injected per request, "
            f"8 GPUs per node, {args.pods} pending pods (half in gangs of {GANG} with PodGroups), "
            "profile 'binpack', official kubernetes client"
        ),
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "repeats": args.repeats,
        "summary": {f"{n}_nodes": summaries[n] for n in sizes},
        "serial_summary": serial,
        "runs": [{k: round(v, 4) for k, v in m.items()} for n in sizes for m in runs[n]],
        "serial_baseline": [{k: round(v, 4) for k, v in m.items()} for m in serials],
        "speedup_over_serial": {  # medians of the same session's interleaved runs
            f"{n}_nodes": round(float(summaries[n]["median"]) / float(serial["median"]), 2) for n in sizes
        },
        "targets": targets,
    }
    write_results(RESULTS, ROOT, result, source)


if __name__ == "__main__":
    main()
