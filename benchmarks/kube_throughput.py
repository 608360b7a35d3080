"""Kubernetes binding throughput: pods bound per second by KubeCluster against the API double.

Setup: the in-process API double (real HTTP, every body validated against
the Kubernetes OpenAPI schema) holds 1,000 nodes x 8 GPUs and a few thousand
pending pods naming loadmaster: gangs of 4 one-GPU pods (each with a
PodGroup) and single pods of 1 or 2 GPUs. KubeCluster runs the real
``Scheduler`` with the gang-capable ``binpack`` profile (FIFO + gang + bin
packing), steps until every pod is bound, and the time from its first step
to the last bind is the measure.

Target (issue 9): at least 100 pods/s, the throughput Kubernetes' own load
tests require of kube-scheduler. Baseline in the same run: raw
``create_namespaced_pod_binding`` calls per second from the official client
against the same double (one thread, no scheduling): the ceiling set by the
HTTP round trip and the double's validation. The ratio says how much of that
ceiling the scheduler keeps.

    python benchmarks/kube_throughput.py [--pods N] [--nodes N]

Prints a table and writes benchmarks/results/kube_throughput.json.
"""

from __future__ import annotations

import argparse
import json
import os
import platform
import sys
import time
from pathlib import Path
from typing import Any

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))

from kubernetes import client

from kube.helpers import a_node, a_pod, a_pod_group, wait_synced
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.cluster import KubeCluster
from loadmaster.kube.testing import KubeApiDouble
from loadmaster.scheduling import Scheduler

RESULTS = Path(__file__).resolve().parent / "results" / "kube_throughput.json"
TARGET_PODS_PER_S = 100.0
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


def schedule(api: KubeApiDouble, url: str, pods: int) -> dict[str, float]:
    """Step KubeCluster until every pod is bound; time it."""
    api_obj = api_client(host=url)
    lease = LeaderElector(api_obj, "bench")
    cluster = KubeCluster(api_obj, Scheduler(load_profiles()["binpack"]), "bench", lease=lease)
    started = time.perf_counter()
    cluster.start()
    wait_synced(cluster, api.rv, timeout_s=120)
    synced = time.perf_counter()
    steps = 0
    while len(api.bindings) < pods and steps < 1000:
        cluster.step()
        steps += 1
    finished = time.perf_counter()
    cluster.stop()
    return {
        "pods": float(pods),
        "bound": float(len(api.bindings)),
        "steps": float(steps),
        "sync_s": synced - started,
        "schedule_s": finished - synced,
        "invalid": float(len(api.invalid)),
    }


def raw_binds(nodes: int, binds: int) -> float:
    """Baseline: raw Binding calls per second from the official client against a fresh double."""
    api = KubeApiDouble()
    url = api.serve()
    for i in range(nodes):
        api.create("nodes", a_node(f"n{i:04d}"))
    for i in range(binds):
        api.create("pods", a_pod(f"r{i:05d}"))
    core = client.CoreV1Api(api_client(host=url))
    started = time.perf_counter()
    for i in range(binds):
        body = client.V1Binding(
            api_version="v1",
            kind="Binding",
            metadata=client.V1ObjectMeta(name=f"r{i:05d}", namespace="team-a"),
            target=client.V1ObjectReference(api_version="v1", kind="Node", name=f"n{i % nodes:04d}"),
        )
        core.create_namespaced_pod_binding(f"r{i:05d}", "team-a", body, _preload_content=False)
    elapsed = time.perf_counter() - started
    api.close()
    return binds / elapsed


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--nodes", type=int, default=1000)
    parser.add_argument("--pods", type=int, default=3000)
    args = parser.parse_args()
    api = KubeApiDouble()
    url = api.serve()
    populate(api, args.nodes, args.pods)
    m = schedule(api, url, args.pods)
    api.close()
    pods_per_s = m["bound"] / m["schedule_s"]
    baseline = raw_binds(args.nodes, min(args.pods, 2000))
    ok = pods_per_s >= TARGET_PODS_PER_S and m["bound"] == m["pods"] and m["invalid"] == 0
    verdict = "PASS" if ok else "FAIL"
    print(f"{'measure':<36}{'value':>12}  target")
    print(f"{'pods bound per second':<36}{pods_per_s:>12,.1f}  >= {TARGET_PODS_PER_S:g}  {verdict}")
    rows: list[tuple[str, float]] = [
        ("pods bound", m["bound"]),
        ("pods pending at start", m["pods"]),
        ("scheduler steps", m["steps"]),
        ("initial list + sync (s)", m["sync_s"]),
        ("schedule and bind (s)", m["schedule_s"]),
        ("baseline raw binds per second", baseline),
        ("scheduler / baseline", pods_per_s / baseline),
        ("invalid request bodies", m["invalid"]),
    ]
    for name, value in rows:
        print(f"{name:<36}{value:>12,.2f}")
    result: dict[str, Any] = {
        "benchmark": "kube_throughput",
        "command": f"python benchmarks/kube_throughput.py --nodes {args.nodes} --pods {args.pods}",
        "setup": (
            f"KubeApiDouble over HTTP, {args.nodes} nodes x 8 GPUs, {args.pods} pending pods "
            f"(half in gangs of {GANG} with PodGroups), profile 'binpack', official kubernetes client"
        ),
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "measured": {k: round(v, 4) for k, v in m.items()},
        "pods_bound_per_s": round(pods_per_s, 1),
        "baseline_raw_binds_per_s": round(baseline, 1),
        "scheduler_over_baseline": round(pods_per_s / baseline, 3),
        "targets": {
            "pods_bound_per_s": {
                "target": f">= {TARGET_PODS_PER_S}",
                "measured": round(pods_per_s, 1),
                "pass": ok,
            },
        },
    }
    RESULTS.parent.mkdir(parents=True, exist_ok=True)
    RESULTS.write_text(json.dumps(result, indent=2) + "\n")
    print(f"wrote {RESULTS}")


if __name__ == "__main__":
    main()
