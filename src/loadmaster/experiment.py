"""Compare scheduling profiles on the same cluster and jobs, and write what came out.

The one loop body the ``simulate`` command, the benchmarks and the tests
share: build a scheduler per profile, simulate, summarise, write tables,
plots, metrics JSON and the HTML report.
"""

from __future__ import annotations

import json
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass
from pathlib import Path

from loadmaster import __version__
from loadmaster.config import Cluster, Workload
from loadmaster.metrics import RunSummary, summarize, wait_reasons
from loadmaster.scheduling import Profile, Scheduler
from loadmaster.scheduling.mig_plan import with_interactive_default
from loadmaster.sim import RunResult, SimOptions, simulate
from loadmaster.sim.mig import MigSimOptions
from loadmaster.workload import offered_load


@dataclass(frozen=True)
class ProfileRun:
    """One profile's run: its result, its summary and how long it took to simulate."""

    profile: Profile
    result: RunResult
    summary: RunSummary
    wall_s: float


def compare(
    cluster: Cluster,
    workload: Workload,
    profiles: Sequence[Profile],
    *,
    seed: int = 0,
    period_s: float | None = None,
    progress: Callable[[str, int], None] | None = None,
    explain: frozenset[str] = frozenset(),
) -> list[ProfileRun]:
    """Run every profile on the same jobs; ``progress(profile, jobs_done)`` reports as it goes."""
    runs = []
    mig = MigSimOptions(cluster.mig) if cluster.mig else None
    jobs = with_interactive_default(workload.jobs, cluster.mig, cluster.nodes)
    for profile in profiles:
        report = (lambda n, name=profile.name: progress(name, n)) if progress else None
        options = SimOptions(seed=seed, period_s=period_s, progress=report, explain=explain, mig=mig)
        started = time.perf_counter()
        result = simulate(cluster.nodes, Scheduler(profile), jobs, options)
        wall = time.perf_counter() - started
        runs.append(ProfileRun(profile, result, summarize(result.jobs, result.timeline), wall))
    return runs


def context(cluster: Cluster, workload: Workload, seed: int) -> dict[str, str]:
    """What a report says it was run on, so that a reader can rerun it."""
    parts = []
    for pool in cluster.nodes.pools:
        jobs = [t for t in workload.jobs if t.job.pool == pool]
        gpus = cluster.nodes.pool_gpus(pool)
        load = f"offered load {offered_load(jobs, gpus):.2f}" if len(jobs) > 1 else "no jobs"
        parts.append(f"{pool}: {gpus} GPUs, {len(jobs)} jobs, {load}")
    anywhere = [t for t in workload.jobs if t.job.pool is None]
    if len(anywhere) > 1:
        total = cluster.nodes.total_gpus
        parts.append(
            f"any pool: {total} GPUs, {len(anywhere)} jobs, offered load {offered_load(anywhere, total):.2f}"
        )
    return {
        "cluster": f"{cluster.name} ({len(cluster.nodes)} nodes, {cluster.nodes.total_gpus} GPUs)",
        "workload": f"{workload.name}: {len(workload.jobs)} jobs, load {workload.load_text}, "
        f"workload seed {workload.spec.seed}",
        "pools": "; ".join(parts),
        "scheduler seed": str(seed),
        "loadmaster": __version__,
    }


def write_outputs(out_dir: Path, runs: Sequence[ProfileRun], ctx: dict[str, str]) -> dict[str, Path]:
    """Write metrics.json, per-profile job tables and timelines, PNG plots and report.html."""
    # Imported here: the plotting libraries cost a second to load, and compare() (the benchmarks,
    # the learned scheduler's evaluation) must run where they are not installed.
    from loadmaster.report import (  # noqa: PLC0415
        write_html_report,
        write_job_table,
        write_plots,
        write_timeline,
    )

    out_dir.mkdir(parents=True, exist_ok=True)
    for run in runs:
        write_job_table(run.result.jobs, out_dir / f"jobs.{run.profile.name}")
        write_timeline(run.result.timeline, out_dir / f"timeline.{run.profile.name}")
    metrics = {
        "context": ctx,
        "profiles": {
            run.profile.name: {
                "wall_s": round(run.wall_s, 3),
                **run.summary.to_dict(),
                "waiting": wait_reasons(run.result.jobs),
                "explain": {
                    job: [[t, text] for t, text in story] for job, story in run.result.explanations.items()
                },
            }
            for run in runs
        },
    }
    metrics_path = out_dir / "metrics.json"
    metrics_path.write_text(json.dumps(metrics, indent=2, allow_nan=False) + "\n")
    pairs = {run.profile.name: (run.result.jobs, run.result.timeline) for run in runs}
    write_plots(pairs, out_dir)
    triples = {run.profile.name: (run.result.jobs, run.result.timeline, run.summary) for run in runs}
    report = write_html_report(
        triples, out_dir / "report.html", title="loadmaster: scheduling policies compared", context=ctx
    )
    return {"metrics": metrics_path, "report": report}
