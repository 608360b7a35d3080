"""Compare scheduling profiles on the same cluster and jobs, and write what came out.

The one loop body the ``simulate`` command, the benchmarks and the tests
share: build a scheduler per profile, simulate, summarise, write tables,
plots, metrics JSON and the HTML report.
"""

from __future__ import annotations

import dataclasses
import json
import time
from collections.abc import Callable, Iterator, Mapping, Sequence
from contextlib import contextmanager
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from loadmaster import __version__
from loadmaster.config import Cluster, Workload
from loadmaster.metrics import RunSummary, summarize, wait_reasons
from loadmaster.model import NodeTable, TraceJob
from loadmaster.model.usage import PastUsage
from loadmaster.prefork import Prefork
from loadmaster.scheduling import Profile, Scheduler, scan_kernel
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
    workers: int = 1,
    past_usage: PastUsage | None = None,
) -> list[ProfileRun]:
    """Run every profile on the same jobs; ``progress(profile, jobs_done)`` reports as it goes.

    ``workers`` > 1 runs the profiles in that many forked processes at once (each profile's run
    is independent and seeded, so the results are the same as one after the other); progress
    then comes back through a queue, a batch every fraction of a second. ``past_usage``: the
    fair-share usage and run-time history every run starts from (a live cluster's).
    """
    mig = MigSimOptions(cluster.mig) if cluster.mig else None
    jobs = with_interactive_default(workload.jobs, cluster.mig, cluster.nodes)
    base = SimOptions(seed=seed, period_s=period_s, explain=explain, mig=mig, past_usage=past_usage)
    tasks = [_ProfileTask(cluster.nodes, profile, jobs, base) for profile in profiles]
    if workers <= 1 or len(tasks) <= 1:
        return [_run_profile(task, progress) for task in tasks]
    return _run_parallel(tasks, min(workers, len(tasks)), progress)


@dataclass(frozen=True)
class _ProfileTask:
    """One profile's simulation, as a worker process receives it."""

    nodes: NodeTable
    profile: Profile
    jobs: Sequence[TraceJob]
    options: SimOptions
    queue: Any = None
    """Where a worker sends ``(profile, jobs done)`` batches; None in this process."""


def _run_profile(task: _ProfileTask, progress: Callable[[str, int], None] | None) -> ProfileRun:
    name = task.profile.name
    report = (lambda n: progress(name, n)) if progress else None
    options = dataclasses.replace(task.options, progress=report)
    started = time.perf_counter()
    result = simulate(task.nodes, Scheduler(task.profile), task.jobs, options)
    wall = time.perf_counter() - started
    return ProfileRun(task.profile, result, summarize(result.jobs, result.timeline), wall)


class _Batched:
    """Progress of a worker, sent at most every ``every_s`` (a queue put per job would cost more
    than some profiles' cycles)."""

    def __init__(self, queue: Any, name: str, every_s: float = 0.25) -> None:
        self.queue, self.name, self.every_s = queue, name, every_s
        self.count, self.sent_at = 0, time.monotonic()

    def __call__(self, n: int) -> None:
        self.count += n
        if time.monotonic() - self.sent_at >= self.every_s:
            self.flush()

    def flush(self) -> None:
        if self.count:
            self.queue.put((self.name, self.count))
            self.count, self.sent_at = 0, time.monotonic()


def _run_in_worker(task: _ProfileTask) -> ProfileRun:
    batched = _Batched(task.queue, task.profile.name)
    run = _run_profile(task, lambda _name, n: batched(n))
    batched.flush()
    return run


def _run_parallel(
    tasks: list[_ProfileTask], workers: int, progress: Callable[[str, int], None] | None
) -> list[ProfileRun]:
    # Imported here: multiprocessing and the pool (concurrent.futures, logging, sockets) are tens
    # of milliseconds of start-up that a run of one profile never uses.
    import multiprocessing  # noqa: PLC0415

    from loadmaster.parallel import LocalPool, TaskError  # noqa: PLC0415

    if (
        sum(len(task.jobs) * _reservations(task.profile) for task in tasks)
        >= scan_kernel.SCANS_BEFORE_LOADING
    ):
        # The workers are forked from this process and inherit what it has loaded: the compiled
        # count of the reservation searches, loaded here once (about 0.5 s of CPU), is then neither
        # loaded again by each worker nor missed by its first searches (which count with numpy
        # until a process has made enough of them, scan_kernel.Loader). Asked only where the
        # reserving profiles are expected to search that often in all (about one search per job
        # and reservation a profile makes per lane and cycle, the demo's ratio): the rent-or-buy
        # rule on the run's searches rather than on each worker's. Results do not change: both
        # counts give the same answers.
        scan_kernel.KERNELS.load()
    with multiprocessing.get_context("fork").Manager() as manager, LocalPool(workers) as pool:
        queue = manager.Queue()
        # Dearest first (longest processing time first, the classic rule for the makespan of
        # independent tasks on a few workers): the last profile to start is then a cheap one, and
        # no worker is left simulating a dear profile alone at the end. Only the order of work
        # changes; each run is seeded and independent, and the results keep the caller's order.
        dearest_first = sorted(range(len(tasks)), key=lambda i: expected_cost(tasks[i].profile), reverse=True)
        tickets = {
            pool.submit(_run_in_worker, dataclasses.replace(tasks[i], queue=queue)): i for i in dearest_first
        }
        runs: dict[int, ProfileRun] = {}
        while len(runs) < len(tasks):
            for item in pool.wait(0.2):
                if item.error is not None:
                    raise TaskError(
                        f"simulating {tasks[tickets[item.ticket]].profile.name!r} failed:\n{item.error}"
                    )
                runs[tickets[item.ticket]] = item.value
            while not queue.empty():
                name, count = queue.get()
                if progress is not None:
                    progress(name, count)
        # Keep the caller's profile objects (the workers' copies went through pickle).
        return [dataclasses.replace(runs[i], profile=t.profile) for i, t in enumerate(tasks)]


def expected_cost(profile: Profile) -> tuple[int, int]:
    """A coarse rank of how long ``profile`` takes to simulate, from what its cycles do (higher: dearer).

    From the per-profile times of docs/simulator.md: searches of the running jobs' ends dominate,
    so a profile that reserves for several jobs per lane (conservative backfill) costs most; then
    one that reserves for one (EASY) or looks for victims (preemption), in every cycle with a
    blocked job; then a walk that visits every waiting job (not strict); then strict FIFO, which
    looks at a few jobs per cycle. Used only to order work, never to change a result.
    """
    reservations = _reservations(profile)
    if reservations or "preempt" in profile.actions:
        return reservations, 2
    return 0, 0 if any(p.strict for p in profile.order) else 1


def _reservations(profile: Profile) -> int:
    """How many jobs per lane and cycle ``profile``'s backfill reserves for (0: it reserves none)."""
    if "backfill" not in profile.actions or not profile.reserve:
        return 0
    return max(p.reservations_per_lane for p in profile.reserve)


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


@dataclass(frozen=True, slots=True)
class OutputPart:
    """What a helper process writing one part of :func:`write_outputs` prepares while the
    simulation runs: the modules it imports and the warm-ups it then runs (:class:`Prefork`)."""

    modules: tuple[str, ...]
    warm_ups: tuple[str, ...]


OUTPUT_PARTS: dict[str, OutputPart] = {
    "plots": OutputPart(("loadmaster.report.plots",), ("loadmaster.report.plots:warm_up",)),
    "tables and report": OutputPart(
        ("loadmaster.report.tables", "loadmaster.report.html"), ("loadmaster.report.html:warm_up",)
    ),
}
"""The parts of :func:`write_outputs` that a helper process may write: matplotlib for the PNGs, and
Parquet and plotly for the tables and the report (each library about a quarter to half a second
to import, and a tenth to a fifth of a second more on first use, which the warm-ups take: a tiny
chart of each kind, drawn while the simulation runs). The tables go with the report because
drawing the four PNGs is the longest part (about 0.3-0.5 s of CPU on Tiresias' scaled trace
against 0.15-0.3 s for the report and 0.05 s for the tables).

The warm-ups collect garbage in a process forked from the caller's; :class:`Prefork` freezes what
the helper inherits, so those collections never traverse the caller's objects (a greenlet of
Playwright's, in the browser tests, crashed a helper that did)."""

Outputs = tuple[Path, Sequence["ProfileRun"], dict[str, str]]
"""What each part of the outputs is written from: the folder, the runs and the context."""


@contextmanager
def output_helpers(*, fork: bool = True) -> Iterator[dict[str, Prefork]]:
    """One helper process per part of :data:`OUTPUT_PARTS`, forked now, importing what its part needs.

    For a caller that simulates next: the imports then overlap the simulation. Hand the helpers to
    :func:`write_outputs` inside the ``with``; a helper given nothing (an error came first) is
    stopped when it ends.
    """
    helpers = {
        name: Prefork(part.modules, warm_ups=part.warm_ups, fork=fork) for name, part in OUTPUT_PARTS.items()
    }
    try:
        yield helpers
    finally:
        for helper in helpers.values():
            helper.close()


def write_outputs(
    out_dir: Path,
    runs: Sequence[ProfileRun],
    ctx: dict[str, str],
    helpers: Mapping[str, Prefork] | None = None,
) -> dict[str, Path]:
    """Write metrics.json, per-profile job tables and timelines, PNG plots and report.html.

    With ``helpers`` (:func:`output_helpers`), the parts of :data:`OUTPUT_PARTS` are written by
    them, at the same time as each other and metrics.json; every file is written before this
    returns, and the files are the same as without.
    """
    out_dir.mkdir(parents=True, exist_ok=True)
    outputs: Outputs = (out_dir, runs, ctx)
    parts: dict[str, Callable[[Outputs], None]] = {
        "plots": _write_plots,
        "tables and report": _write_tables_and_report,
    }
    waiting = []
    for name, part in parts.items():
        helper = (helpers or {}).get(name)
        if helper is None:
            part(outputs)
        else:
            helper.submit(part, outputs)
            waiting.append(helper)
    metrics_path = _write_metrics(outputs)
    for helper in waiting:
        helper.wait()
    return {"metrics": metrics_path, "report": out_dir / "report.html"}


def _write_plots(outputs: Outputs) -> None:
    # Imported here: the plotting libraries cost a second to load, and compare() (the benchmarks,
    # the learned scheduler's evaluation) must run where they are not installed.
    from loadmaster.report.plots import write_plots  # noqa: PLC0415

    out_dir, runs, _ = outputs
    pairs = {run.profile.name: (run.result.jobs, run.result.timeline) for run in runs}
    write_plots(pairs, out_dir, by_size={run.profile.name: run.summary.by_size for run in runs})


def _write_tables_and_report(outputs: Outputs) -> None:
    from loadmaster.report.html import write_html_report  # noqa: PLC0415 - as above
    from loadmaster.report.tables import write_job_table, write_timeline  # noqa: PLC0415

    out_dir, runs, ctx = outputs
    for run in runs:
        write_job_table(run.result.jobs, out_dir / f"jobs.{run.profile.name}")
        write_timeline(run.result.timeline, out_dir / f"timeline.{run.profile.name}")
    triples = {run.profile.name: (run.result.jobs, run.result.timeline, run.summary) for run in runs}
    write_html_report(
        triples, out_dir / "report.html", title="loadmaster: scheduling policies compared", context=ctx
    )


def _write_metrics(outputs: Outputs) -> Path:
    out_dir, runs, ctx = outputs
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
    return metrics_path
