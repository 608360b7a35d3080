"""Gavel (OSDI'20) replayed through loadmaster's round simulator, as its authors' simulator runs it.

The authors' simulator (stanford-futuredata/gavel
``scheduler/scripts/drivers/simulate_scheduler_with_trace.py``, commit
``c4fa400``) reads a ``.trace``, an oracle throughput file
(``simulation_throughputs.json``) and a cluster ``-c V100:P100:K80`` (one GPU
per server by default) and prints each job's completion time, the average and
the total duration. Reproduced here: ``fifo_perf``, ``max_min_fairness_perf``
and ``finish_time_fairness_perf`` (the heterogeneity-aware policies) with
6-minute rounds. The throughputs are the isolated (``null``) entries of that file,
vendored under ``data/reference/gavel/throughputs.csv``.
"""

from __future__ import annotations

import csv
import re
from dataclasses import dataclass
from pathlib import Path

from loadmaster.errors import ModelError
from loadmaster.model.hetero import HeteroCluster, JobKey, ThroughputTable
from loadmaster.scheduling.plugins.gavel import Face, Fifo, FinishTimeFairness, MaxMinFairness, RoundPolicy
from loadmaster.sim.rounds import RoundOptions, RoundResult, simulate_rounds
from loadmaster.traces.gavel import read_step_jobs

POLICIES = ("fifo_perf", "max_min_fairness_perf", "finish_time_fairness_perf")
"""The authors' ``--policy`` names reproduced (see :func:`round_policy`)."""


def round_policy(policy: str, face: Face = "interior") -> RoundPolicy:
    """loadmaster's round policy for the authors' ``policy``, choosing optima by ``face``."""
    if policy == "fifo_perf":
        return Fifo()
    if policy == "max_min_fairness_perf":
        return MaxMinFairness(face=face)
    if policy == "finish_time_fairness_perf":
        return FinishTimeFairness(face=face)
    raise ModelError(f"Gavel policy {policy!r} is not reproduced; allowed: {', '.join(POLICIES)}")


TABLE_TYPES = ("k80", "p100", "v100")


def read_throughputs(path: Path) -> ThroughputTable:
    """The vendored table (``job_type,scale_factor,k80,p100,v100``, steps/s); errors name the line."""
    table: dict[JobKey, dict[str, float]] = {}
    with path.open(newline="", encoding="utf-8") as handle:
        reader = csv.DictReader(handle)
        header = tuple(reader.fieldnames or ())
        if header[:2] != ("job_type", "scale_factor") or len(header) < 3:
            raise ModelError(
                f"{path}: line 1: header must be job_type,scale_factor,<GPU type>..., got {header}"
            )
        for row in reader:
            line = reader.line_num
            try:
                workers = int(row["scale_factor"])
                rates = {t: float(row[t]) for t in header[2:]}
            except (TypeError, ValueError) as err:
                raise ModelError(f"{path}: line {line}: {err}") from err
            key = (row["job_type"], workers)
            if key in table:
                raise ModelError(f"{path}: line {line}: {key} appears twice")
            table[key] = rates
    return ThroughputTable(table, source=str(path))


@dataclass(frozen=True)
class Outcome:
    """What both simulators report: each job's completion time, the average and the total duration."""

    jct_s: dict[int, float]
    makespan_s: float

    @property
    def avg_jct_s(self) -> float:
        return sum(self.jct_s.values()) / len(self.jct_s) if self.jct_s else 0.0


def replay(
    trace: Path,
    throughputs: Path,
    policy: str,
    cluster: HeteroCluster,
    *,
    options: RoundOptions | None = None,
    face: Face = "interior",
) -> tuple[Outcome, RoundResult]:
    """loadmaster's run of the authors' ``policy`` (their name) on ``trace``."""
    chosen = round_policy(policy, face)
    result = simulate_rounds(
        read_step_jobs(trace), cluster, read_throughputs(throughputs), chosen, options=options
    )
    return Outcome(dict(result.jct_s), result.makespan_s), result


_JOB = re.compile(r"^Job (\d+)(?: \(high priority\))?: ([0-9.]+)$")
_TOTAL = re.compile(r"^Total duration: ([0-9.]+) seconds")


def reference(path: Path) -> Outcome:
    """The authors' simulator's stdout (as committed): per-job ``Job N: JCT`` lines and ``Total duration``."""
    jct: dict[int, float] = {}
    makespan: float | None = None
    for line in path.read_text(encoding="utf-8").splitlines():
        if match := _JOB.match(line.strip()):
            jct[int(match.group(1))] = float(match.group(2))
        elif match := _TOTAL.match(line.strip()):
            makespan = float(match.group(1))
    if makespan is None or not jct:
        raise ModelError(
            f"{path}: no 'Job N: ...' lines or no 'Total duration:' line (not a Gavel simulator log)"
        )
    return Outcome(jct, makespan)
