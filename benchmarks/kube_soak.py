"""Kubernetes soak: the scheduler's memory over many cycles of steady pod churn.

Setup: the in-process API double (real HTTP, the official client, informers
watching) holds 8 nodes x 8 GPUs. Each cycle, like users and controllers
would: new pods arrive (single pods of 1 or 2 GPUs, and every few cycles a
gang of 2 with its PodGroup), pods that ran for ``RUN_CYCLES`` cycles finish
(phase Succeeded) and are deleted ``FINISHED_CYCLES`` later, and pods left
waiting for ``GIVE_UP_CYCLES`` cycles are cancelled (deleted), so the number
of live pods stays steady. KubeCluster steps with the ``sds`` profile (strict
lanes, backfill with reservations: the profile with the most per-job caches),
binds, and writes every waiting pod's reason (condition and Event). Before
each step the driver waits until the informers have seen every change, so
every cycle sees fresh objects.

The double is bookkeeping, not the scheduler: its event history is capped
(``history``), and the Events the scheduler writes and its record of binds
are dropped every cycle (kube-apiserver expires Events after an hour), so
that the process's resident memory (RSS, from /proc/self/status) is the
scheduler's. RSS is sampled every ``--sample`` cycles; growth is the last
sample less the one at the end of warm-up (the first tenth of the cycles).

Target (issue 18): at least 10,000 cycles; RSS growth after warm-up <= 10 MiB.
Beside it: the sizes of the caches that used to grow (the scheduler's
per-job caches, the driver's written reasons) against the number of distinct
jobs seen.

    python benchmarks/kube_soak.py [--cycles N] [--sample N] [--seed N]

Prints a table and writes benchmarks/results/kube_soak.json.
"""

from __future__ import annotations

import argparse
import gc
import json
import os
import platform
import sys
import time
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1] / "tests"))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from kube.helpers import a_finished_status, a_node, a_pod, a_pod_group, wait_synced
from loadmaster.config import load_profiles
from loadmaster.kube.api import LeaderElector, api_client
from loadmaster.kube.checkpoint import DATA_KEY, DEFAULT_CHECKPOINT, UsageCheckpoint
from loadmaster.kube.cluster import KubeCluster
from loadmaster.scheduling import Scheduler, scan_kernel
from loadmaster_testing.kube_api import KubeApiDouble
from results_io import print_targets, provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "kube_soak.json"
TARGET_CYCLES = 10_000
TARGET_GROWTH_MIB = 10.0
NODES = 8
RUN_CYCLES = 17
GIVE_UP_CYCLES = 30
FINISHED_CYCLES = 2
"""Cycles a finished pod stays in the API before its controller deletes it (the scheduler's fair-share
history charges it meanwhile, and must forget it once it is gone)."""
GANG_EVERY = 5


def rss_mib() -> float:
    """This process's resident memory now (VmRSS), in MiB."""
    for line in Path("/proc/self/status").read_text().splitlines():
        if line.startswith("VmRSS:"):
            return int(line.split()[1]) / 1024
    raise RuntimeError("no VmRSS in /proc/self/status")


@dataclass
class Churn:
    """The workload: who arrives, finishes and gives up each cycle (seeded)."""

    api: KubeApiDouble
    rng: np.random.Generator
    made: int = 0
    born: dict[str, int] = field(default_factory=dict)
    """Pod key -> the cycle it was created in."""
    bound_at: dict[str, int] = field(default_factory=dict)

    def populate(self) -> None:
        for i in range(NODES):
            self.api.create("nodes", a_node(f"n{i}"))

    def cycle(self, n: int) -> None:
        """One cycle's arrivals and departures, then the double's bookkeeping trimmed."""
        with self.api.lock:
            for pod in self.api.store["pods"].values():
                key = f"{pod['metadata']['namespace']}/{pod['metadata']['name']}"
                if pod["spec"].get("nodeName") and key not in self.bound_at:
                    self.bound_at[key] = n
            for key in [k for k, at in self.bound_at.items() if n - at == RUN_CYCLES]:
                if key in self.api.store["pods"]:
                    self.api.patch("pods", key, {"status": a_finished_status(self.api.clock())})
            done = [k for k, at in self.bound_at.items() if n - at >= RUN_CYCLES + FINISHED_CYCLES]
            gone = [k for k, at in self.born.items() if n - at >= GIVE_UP_CYCLES and k not in self.bound_at]
            for key in done + gone:
                if key in self.api.store["pods"]:
                    self.api.delete("pods", key)
                self.born.pop(key, None)
                self.bound_at.pop(key, None)
            self.api.store["events"].clear()
            self.api.bindings.clear()
            self._drop_groups()
        for _ in range(int(self.rng.integers(1, 4))):
            self._create(a_pod(f"p{self.made:07d}", int(self.rng.integers(1, 3))), n)
        if n % GANG_EVERY == 0:
            name = f"g{self.made:07d}"
            self.api.create("podgroups", a_pod_group(name, 2))
            for m in range(2):
                self._create(a_pod(f"{name}-{m}", 1, name), n)

    def _create(self, pod: dict[str, Any], n: int) -> None:
        self.made += 1
        made = self.api.create("pods", pod)
        self.born[f"{made['metadata']['namespace']}/{made['metadata']['name']}"] = n

    def _drop_groups(self) -> None:
        """PodGroups whose pods are all gone go too (their controller deletes them with the job)."""
        alive = {
            p["metadata"].get("labels", {}).get("scheduling.x-k8s.io/pod-group")
            for p in self.api.store["pods"].values()
        }
        for key in [k for k in self.api.store["podgroups"] if k.split("/", 1)[1] not in alive]:
            self.api.delete("podgroups", key)


def soak(cycles: int, sample: int, seed: int, progress: bool = True) -> dict[str, Any]:
    """Run ``cycles`` cycles of churn; RSS samples, cache sizes and counts."""
    api = KubeApiDouble(history=2_000)
    url = api.serve()
    churn = Churn(api, np.random.default_rng(seed))
    churn.populate()
    client = api_client(host=url)
    # The fair-share checkpoint written at every step that charged (every_s=0): what it names, and
    # what its writer keeps, must stay as bounded as the cache.
    checkpoint = UsageCheckpoint(client, every_s=0)
    cluster = KubeCluster(
        client,
        Scheduler(load_profiles()["sds"]),
        "soak",
        lease=LeaderElector(client, "soak"),
        checkpoint=checkpoint,
    )
    cluster.start()
    # The reservation search's compiled count (numba, the `fast` extra) loads at a process's
    # 5,000th scan, about 120-175 MiB of resident memory once: a step, not growth. It is loaded
    # before the first cycle here, so that the samples measure what the cycles keep; its cost is
    # reported beside them. The scheduler's image has no numba, so it never loads there.
    compiled_mib = load_compiled_count()
    samples: list[tuple[int, float]] = []
    bound = waiting_max = 0
    jobs_seen: set[str] = set()
    started = time.perf_counter()
    try:
        for n in range(1, cycles + 1):
            churn.cycle(n)
            wait_synced(cluster, api.rv, timeout_s=60)
            report = cluster.step()
            bound += len(report.bound)
            waiting_max = max(waiting_max, len(report.waiting))
            if report.view is not None:
                jobs_seen.update(report.view.jobs)
            if n % sample == 0 or n == cycles:
                gc.collect()
                samples.append((n, rss_mib()))
                if progress:
                    rate = n / (time.perf_counter() - started)
                    print(f"  cycle {n:>6}: RSS {samples[-1][1]:7.1f} MiB, {rate:5.0f} cycles/s", flush=True)
        sizes = {
            "scheduler_shapes": len(cluster.scheduler._shapes),
            "scheduler_lanes": len(cluster.scheduler._lanes),
            "scheduler_flat_placements": len(cluster.scheduler._flat),
            "scheduler_feasible_memo": len(cluster.scheduler._feasible),
            "driver_reasons": len(cluster._reasons),
            "state_requests": len(cluster.state._requests),
            "state_jobs": len(cluster.state._jobs),
            "history_running": len(cluster.history._running),
            "history_charged": len(cluster.history._charged),
            "history_users": len(cluster.history.recent_runtimes),
            "pods_alive_at_end": len(api.store["pods"]),
            "checkpoint_named_pods": len(json.loads(checkpoint_text(api) or "{}").get("charged", [])),
            "checkpoint_bytes": len(checkpoint_text(api).encode()),
        }
    finally:
        cluster.stop()
        api.close()
    return {
        "cycles": cycles,
        "wall_s": time.perf_counter() - started,
        "samples": samples,
        "pods_bound": bound,
        "pods_created": churn.made,
        "jobs_seen": len(jobs_seen),
        "waiting_jobs_max": waiting_max,
        "cache_sizes_at_end": sizes,
        "invalid_requests": len(api.invalid),
        "usage_charged": cluster.stats.counts.get("usage_charged", 0),
        "checkpoint_writes": checkpoint.saves,
        "checkpoint_failures": checkpoint.failures,
        "compiled_count_rss_mib": None if compiled_mib is None else round(compiled_mib, 1),
    }


def checkpoint_text(api: KubeApiDouble) -> str:
    """The fair-share checkpoint as the double stores it ('' when none was written)."""
    found = api.get("configmaps", DEFAULT_CHECKPOINT)
    return str((found or {}).get("data", {}).get(DATA_KEY, ""))


def load_compiled_count() -> float | None:
    """Load the search's compiled count now, where numba is installed: the resident MiB it added."""
    if not scan_kernel.available():
        return None
    before = rss_mib()
    scan_kernel.KERNELS.load()
    return rss_mib() - before


def growth_mib(samples: list[tuple[int, float]], cycles: int) -> tuple[float, float]:
    """(RSS at the end of warm-up, growth since) from the samples."""
    warm = [rss for n, rss in samples if n >= cycles // 10]
    return warm[0], warm[-1] - warm[0]


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--cycles", type=int, default=TARGET_CYCLES)
    parser.add_argument("--sample", type=int, default=500)
    parser.add_argument("--seed", type=int, default=0)
    args = parser.parse_args()
    source = provenance(ROOT)
    m = soak(args.cycles, args.sample, args.seed)
    warm, growth = growth_mib(m["samples"], args.cycles)
    print(f"\n{'measure':<40}{'value':>14}")
    rows = [
        ("cycles", m["cycles"]),
        ("wall time (s)", round(m["wall_s"], 1)),
        ("pods created", m["pods_created"]),
        ("pods bound", m["pods_bound"]),
        ("distinct jobs seen", m["jobs_seen"]),
        ("most jobs waiting in a cycle", m["waiting_jobs_max"]),
        ("RSS after warm-up (MiB)", round(warm, 1)),
        ("RSS growth after warm-up (MiB)", round(growth, 2)),
        ("compiled count loaded first (MiB)", m["compiled_count_rss_mib"] or "no numba"),
        ("checkpoint writes", m["checkpoint_writes"]),
        ("checkpoint failures", m["checkpoint_failures"]),
        *((f"size at end: {k}", v) for k, v in m["cache_sizes_at_end"].items()),
    ]
    for name, value in rows:
        shown = f"{value:>14,}" if isinstance(value, int | float) else f"{value:>14}"
        print(f"{name:<40}{shown}")
    checks = {
        "cycles": {
            "target": f">= {TARGET_CYCLES}",
            "measured": m["cycles"],
            "pass": m["cycles"] >= TARGET_CYCLES,
        },
        "rss_growth_after_warmup_mib": {
            "target": f"<= {TARGET_GROWTH_MIB}",
            "measured": round(growth, 2),
            "pass": growth <= TARGET_GROWTH_MIB,
        },
    }
    print_targets(checks)
    result = {
        "benchmark": "kube_soak",
        "command": (
            f"python benchmarks/kube_soak.py --cycles {args.cycles} --sample {args.sample} --seed {args.seed}"
        ),
        "setup": (
            f"KubeApiDouble over HTTP, {NODES} nodes x 8 GPUs, profile 'sds'; each cycle 1-3 new pods "
            f"of 1-2 GPUs and a gang of 2 every {GANG_EVERY} cycles; pods deleted after {RUN_CYCLES} "
            f"cycles bound or {GIVE_UP_CYCLES} cycles waiting; warm-up: the first tenth of the cycles"
        ),
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "measured": {
            **{k: v for k, v in m.items() if k != "samples"},
            "rss_after_warmup_mib": round(warm, 2),
            "rss_growth_after_warmup_mib": round(growth, 2),
            "rss_samples_mib": [[n, round(v, 2)] for n, v in m["samples"]],
        },
        "targets": checks,
    }
    write_results(RESULTS, ROOT, result, source)


if __name__ == "__main__":
    main()
