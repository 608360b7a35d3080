"""The RLScheduler heuristic table (Zhang et al., SC'20) on Lublin-1, rerun through our simulator.

The point is to validate loadmaster's simulator and order/backfill plugins
against published numbers, so every run goes through :func:`simulate` with a
:class:`Scheduler` built from an ordinary profile; nothing here schedules.

Protocol (data/reference/README.md): 10 sequences of 1,024 consecutive jobs
of ``lublin_256.swf`` (start indices :data:`SEQUENCE_STARTS`), each on an
empty 256-processor machine. Processors = max(SWF field 5, field 8); jobs
with run time 0 are dropped; the requested time is field 9, or the run time
where it is -1 (in Lublin-1 it always is, so estimates are exact). Bounded
slowdown = max(1, (wait + run) / max(run, 10)), averaged over the sequence;
utilisation = sum(run x processors) / ((last start - first submit) x 256).

Machine model: one node of 256 GPU slots, no CPU or memory; a job of N
processors is one task of N whole GPUs, so placement cannot matter and a
placement is one array operation.

The reference simulator (DIR-LAB/deep-batch-scheduler, ``HPCSimPickJobs.py``)
differs from our defaults in five ways, each reproduced by an explicit switch:

* it decides after every single event, and at equal times queues arrivals
  before completions free processors: ``SimOptions(cycle_per_event=True,
  arrivals_first=True)``;
* the job it picks as head stays picked until it starts, even if a job with a
  better score arrives meanwhile: the order plugin's ``commit: true``; without
  backfilling the head blocks the queue (``strict: true``);
* its EASY backfilling starts a queued job now only if now + requested time
  is strictly before the head's reservation, never on processors the
  reservation leaves spare (``end_before_reservation: true``), and tries the
  queued jobs first come, first served whatever the policy
  (``submission_order: true``); there is no starvation guard;
* WFP3 and UNICEP read the wait as -1 - submit (``reference_quirk: true``).
"""

from __future__ import annotations

import functools
import json
import multiprocessing
from collections.abc import Iterable, Mapping, Sequence
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadmaster.errors import ConfigError, ModelError
from loadmaster.metrics.summary import bounded_slowdown
from loadmaster.model import Job, Node, NodeTable, ResourceType, TaskRequest, TraceJob
from loadmaster.scheduling import PluginSpec, Profile, Scheduler, build_profile
from loadmaster.sim import SimOptions, simulate
from loadmaster.traces import read_trace

SEQUENCE_STARTS: tuple[int, ...] = (1981, 2756, 4299, 8850, 3316, 2714, 5228, 7762, 4022, 7085)
"""Index of each sequence's first job among the trace's jobs (gym seeding.np_random(1), as published)."""
SEQUENCE_JOBS = 1024
"""Jobs per sequence."""
HELD_OUT_FROM = min(SEQUENCE_STARTS)
"""No evaluation sequence uses a Lublin-1 job before this index: training may."""
MACHINE_PROCS = 256
"""Processors of the Lublin-1 machine (the trace's MaxNodes)."""

POLICIES: Mapping[str, tuple[str, Mapping[str, object]]] = {
    "FCFS": ("fifo", {}),
    "WFP3": ("wfp3", {"reference_quirk": True}),
    "UNICEP": ("unicep", {"reference_quirk": True}),
    "SJF": ("sjf", {}),
    "F1": ("f1", {}),
}
"""Policy name in the published table -> our order plugin and its arguments."""

_REFERENCE_NAMES = {"UNICEP": "UNI"}
"""Where the reference JSON names a policy differently."""

BACKFILL_ARGS: Mapping[str, object] = {
    "mode": "easy",
    "starvation_s": None,
    "estimate": "limit",
    "end_before_reservation": True,
    "submission_order": True,
}


@dataclass(frozen=True)
class Cell:
    """One policy in one mode: bounded slowdown and utilisation of each sequence."""

    policy: str
    backfill: bool
    bsld: tuple[float, ...]
    utilisation: tuple[float, ...]

    @property
    def mean_bsld(self) -> float:
        return float(np.mean(self.bsld))

    @property
    def mean_utilisation(self) -> float:
        return float(np.mean(self.utilisation))


Table = dict[tuple[str, bool], Cell]
"""Cells keyed by (policy, backfill)."""


def machine(procs: int = MACHINE_PROCS) -> NodeTable:
    """One node of ``procs`` GPU slots and nothing else, standing for the HPC machine's processors."""
    slot = ResourceType(
        name="proc", gpu_model="processor", gpu_memory_mib=0, cpu_milli_per_gpu=0, memory_mib_per_gpu=0
    )
    node = Node(
        name="machine",
        pool="default",
        zone="z",
        rack="r",
        resource_type="proc",
        gpus=procs,
        cpu_milli=0,
        memory_mib=0,
    )
    return NodeTable.build([node], {"proc": slot})


def read_jobs(path: Path) -> list[TraceJob]:
    """The trace's jobs in job-number order, by the protocol: run time 0 dropped, -1 request = run time.

    Each job is one task of N whole GPUs; ids are the SWF job numbers,
    zero-padded so that string order is job-number order (ties in every
    policy's key go to the earlier job, as in the reference).
    """
    trace = read_trace(path, "swf")
    numbers = np.array([int(i) for i in trace.column("job_id")])
    submit, run = trace.column("submit_s"), trace.column("duration_s")
    limit, procs = trace.column("time_limit_s"), trace.column("tasks").astype(int)
    width = len(str(numbers.max(initial=0)))
    jobs = []
    for i in np.argsort(numbers, kind="stable"):
        if not run[i] > 0:
            continue
        requested = run[i] if np.isnan(limit[i]) or limit[i] < 0 else limit[i]
        job = Job(
            id=f"{numbers[i]:0{width}d}",
            user="",
            group="",
            submit_s=float(submit[i]),
            tasks=1,
            request=TaskRequest(gpu_milli=int(procs[i]) * 1000),
            time_limit_s=float(requested),
        )
        jobs.append(TraceJob(job, float(run[i])))
    return jobs


def profile(policy: str, backfill: bool) -> Profile:
    """The scheduling profile that runs ``policy`` as the reference does, with or without backfilling."""
    if policy not in POLICIES:
        raise ModelError(f"unknown policy {policy!r}; allowed: {', '.join(POLICIES)}")
    plugin, args = POLICIES[policy]
    return order_profile(
        policy.lower(), PluginSpec(plugin, {**args, "strict": True, "commit": True}), backfill
    )


def learned_profile(checkpoint: str, backfill: bool, explore: float = 0.0) -> Profile:
    """The ``learned`` order in the protocol: it names the head, which blocks until it starts."""
    args = {"checkpoint": checkpoint, "strict": True, "commit": True, "explore": explore}
    return order_profile("learned", PluginSpec("learned", args), backfill)


def order_profile(name: str, order: PluginSpec, backfill: bool) -> Profile:
    """``order`` alone, or with the reference's EASY backfilling."""
    plugins = [order]
    actions = ["allocate"]
    if backfill:
        plugins.append(PluginSpec("backfill", BACKFILL_ARGS))
        actions.append("backfill")
    mode = "backfill" if backfill else "no-backfill"
    return build_profile(f"{name}-{mode}", actions, plugins, source="rlscheduler")


OPTIONS = SimOptions(cycle_per_event=True, arrivals_first=True)
"""The reference's event handling (see the module docstring)."""


@dataclass(frozen=True, slots=True)
class TraceWindows:
    """Training episodes for the learned order in this protocol: windows of ``jobs`` consecutive
    jobs of an SWF trace at seeded random starts, on the empty machine (as RLScheduler trains).

    The protocol's ten sequences cover Lublin-1's jobs from index 1981 on, so
    training on Lublin-1 keeps to the jobs before :data:`HELD_OUT_FROM` (``before``).
    """

    trace: str
    jobs: int = 256
    backfill: bool = False
    before: int | None = None
    """Use only the trace's jobs before this index (None: all)."""
    commits: bool = True
    """The protocol's head stays picked until it starts (read by the trainer)."""

    def episode(self, stream: int, index: int) -> tuple[NodeTable, Sequence[TraceJob], SimOptions]:
        jobs = _jobs(Path(self.trace))[: self.before]
        if len(jobs) <= self.jobs:
            raise ModelError(f"{self.trace}: {len(jobs)} jobs, fewer than a window of {self.jobs}")
        start = int(np.random.default_rng([stream, index]).integers(len(jobs) - self.jobs))
        return machine(), jobs[start : start + self.jobs], OPTIONS

    def profile(self, checkpoint: str, explore: float) -> Profile:
        return learned_profile(checkpoint, self.backfill, explore)


def run_sequence(
    jobs: Sequence[TraceJob], policy: str | Profile, backfill: bool = False, procs: int = MACHINE_PROCS
) -> tuple[float, float]:
    """Mean bounded slowdown and utilisation of one sequence under ``policy`` (a published policy's
    name, run with or without ``backfill``, or a ready profile) on a machine of ``procs`` processors."""
    chosen = profile(policy, backfill) if isinstance(policy, str) else policy
    wide = [j.job.id for j in jobs if j.job.request.gpu_milli > procs * 1000]
    if wide:
        raise ModelError(f"job {wide[0]} asks for more than the machine's {procs} processors")
    table = simulate(machine(procs), Scheduler(chosen), jobs, OPTIONS).jobs
    if np.isnan(table.start_s).any():
        raise ModelError(f"{chosen.name}: {int(np.isnan(table.start_s).sum())} job(s) never started")
    bsld = float(np.mean(bounded_slowdown(table.wait_s, table.duration_s)))
    span_s = float(table.start_s.max() - table.submit_s.min())
    utilisation = float(np.sum(table.duration_s * table.gpus) / (span_s * procs))
    return bsld, utilisation


def reproduce(
    path: Path,
    policies: Iterable[str] = POLICIES,
    modes: Iterable[bool] = (False, True),
    starts: Sequence[int] = SEQUENCE_STARTS,
    workers: int = 1,
    *,
    procs: int = MACHINE_PROCS,
) -> Table:
    """Every (policy, backfill) cell of the table, from the trace at ``path``, on ``procs`` processors.

    ``workers`` > 1 runs the cells in that many processes (the runs are
    independent and deterministic, so the table is the same).
    """
    cells = [(policy, backfill) for backfill in modes for policy in policies]
    tasks = [(path, policy, backfill, tuple(starts), procs) for policy, backfill in cells]
    if workers <= 1:
        return {cell: _cell(*task) for cell, task in zip(cells, tasks, strict=True)}
    with ProcessPoolExecutor(workers, mp_context=multiprocessing.get_context("spawn")) as pool:
        return dict(zip(cells, pool.map(_cell, *zip(*tasks, strict=True)), strict=True))


@functools.cache
def _jobs(path: Path) -> list[TraceJob]:
    return read_jobs(path)


def _cell(path: Path, policy: str, backfill: bool, starts: tuple[int, ...], procs: int) -> Cell:
    jobs = _jobs(path)
    runs = [run_sequence(jobs[s : s + SEQUENCE_JOBS], policy, backfill, procs) for s in starts]
    return Cell(policy, backfill, tuple(b for b, _ in runs), tuple(u for _, u in runs))


def learned_cell(
    path: Path,
    checkpoint: str,
    backfill: bool,
    starts: Sequence[int] = SEQUENCE_STARTS,
    procs: int = MACHINE_PROCS,
) -> Cell:
    """The ``learned`` order with ``checkpoint`` on the protocol's sequences, as a table cell."""
    jobs = _jobs(path)
    chosen = learned_profile(checkpoint, backfill)
    runs = [run_sequence(jobs[s : s + SEQUENCE_JOBS], chosen, procs=procs) for s in starts]
    return Cell("learned", backfill, tuple(b for b, _ in runs), tuple(u for _, u in runs))


SHIPPED_CHECKPOINTS: Mapping[bool, str] = {False: "lublin", True: "lublin-backfill"}
"""The shipped checkpoint trained for each mode (backfill or not)."""


def compare_learned(
    path: Path,
    checkpoints: Mapping[bool, str] = SHIPPED_CHECKPOINTS,
    starts: Sequence[int] = SEQUENCE_STARTS,
    *,
    cross: bool = False,
    workers: int = 2,
    policies: Sequence[str] = ("SJF", "F1"),
    procs: int = MACHINE_PROCS,
) -> dict[str, dict[str, float]]:
    """Mode ("no backfill", "backfill") -> mean bounded slowdown of ``learned`` (that mode's
    checkpoint) and of ``policies`` (published heuristics) on the sequences at ``starts``, on
    ``procs`` processors; with ``cross``, also the other mode's checkpoint in this mode
    ("learned (other mode's)")."""
    heuristics = reproduce(path, policies=policies, starts=starts, workers=workers, procs=procs)
    out: dict[str, dict[str, float]] = {}
    for backfill in (False, True):
        row = {"learned": learned_cell(path, checkpoints[backfill], backfill, starts, procs).mean_bsld}
        if cross:
            row["learned (other mode's)"] = learned_cell(
                path, checkpoints[not backfill], backfill, starts, procs
            ).mean_bsld
        row.update({p: heuristics[p, backfill].mean_bsld for p in policies})
        out["backfill" if backfill else "no backfill"] = row
    return out


@dataclass(frozen=True)
class Reference:
    """The published table: per-sequence cells, the published means and the sequence starts."""

    starts: tuple[int, ...]
    cells: Table
    means: Mapping[tuple[str, bool, str], float]
    """(policy, backfill, "bsld" or "utilisation") -> the published mean (from unrounded values)."""
    procs: int | None = None
    """The machine's processors as the entry records them (``MaxProcs``), if it does."""


def read_reference(path: Path, trace: str = "lublin_256.swf") -> Reference:
    """The per-sequence reference values of entry ``trace`` (``rlscheduler_reference_heuristics.json``)."""
    try:
        entries = json.loads(path.read_text())["results"]
    except (OSError, ValueError, KeyError, TypeError) as err:
        raise ConfigError(str(path), "results", f"want the reference JSON's results ({err})") from err
    if trace not in entries:
        raise ConfigError(str(path), f"results.{trace}", f"no such entry; entries: {', '.join(entries)}")
    results = entries[trace]
    starts = tuple(int(s) for s in results["bsld_nobackfill"]["starts"])
    cells: Table = {}
    means: dict[tuple[str, bool, str], float] = {}
    for backfill, mode in ((False, "nobackfill"), (True, "backfill")):
        for policy in POLICIES:
            name = _REFERENCE_NAMES.get(policy, policy)
            bsld, util = results[f"bsld_{mode}"], results[f"util_{mode}"]
            cells[policy, backfill] = Cell(
                policy, backfill, tuple(bsld["per_sequence"][name]), tuple(util["per_sequence"][name])
            )
            means[policy, backfill, "bsld"] = float(bsld["mean"][name])
            means[policy, backfill, "utilisation"] = float(util["mean"][name])
    procs = results.get("MaxProcs")
    return Reference(starts, cells, means, int(procs) if isinstance(procs, int | float) else None)


TOLERANCE = 0.005
"""Half a unit of the second decimal: values closer than this agree to 2 decimals."""


def same_to_2_decimals(ours: float, published: float) -> bool:
    """Whether ``ours`` matches ``published`` to 2 decimals: they differ by at most :data:`TOLERANCE`.

    Comparing the values rounded to 2 decimals instead would fail on a
    rounding edge: the reference file keeps 4 decimals, so a published 0.815
    may stand for 0.81504, which rounds to 0.82, while 0.815 rounds to 0.81.
    """
    return abs(ours - published) <= TOLERANCE
