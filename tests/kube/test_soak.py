"""Bounded memory over many cycles: the scheduler's per-job caches and the driver's written reasons.

benchmarks/kube_soak.py runs 10,000 cycles and measures RSS; here a short run checks the mechanisms.
"""

from __future__ import annotations

import sys
from pathlib import Path

import numpy as np

from builders import a_cluster, a_job, a_snapshot
from loadmaster.config import load_profiles
from loadmaster.scheduling import Scheduler

sys.path.insert(0, str(Path(__file__).resolve().parents[2] / "benchmarks"))

import kube_soak


def test_the_scheduler_forgets_jobs_that_left() -> None:
    """New Job objects every cycle (as the Kubernetes driver builds them): the caches stay bounded."""
    scheduler = Scheduler(load_profiles()["sds"])
    cluster = a_cluster().nodes(2).build()
    rng = np.random.default_rng(0)
    for n in range(1500):  # 3,000 distinct jobs, two pending at a time
        pending = [a_job(f"j{n}-{i}").gpus(16).submitted(n) for i in range(2)]  # never fit: they wait
        scheduler.cycle(a_snapshot(cluster).pending(*pending).build(), float(n), rng)
    assert 0 < len(scheduler._shapes) <= 2 * 2 + 1024
    assert len(scheduler._lanes) <= 2 * 2 + 1024


def test_a_short_soak_keeps_every_cache_bounded() -> None:
    m = kube_soak.soak(cycles=150, sample=50, seed=1, progress=False)
    sizes = m["cache_sizes_at_end"]
    assert m["pods_bound"] > 100 and m["waiting_jobs_max"] > 0 and m["invalid_requests"] == 0
    assert sizes["driver_reasons"] <= sizes["pods_alive_at_end"]  # reasons of pods gone are forgotten
    assert sizes["scheduler_shapes"] <= m["jobs_seen"]
    # Fair-share history: every finished or deleted run charged, only live pods remembered.
    assert m["usage_charged"] > 50
    assert sizes["history_running"] + sizes["history_charged"] <= sizes["pods_alive_at_end"]
    # The checkpoint, written at every step that charged, names only pods still in the cache.
    assert m["checkpoint_writes"] > 50 and m["checkpoint_failures"] == 0
    assert sizes["checkpoint_named_pods"] <= sizes["pods_alive_at_end"]
    # Translations kept across steps: only for pods (and their jobs) still in the cache.
    assert 0 < sizes["state_jobs"] <= sizes["state_requests"] <= sizes["pods_alive_at_end"]
    _, growth = kube_soak.growth_mib(m["samples"], 150)
    assert growth < 10.0, m["samples"]
