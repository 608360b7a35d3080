"""Tiresias (NSDI'19) replayed through loadmaster, as its authors' simulator runs it.

The authors' simulator (SymbioticLab/Tiresias ``simulator/run_sim.py``) reads
a job trace and a cluster spec (``num_switch,num_node_p_switch,num_gpu_p_node,
num_cpu_p_node,mem_p_node``) and runs one scheduler. Two are reproduced:

* ``fifo`` (``one_queue_fifo_sim_jobs``): jobs in submission order; the first
  that does not fit blocks the rest; placement by ``--scheme`` (``yarn``
  here: one node for a job of at most a node, else whole free nodes plus one).
  In loadmaster: ``fifo`` (strict) + ``gang`` + ``yarn``.
* ``dlas-gpu`` (``dlas_sim_jobs(gputime=True)``): 2D-LAS with the queue limits
  of ``jobs.py`` (3,250 and 7,200 GPU-seconds: three queues), a job that does
  not fit skipped, lower queues' running jobs preempted for higher queues'
  waiting ones, preempted jobs resuming where they stopped, GPUs counted
  (not placed: that function ignores ``--scheme``). In loadmaster: ``las`` +
  ``gang`` + ``las-preempt``, with ``SimOptions.resume_preempted``; one-GPU
  tasks may go on any node, which is what counting allows.
* ``dlas`` (``dlas_sim_jobs(gputime=False)``): the same by attained seconds
  (1D LAS, the same limits in seconds). In loadmaster: ``las-time`` +
  ``las-count`` + ``gang`` + ``las-preempt`` with ``gpu_time: false``.

Each job of ``num_gpu`` GPUs is a gang of ``num_gpu`` one-GPU tasks. Average JCT
is the mean of end - submit; makespan is the last end less the first submit.
"""

from __future__ import annotations

import csv
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadmaster.errors import ModelError
from loadmaster.model import Job, Node, NodeTable, ResourceType, TaskRequest, TraceJob
from loadmaster.scheduling import PluginSpec, Profile, Scheduler, build_profile
from loadmaster.sim import SimOptions, simulate
from loadmaster.traces import read_trace

SPEC_FIELDS = ("num_switch", "num_node_p_switch", "num_gpu_p_node", "num_cpu_p_node", "mem_p_node")
"""Columns of a Tiresias cluster spec (``parse_cluster_spec``)."""

POLICIES = ("fifo", "dlas-gpu", "dlas")
"""The authors' schedulers reproduced here, by their ``--schedule`` names."""


def cluster(path: Path) -> NodeTable:
    """The nodes of a Tiresias cluster spec: switches x nodes per switch, each with its GPUs.

    CPU and memory are left out: neither reproduced scheduler limits a job by them
    on the shipped specs (``dlas-gpu`` counts GPUs only).
    """
    with path.open(newline="") as handle:
        reader = csv.DictReader(handle)
        rows = list(reader)
        missing = [f for f in SPEC_FIELDS if f not in (reader.fieldnames or ())]
    if missing or len(rows) != 1:
        raise ModelError(
            f"{path}: a Tiresias cluster spec has the header {','.join(SPEC_FIELDS)} and one row"
            f" (missing {missing or 'none'}, {len(rows)} rows)"
        )
    row = rows[0]
    try:
        switches, per_switch, gpus = (int(row[f]) for f in SPEC_FIELDS[:3])
    except ValueError as err:
        raise ModelError(f"{path}: line 2: {err}") from err
    kind = ResourceType("gpu", "tiresias-gpu", 0, 0, 0)
    nodes = [
        Node(f"s{s}n{n}", "default", "z", f"s{s}", "gpu", gpus, 0, 0)
        for s in range(switches)
        for n in range(per_switch)
    ]
    return NodeTable.build(nodes, {"gpu": kind})


def read_jobs(path: Path) -> list[TraceJob]:
    """The trace's jobs, ids zero-padded so that string order is ``job_id`` order (ties as the file)."""
    trace = read_trace(path, "tiresias")
    ids = [int(i) for i in trace.column("job_id")]
    submit, run = trace.column("submit_s"), trace.column("duration_s")
    tasks = trace.column("tasks").astype(int)
    width = len(str(max(ids, default=0)))
    jobs = []
    for i, number in enumerate(ids):
        job = Job(
            id=f"{number:0{width}d}",
            user="",
            group="",
            submit_s=float(submit[i]),
            tasks=int(tasks[i]),
            min_available=int(tasks[i]),
            request=TaskRequest(gpu_milli=1000),
            time_limit_s=float(run[i]),
        )
        jobs.append(TraceJob(job, float(run[i])))
    return jobs


def profile(policy: str) -> Profile:
    """The loadmaster profile that runs the authors' ``policy``; see the module docstring."""
    if policy == "fifo":
        specs = [PluginSpec("fifo", {"strict": True}), PluginSpec("gang", {}), PluginSpec("yarn", {})]
        return build_profile("tiresias-fifo", ["allocate"], specs, source="tiresias")
    if policy == "dlas-gpu":
        specs = [PluginSpec("las", {"tiresias_wake": True})]
        specs += [PluginSpec(n, {}) for n in ("las-count", "gang", "las-preempt")]
        return build_profile("tiresias-dlas-gpu", ["admit", "allocate", "preempt"], specs, source="tiresias")
    if policy == "dlas":
        by_time = {"gpu_time": False}
        specs = [PluginSpec("las-time", {"tiresias_wake": True}), PluginSpec("las-count", by_time)]
        specs += [PluginSpec("gang", {}), PluginSpec("las-preempt", by_time)]
        return build_profile("tiresias-dlas", ["admit", "allocate", "preempt"], specs, source="tiresias")
    raise ModelError(f"unknown Tiresias policy {policy!r}; allowed: {', '.join(POLICIES)}")


@dataclass(frozen=True, slots=True)
class Outcome:
    """Average JCT and makespan of one run, with its preemptions."""

    avg_jct_s: float
    makespan_s: float
    preemptions: int
    jobs: int


def outcome(submit: Sequence[float], end: Sequence[float], preemptions: int) -> Outcome:
    """Average JCT and makespan from each job's submit and end times."""
    s, e = np.asarray(submit, dtype=float), np.asarray(end, dtype=float)
    if np.isnan(e).any():
        raise ModelError(f"{int(np.isnan(e).sum())} jobs never finished")
    return Outcome(float((e - s).mean()), float(e.max() - s.min()), preemptions, len(s))


def replay(trace: Path, spec: Path, policy: str) -> Outcome:
    """Run ``policy`` on ``trace`` and the cluster of ``spec`` through loadmaster's simulator."""
    jobs = read_jobs(trace)
    options = SimOptions(resume_preempted=policy != "fifo")
    table = simulate(cluster(spec), Scheduler(profile(policy)), jobs, options).jobs
    return outcome(list(table.submit_s), list(table.end_s), int(table.preemptions.sum()))


def reference(job_csv: Path) -> Outcome:
    """The same numbers from the authors' simulator's ``job.csv`` (``log.py``)."""
    with job_csv.open(newline="") as handle:
        rows = list(csv.DictReader(handle))
    if not rows or "submit_time" not in rows[0] or "end_time" not in rows[0]:
        raise ModelError(f"{job_csv}: not a Tiresias simulator job.csv (needs submit_time, end_time)")
    return outcome(
        [float(r["submit_time"]) for r in rows],
        [float(r["end_time"]) for r in rows],
        sum(int(r.get("preempt", 0) or 0) for r in rows),
    )


STRESS = {"copies": 8, "spacing_s": 1800, "duration_factor": 10}
"""How the stress trace is derived from ``60_job.csv``: the shipped trace never queues a job on the
shipped clusters (every job starts on arrival under either scheduler), so it cannot tell schedulers
apart. Eight copies, each 1,800 s after the last, with every duration x10 (jobs then cross both
LAS thresholds, queue and are preempted): 480 jobs. Both simulators read the same file."""


def derive_stress(source: Path, target: Path) -> None:
    """Write the stress trace (:data:`STRESS`) of ``source`` (a Tiresias job trace) to ``target``."""
    with source.open(newline="") as handle:
        reader = csv.DictReader(handle)
        fields, rows = list(reader.fieldnames or ()), list(reader)
    missing = {"job_id", "submit_time", "duration"} - set(fields)
    if missing:
        raise ModelError(f"{source}: a Tiresias job trace with {sorted(missing)} is needed")
    size, out = len(rows), []
    for copy in range(STRESS["copies"]):
        for row in rows:
            derived = dict(row)
            derived["job_id"] = str(copy * size + int(row["job_id"]))
            derived["submit_time"] = str(copy * STRESS["spacing_s"] + int(row["submit_time"]))
            derived["duration"] = str(int(row["duration"]) * STRESS["duration_factor"])
            out.append(derived)
    with target.open("w", newline="") as handle:
        writer = csv.DictWriter(handle, fieldnames=fields, lineterminator="\n")
        writer.writeheader()
        writer.writerows(out)
