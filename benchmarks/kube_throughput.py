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

    python benchmarks/kube_throughput.py [--pods N] [--nodes 1000,5000] [--latency-ms 10]

Prints a table and writes benchmarks/results/kube_throughput.json.
"""

from __future__ import annotations

import argparse
import multiprocessing
import os
import platform
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
    }


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", default="1000,5000", help="comma-separated node counts")
    parser.add_argument("--pods", type=int, default=3000)
    parser.add_argument("--serial-pods", type=int, default=600, help="pods for the serial baseline")
    parser.add_argument("--latency-ms", type=float, default=10.0)
    parser.add_argument("--workers", type=int, default=DEFAULT_BIND_WORKERS)
    args = parser.parse_args()
    source = provenance(ROOT)
    latency_s = args.latency_ms / 1000
    runs = [schedule(int(n), args.pods, latency_s, args.workers) for n in args.nodes.split(",")]
    serial = schedule(1000, args.serial_pods, latency_s, 1)
    columns = ("nodes", "bind_workers", "pods", "bound", "steps", "sync_s", "schedule_s", "pods_per_s")
    print(" ".join(f"{c:>12}" for c in columns))
    for m in [*runs, serial]:
        print(" ".join(f"{m[c]:>12.2f}" if c.endswith("_s") else f"{m[c]:>12.0f}" for c in columns))
    targets: dict[str, dict[str, object]] = {}
    for m in runs:
        wanted = TARGETS.get(int(m["nodes"]))
        correct = m["bound"] == m["pods"] and m["invalid"] == 0 and m["bound_twice"] == 0
        if wanted is not None and args.latency_ms == 10.0:
            targets[f"pods_per_s_{int(m['nodes'])}_nodes_10ms"] = {
                "target": f">= {wanted:g} pods/s, every pod bound once, every body valid",
                "measured": round(m["pods_per_s"], 1),
                "pass": bool(m["pods_per_s"] >= wanted and correct),
            }
    print(f"\nserial baseline (1 bind in flight, 1000 nodes): {serial['pods_per_s']:.1f} pods/s")
    print_targets(targets)
    result: dict[str, Any] = {
        "benchmark": "kube_throughput",
        "command": (
            f"python benchmarks/kube_throughput.py --nodes {args.nodes} --pods {args.pods} "
            f"--serial-pods {args.serial_pods} --latency-ms {args.latency_ms:g} --workers {args.workers}"
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
        "runs": [{k: round(v, 4) for k, v in m.items()} for m in runs],
        "serial_baseline": {k: round(v, 4) for k, v in serial.items()},
        "speedup_over_serial": {
            f"{int(m['nodes'])}_nodes": round(m["pods_per_s"] / serial["pods_per_s"], 2) for m in runs
        },
        "targets": targets,
    }
    write_results(RESULTS, ROOT, result, source)


if __name__ == "__main__":
    main()
