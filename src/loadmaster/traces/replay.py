"""Replaying a trace on a simulated cluster: canonical rows to simulator jobs, with scaling.

Conversion (each default says why):

- A row without a run time, or with run time 0, cannot be replayed (the
  simulator needs the true duration) and is dropped and counted; so is a row
  that asks for no GPU, because the simulated cluster schedules GPUs only.
  One exception: a trace whose metadata says ``unknown_run_time:
  time_limit`` (a snapshot of a live cluster, where no run time is known
  yet) runs each such job for its time limit, as the live scheduler plans
  it; the report counts them.
- A job bigger than the simulated cluster (a task wider than the widest
  node, or more GPUs than the cluster has) is dropped and counted with the
  reason, or stops the replay when ``too_big="stop"``: never silently.
- Time limit: the trace's requested limit where it has one (> 0); otherwise
  the run time times ``time_limit_factor`` (1.0: a perfect estimate, the
  optimistic case for backfilling; the median over-estimate of
  ``loadmaster trace inspect`` is a realistic factor).
- User and group come from the trace ('unknown' when empty); every job goes
  to the queue ``default`` unless ``queues="trace"`` keeps the trace's queues
  as separate lanes; ``pool`` and ``resource_type`` are None (anywhere),
  because the trace's partitions are not the simulated cluster's pools,
  unless ``pool`` names one of the cluster's pools: then every job goes
  there, its settings apply (a MIG pool's ``interactive_default`` turns
  small jobs into MIG requests), and load and sizes are measured on that
  pool's GPUs.
- Requests are GPUs only (``requests="gpu"``): CPU and memory recorded on
  other hosts would make jobs wait for reasons foreign to the replayed
  cluster. ``requests="trace"`` keeps the trace's CPU, memory and GPU memory.

Scaling. The offered load of jobs on ``C`` GPUs is
``sum(GPUs x run time) / (C x arrival span)`` (:func:`loadmaster.workload.offered_load`).

- ``load``: inter-arrival times are all multiplied by one factor so that the
  replay's offered load is exactly ``load`` on the simulated cluster.
- Without ``load``, ``scale="rate"`` (the default) keeps the trace's own load:
  the gaps are multiplied by ``trace_gpus / C``, so a trace recorded on 256
  GPUs arrives twice as fast on 512. When the trace's cluster size is not
  known the recorded times are kept.
- ``scale="sample"`` instead keeps the arrival span and the daily pattern and
  draws ``round(jobs x C / trace_gpus)`` rows with replacement (seeded), each
  shifted by a uniform jitter of up to one mean inter-arrival gap, so a larger
  cluster sees proportionally more jobs of the same mix. A ``load`` is then
  reached by the same time scaling as above.
"""

from __future__ import annotations

import math
from collections import Counter
from dataclasses import dataclass, field, replace
from typing import Literal

import numpy as np
import numpy.typing as npt

from loadmaster.errors import LoadmasterError
from loadmaster.model import MILLI_PER_GPU, Job, NodeTable, TaskRequest, TraceJob
from loadmaster.traces.trace import Trace

Scale = Literal["rate", "sample"]
TooBig = Literal["drop", "stop"]
Queues = Literal["one", "trace"]
Requests = Literal["gpu", "trace"]

CAPACITY_KEYS = ("capacity_gpus", "MaxProcs", "MaxNodes")
"""Metadata keys that give the GPUs (or GPU slots) of the cluster a trace was recorded on; first found wins.

An SWF log's ``MaxNodes`` comes last: it counts processors only in logs of one
processor per node, such as Lublin's model logs, which have no ``MaxProcs``."""

UNKNOWN_RUN_TIME_KEY = "unknown_run_time"
"""Trace metadata: ``time_limit`` replays a row without a run time for its time limit."""
DEFAULT_QUEUE = "default"
UNKNOWN_USER = "unknown"


class ReplayError(LoadmasterError):
    """A trace cannot be replayed as asked: ``field`` is the option at fault; the message says what to do."""

    def __init__(self, field: str, message: str) -> None:
        self.field = field
        self.detail = message
        super().__init__(f"{field}: {message}")


@dataclass(frozen=True, slots=True)
class ReplayOptions:
    """How to turn a trace into simulator jobs; see the module docstring for each default's reason."""

    load: float | None = None
    """Target offered load on the simulated cluster; None: see ``scale``."""
    scale: Scale = "rate"
    """On a cluster of another size: 'rate' scales arrival times, 'sample' draws more or fewer jobs."""
    trace_gpus: int | None = None
    """GPUs of the cluster the trace was recorded on; None: from the metadata (:data:`CAPACITY_KEYS`)."""
    max_jobs: int | None = None
    """Replay only the first ``max_jobs`` replayable jobs (by submission); None: all."""
    time_limit_factor: float = 1.0
    """A job without a time limit gets run time x this factor (1.0: a perfect estimate)."""
    ignore_time_limits: bool = False
    """Give every job run time x ``time_limit_factor`` even when the trace records a limit."""
    queues: Queues = "one"
    requests: Requests = "gpu"
    too_big: TooBig = "drop"
    seed: int = 0
    """Seed of ``scale="sample"``'s draws and jitter."""
    pool: str | None = None
    """Send every job to this pool of the simulated cluster (None: anywhere)."""

    def __post_init__(self) -> None:
        if self.load is not None and not (math.isfinite(self.load) and self.load > 0):
            raise ReplayError("load", f"must be a number > 0, got {self.load}")
        if not self.time_limit_factor > 0:
            raise ReplayError("time_limit_factor", f"must be > 0, got {self.time_limit_factor}")
        if self.trace_gpus is not None and self.trace_gpus < 1:
            raise ReplayError("trace_gpus", f"must be >= 1, got {self.trace_gpus}")
        if self.max_jobs is not None and self.max_jobs < 1:
            raise ReplayError("max_jobs", f"must be >= 1, got {self.max_jobs}")


@dataclass
class ReplayReport:
    """What a replay did: rows read, jobs made, rows dropped and why, and how time was scaled."""

    rows: int = 0
    jobs: int = 0
    dropped: Counter[str] = field(default_factory=Counter)
    """Rows left out, by reason."""
    first_dropped: dict[str, str] = field(default_factory=dict)
    """The id of the first row dropped for each reason."""
    cluster_gpus: int = 0
    trace_gpus: int | None = None
    time_factor: float = 1.0
    """Every inter-arrival gap was multiplied by this."""
    sampled_from: int | None = None
    """With ``scale="sample"``: the number of replayable rows the jobs were drawn from."""
    offered_load: float | None = None
    """Offered load of the jobs on the cluster; None with fewer than two distinct submit times."""
    origin_s: float = 0.0
    """The trace time (its ``submit_s``) that became the replay's time 0: the first replayed job's."""
    run_time_from_limit: int = 0
    """Rows without a run time that run for their time limit (:data:`UNKNOWN_RUN_TIME_KEY`)."""

    def lines(self) -> list[str]:
        """What the terminal prints: one line for the jobs, one per drop reason."""
        load = f"{self.offered_load:.3f}" if self.offered_load is not None else "n/a"
        text = (
            f"replay: {self.jobs:,} jobs from {self.rows:,} rows on {self.cluster_gpus:,} GPUs, "
            f"offered load {load}, inter-arrival gaps x{self.time_factor:.4g}"
        )
        if self.sampled_from is not None:
            text += f", drawn with replacement from {self.sampled_from:,} jobs"
        if self.trace_gpus is None:
            text += " (trace's cluster size unknown)"
        if self.run_time_from_limit:
            text += f"; {self.run_time_from_limit:,} without a run time run for their time limit"
        drops = [
            f"  dropped {n:,}: {reason} (first: job {self.first_dropped[reason]})"
            for reason, n in self.dropped.most_common()
        ]
        return [text, *drops]


@dataclass(frozen=True)
class Replay:
    """Simulator jobs made from a trace, sorted by submission, and the report of how."""

    jobs: list[TraceJob]
    report: ReplayReport


@dataclass(frozen=True)
class _Rows:
    """The replayable rows as parallel arrays (the canonical columns a job needs)."""

    ids: npt.NDArray[np.object_]
    users: npt.NDArray[np.object_]
    groups: npt.NDArray[np.object_]
    queues: npt.NDArray[np.object_]
    submit_s: npt.NDArray[np.float64]
    duration_s: npt.NDArray[np.float64]
    limit_s: npt.NDArray[np.float64]
    tasks: npt.NDArray[np.int64]
    gpu_milli: npt.NDArray[np.int64]
    cpu_milli: npt.NDArray[np.int64]
    memory_mib: npt.NDArray[np.int64]
    gpu_memory_mib: npt.NDArray[np.int64]

    def take(self, index: npt.NDArray[np.int64]) -> _Rows:
        return _Rows(**{name: getattr(self, name)[index] for name in self.__dataclass_fields__})

    def __len__(self) -> int:
        return int(self.submit_s.size)


def replay_time(report: ReplayReport, trace_s: float) -> float:
    """The replay's time of the trace's time ``trace_s`` (shifted to the first job, gaps scaled)."""
    return (trace_s - report.origin_s) * report.time_factor


def trace_capacity_gpus(trace: Trace) -> int | None:
    """GPUs of the cluster the trace was recorded on, from its metadata (:data:`CAPACITY_KEYS`)."""
    for key in CAPACITY_KEYS:
        try:
            value = int(float(trace.meta[key]))
        except (KeyError, ValueError):
            continue
        if value >= 1:
            return value
    return None


def replay(trace: Trace, nodes: NodeTable, options: ReplayOptions | None = None) -> Replay:
    """Simulator jobs from ``trace`` for a cluster of ``nodes``, scaled as ``options`` say."""
    options = options or ReplayOptions()
    if options.pool is not None:
        nodes = _pool_nodes(nodes, options.pool)
    report = ReplayReport(rows=len(trace), cluster_gpus=nodes.total_gpus)
    report.trace_gpus = options.trace_gpus or trace_capacity_gpus(trace)
    rows = _replayable(_limits_for_unknown(_columns(trace, options), trace, report), nodes, options, report)
    if options.max_jobs is not None:
        rows = rows.take(np.arange(min(options.max_jobs, len(rows)), dtype=np.int64))
    if options.scale == "sample":
        rows = _sample(rows, report, options.seed)
    report.time_factor = _time_factor(rows, report, options)
    start = float(rows.submit_s.min()) if len(rows) else 0.0
    report.origin_s = start
    submit = (rows.submit_s - start) * report.time_factor
    jobs = _jobs(rows, submit, options)
    report.jobs = len(jobs)
    report.offered_load = _load(rows.gpu_milli * rows.tasks, rows.duration_s, submit, report.cluster_gpus)
    return Replay(jobs, report)


def _pool_nodes(nodes: NodeTable, pool: str) -> NodeTable:
    """The nodes of ``pool``: what a replay sent there is sized and loaded against."""
    if pool not in nodes.pools:
        raise ReplayError("pool", f"the cluster has no pool {pool!r}; pools: {', '.join(nodes.pools)}")
    return NodeTable.build([n for n in nodes.nodes if n.pool == pool], nodes.resource_types)


def _columns(trace: Trace, options: ReplayOptions) -> _Rows:
    """Every row's fields, sorted by submission (stable, so ties keep the trace's order)."""
    order = np.argsort(trace.column("submit_s"), kind="stable")

    def ints(name: str) -> npt.NDArray[np.int64]:
        values: npt.NDArray[np.int64] = np.nan_to_num(trace.column(name)[order]).astype(np.int64)
        return values

    gpu_resources = options.requests == "gpu"
    zeros = np.zeros(order.size, dtype=np.int64)
    queues = trace.column("queue")[order] if options.queues == "trace" else None
    return _Rows(
        ids=trace.column("job_id")[order],
        users=trace.column("user")[order],
        groups=trace.column("group")[order],
        queues=queues if queues is not None else np.full(order.size, DEFAULT_QUEUE, dtype=object),
        submit_s=trace.column("submit_s")[order],
        duration_s=trace.column("duration_s")[order],
        limit_s=trace.column("time_limit_s")[order],
        tasks=ints("tasks"),
        gpu_milli=ints("gpu_milli_per_task"),
        cpu_milli=zeros if gpu_resources else ints("cpu_milli_per_task"),
        memory_mib=zeros if gpu_resources else ints("memory_mib_per_task"),
        gpu_memory_mib=zeros if gpu_resources else ints("gpu_memory_mib"),
    )


def _limits_for_unknown(rows: _Rows, trace: Trace, report: ReplayReport) -> _Rows:
    """With ``unknown_run_time: time_limit`` in the metadata, rows without a run time take their limit."""
    if trace.meta.get(UNKNOWN_RUN_TIME_KEY) != "time_limit":
        return rows
    missing = ~np.isfinite(rows.duration_s) & np.isfinite(rows.limit_s) & (rows.limit_s > 0)
    report.run_time_from_limit = int(missing.sum())
    return replace(rows, duration_s=np.where(missing, rows.limit_s, rows.duration_s))


def _replayable(rows: _Rows, nodes: NodeTable, options: ReplayOptions, report: ReplayReport) -> _Rows:
    """The rows that can run on ``nodes``; the others are counted by reason (or stop the replay)."""
    widest = int(nodes.max_gpus)
    total = nodes.total_gpus
    cpu, memory = int(nodes.cpu_milli.max()), int(nodes.memory_mib.max())
    task_gpus = np.where(rows.gpu_milli >= MILLI_PER_GPU, rows.gpu_milli // MILLI_PER_GPU, 1)
    job_gpus = rows.tasks * rows.gpu_milli / MILLI_PER_GPU
    reasons: list[tuple[str, npt.NDArray[np.bool_], bool]] = [
        ("no run time", ~np.isfinite(rows.duration_s), False),
        ("run time 0", rows.duration_s == 0, False),
        ("no GPU asked for", rows.gpu_milli == 0, False),
        (f"a task wants more GPUs than the widest node has ({widest})", task_gpus > widest, True),
        (f"more GPUs than the cluster has ({total})", job_gpus > total, True),
        (f"a task wants more CPU than any node has ({cpu} milli)", rows.cpu_milli > cpu, True),
        (f"a task wants more memory than any node has ({memory} MiB)", rows.memory_mib > memory, True),
    ]
    keep = np.ones(len(rows), dtype=bool)
    for reason, bad, too_big in reasons:
        hit = keep & bad
        if not np.any(hit):
            continue
        first = str(rows.ids[np.argmax(hit)])
        if too_big and options.too_big == "stop":
            raise ReplayError(
                "too_big", f"job {first}: {reason}; {int(hit.sum())} such jobs ('drop' replays the rest)"
            )
        report.dropped[reason] += int(hit.sum())
        report.first_dropped[reason] = first
        keep &= ~bad
    return rows.take(np.flatnonzero(keep))


def _sample(rows: _Rows, report: ReplayReport, seed: int) -> _Rows:
    """``round(n x cluster / trace GPUs)`` rows drawn with replacement, jittered, in submission order."""
    if report.trace_gpus is None:
        raise ReplayError(
            "scale",
            "'sample' needs the GPUs of the cluster the trace was recorded on: "
            "set trace_gpus (the trace's metadata has none of " + ", ".join(CAPACITY_KEYS) + ")",
        )
    if len(rows) == 0:
        return rows
    report.sampled_from = len(rows)
    count = max(1, round(len(rows) * report.cluster_gpus / report.trace_gpus))
    rng = np.random.default_rng(seed)
    drawn = np.sort(rng.integers(0, len(rows), size=count))
    out = rows.take(drawn)
    gap = float(np.ptp(rows.submit_s)) / len(rows)
    submit = out.submit_s + rng.uniform(0.0, gap, size=count)
    copies = _copy_numbers(drawn)
    ids = np.array([f"{i}.{c}" for i, c in zip(out.ids, copies, strict=True)], dtype=object)
    order = np.argsort(submit, kind="stable")
    resampled = _Rows(
        **{**{n: getattr(out, n) for n in out.__dataclass_fields__}, "ids": ids, "submit_s": submit}
    )
    return resampled.take(order)


def _copy_numbers(drawn: npt.NDArray[np.int64]) -> npt.NDArray[np.int64]:
    """For sorted draws, 0 for the first draw of a row, 1 for its second, ...: ids stay unique."""
    starts = np.flatnonzero(np.concatenate(([True], drawn[1:] != drawn[:-1])))
    first_of_run = np.repeat(starts, np.diff(np.append(starts, drawn.size)))
    copies: npt.NDArray[np.int64] = np.arange(drawn.size, dtype=np.int64) - first_of_run
    return copies


def _time_factor(rows: _Rows, report: ReplayReport, options: ReplayOptions) -> float:
    """The factor on inter-arrival gaps: to reach ``load``, to keep the trace's load, or 1."""
    if options.load is None:
        if options.scale == "rate" and report.trace_gpus is not None:
            return report.trace_gpus / report.cluster_gpus
        return 1.0
    span = float(np.ptp(rows.submit_s)) if len(rows) else 0.0
    recorded = _load(rows.gpu_milli * rows.tasks, rows.duration_s, rows.submit_s, report.cluster_gpus)
    if recorded is None or span <= 0:
        raise ReplayError(
            "load",
            f"{options.load}: the replayed jobs must arrive at two or more distinct times, "
            f"got {len(rows)} job(s) over {span} s",
        )
    return recorded / options.load


def _load(
    gpu_milli: npt.NDArray[np.int64],
    duration_s: npt.NDArray[np.float64],
    submit_s: npt.NDArray[np.float64],
    cluster_gpus: int,
) -> float | None:
    """Offered load, as :func:`loadmaster.workload.offered_load` computes it, on arrays."""
    span = float(np.ptp(submit_s)) if submit_s.size else 0.0
    if span <= 0 or cluster_gpus < 1:
        return None
    gpu_s = math.fsum((gpu_milli / MILLI_PER_GPU * duration_s).tolist())
    return gpu_s / (cluster_gpus * span)


def _jobs(rows: _Rows, submit_s: npt.NDArray[np.float64], options: ReplayOptions) -> list[TraceJob]:
    ids = _unique_ids(rows.ids)
    requests: dict[tuple[int, int, int, int], TaskRequest] = {}
    jobs = []
    # Columns as lists once: indexing a numpy array per cell costs more than the rest of a row.
    keys = zip(
        rows.gpu_milli.tolist(),
        rows.cpu_milli.tolist(),
        rows.memory_mib.tolist(),
        rows.gpu_memory_mib.tolist(),
        strict=True,
    )
    columns = zip(
        ids,
        keys,
        rows.duration_s.tolist(),
        rows.limit_s.tolist(),
        rows.users.tolist(),
        rows.groups.tolist(),
        submit_s.tolist(),
        rows.tasks.tolist(),
        rows.queues.tolist(),
        strict=True,
    )
    for job_id, key, duration, recorded, user, group, submit, tasks, queue in columns:
        request = requests.get(key) or requests.setdefault(key, TaskRequest(*key))
        limit = recorded
        if options.ignore_time_limits or not (math.isfinite(limit) and limit > 0):
            limit = duration * options.time_limit_factor
        job = Job(
            id=job_id,
            user=str(user or UNKNOWN_USER),
            group=str(group or UNKNOWN_USER),
            submit_s=float(submit),
            tasks=int(tasks),
            request=request,
            time_limit_s=float(limit),
            queue=str(queue or DEFAULT_QUEUE),
            pool=options.pool,
        )
        jobs.append(TraceJob(job, float(duration)))
    return jobs


def _unique_ids(ids: npt.NDArray[np.object_]) -> list[str]:
    """The trace's ids, a repeated one suffixed ``~2``, ``~3``... so that every job id is unique."""
    seen: Counter[str] = Counter()
    out = []
    for raw in ids:
        text = str(raw)
        seen[text] += 1
        out.append(text if seen[text] == 1 else f"{text}~{seen[text]}")
    return out
