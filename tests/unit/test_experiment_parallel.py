"""Profiles simulated in parallel processes give the same runs as one after the other."""

from __future__ import annotations

from collections import Counter

import numpy as np

from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.experiment import compare


def test_two_workers_give_the_same_job_tables_and_full_progress() -> None:
    cluster = load_cluster("lab")
    workload = load_workload("lab", cluster, jobs=80)
    profiles = [load_profiles()[name] for name in ("fifo", "sds", "slurm")]
    serial = compare(cluster, workload, profiles, seed=3)
    seen: Counter[str] = Counter()
    parallel = compare(
        cluster, workload, profiles, seed=3, workers=2, progress=lambda n, k: seen.update({n: k})
    )
    assert [r.profile for r in parallel] == profiles  # the caller's objects, in the caller's order
    assert seen == {"fifo": 80, "sds": 80, "slurm": 80}
    for one, other in zip(serial, parallel, strict=True):
        for column in ("job_id", "start_s", "end_s", "node_names", "wait_reason", "reason"):
            assert np.array_equal(getattr(one.result.jobs, column), getattr(other.result.jobs, column)), (
                column
            )
        assert one.summary.mean_wait_s == other.summary.mean_wait_s
