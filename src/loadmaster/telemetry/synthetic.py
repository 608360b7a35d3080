"""Synthetic GPU telemetry for running jobs, with injectable faults and their ground truth.

:class:`SyntheticTelemetry` turns a :class:`TelemetryPlan` (nodes, jobs on
GPUs, faults) into samples of every field in the schema, as a real cluster
running dcgm-exporter would show them:

- **training steps**: each job repeats steps of a data-loading stall (now and
  then), a compute phase (SM and tensor activity high) and a communication
  phase (NVLink bytes, InfiniBand bytes when the job spans nodes) that starts
  on every rank at once, after the slowest rank finished computing; ranks that
  finished early wait (allocated, low activity).
- **idle allocations** (a job with ``Workload.IDLE``, or an ``IDLE`` fault):
  memory held, activity near zero. **Free GPUs**: idle clocks, idle power.
- memory grows after a job starts and then plateaus; temperature follows the
  last minute of activity; power follows activity; clock-event reasons tell
  idle, power capping and thermal slowdown apart.

Every value is a pure function of (seed, series, time): generating an hour in
one call or in twelve 5-minute chunks gives the same samples, and the demo
can generate "now" as it goes. A sample at ``t`` averages ``[t - interval, t)``,
as DCGM does between two reads.

Faults (:class:`Fault`) keep their ground truth (kind, target GPUs/nodes,
interval) in :attr:`SyntheticTelemetry.truth`; see docs/telemetry.md for what
each looks like in the data.
"""

from __future__ import annotations

import math
import uuid
from collections.abc import Collection, Iterator, Sequence
from dataclasses import dataclass, replace
from enum import StrEnum
from functools import cached_property

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from loadmaster.errors import TelemetryError
from loadmaster.model.job import RunningJob
from loadmaster.model.node import NodeTable
from loadmaster.model.outcome import JobTable
from loadmaster.model.snapshot import ClusterSnapshot
from loadmaster.telemetry.buckets import FloatArray, IntArray
from loadmaster.telemetry.schema import FIELDS, SAMPLE_SCHEMA, Field, Scope, field_code
from loadmaster.telemetry.store import Series

Matrix = npt.NDArray[np.float64]

# NVML clock-event reason bits (nvmlClocksEventReason*), as DCGM_FI_DEV_CLOCKS_EVENT_REASONS reports them.
CLOCKS_GPU_IDLE = 0x1
CLOCKS_SW_POWER_CAP = 0x4
CLOCKS_HW_SLOWDOWN = 0x8
CLOCKS_SW_THERMAL = 0x20
CLOCKS_HW_THERMAL = 0x40


@dataclass(frozen=True)
class GpuModel:
    """What a GPU model looks like in telemetry: its label, memory, power and clock ranges."""

    label: str
    memory_mib: int
    idle_w: float
    tdp_w: float
    max_sm_clock_mhz: float
    idle_sm_clock_mhz: float = 345.0
    nvlink_bytes_s: float = 150e9
    """Peak NVLink bytes per second per direction during an all-reduce."""


GPU_MODELS: dict[str, GpuModel] = {
    "H100": GpuModel("NVIDIA H100 80GB HBM3", 81559, 70.0, 700.0, 1980.0),
    "H200": GpuModel("NVIDIA H200", 143771, 75.0, 700.0, 1980.0),
    "A100": GpuModel("NVIDIA A100-SXM4-80GB", 81920, 55.0, 400.0, 1410.0, 210.0, 120e9),
    "A100-40GB": GpuModel("NVIDIA A100-SXM4-40GB", 40960, 50.0, 400.0, 1410.0, 210.0, 120e9),
    "V100": GpuModel("Tesla V100-SXM2-32GB", 32768, 40.0, 300.0, 1530.0, 135.0, 60e9),
    "A10": GpuModel("NVIDIA A10", 23028, 20.0, 150.0, 1695.0, 210.0, 0.0),
    "L40S": GpuModel("NVIDIA L40S", 46068, 35.0, 350.0, 2520.0, 210.0, 0.0),
}
"""Known models by short name; :func:`gpu_model` also matches a full name that contains one."""


def gpu_model(name: str) -> GpuModel:
    """The model whose short name is ``name`` or appears in it (``"a100-80gb"`` -> A100); else H100-like."""
    upper = name.upper()
    if upper in GPU_MODELS:
        return GPU_MODELS[upper]
    for short in sorted(GPU_MODELS, key=len, reverse=True):
        if short in upper:
            return GPU_MODELS[short]
    base = GPU_MODELS["H100"]
    return GpuModel(name, base.memory_mib, base.idle_w, base.tdp_w, base.max_sm_clock_mhz)


@dataclass(frozen=True)
class NodeSpec:
    """One host: its name (the ``Hostname`` label), GPU count and model, and whether it has InfiniBand."""

    hostname: str
    gpus: int
    gpu_model: str = "H100"
    infiniband: bool = True
    ib_bytes_s: float = 50e9
    """Peak InfiniBand bytes per second per direction of the whole node (8 x 400 Gb/s is 400 GB/s peak;
    all-reduce traffic of one training job reaches a fraction of it)."""


@dataclass(frozen=True, order=True)
class GpuRef:
    """One GPU: its host and index on that host."""

    hostname: str
    index: int

    def __str__(self) -> str:
        return f"{self.hostname}/{self.index}"


class Workload(StrEnum):
    """What a job does with its GPUs."""

    TRAINING = "training"
    """Synchronous data-parallel training: steps of compute then all-reduce."""
    IDLE = "idle"
    """Holds its GPUs and memory but runs nothing (a forgotten notebook)."""


@dataclass(frozen=True)
class JobSpec:
    """A job on GPUs from ``start_s`` to ``end_s`` (seconds on the telemetry clock)."""

    id: str
    user: str
    gpus: tuple[GpuRef, ...]
    start_s: float
    end_s: float
    workload: Workload = Workload.TRAINING
    step_s: float | None = None
    """Seconds per training step without faults; None: drawn from the seed (3-12 s)."""
    memory_fraction: float | None = None
    """Share of GPU memory the job settles at; None: drawn from the seed (0.45-0.9)."""


class FaultKind(StrEnum):
    """What can go wrong; ``Fault.magnitude`` means something different for each (see the table)."""

    STRAGGLER = "straggler"
    """Target GPUs compute ``magnitude`` times slower (default 1.6); peers wait at every sync."""
    COMM = "comm"
    """Target node's link runs at ``magnitude`` of its bandwidth (default 0.15); every third step of a
    job spanning it stalls in communication, and the node's IB bytes drop."""
    THERMAL = "thermal"
    """Target GPUs throttle to ``magnitude`` of their max SM clock (default 0.6), hot, with clock-event
    bits for thermal slowdown; they compute slower, so they straggle too."""
    MEMORY_LEAK = "memory_leak"
    """Target GPUs' memory grows linearly to ``magnitude`` of total (default 0.99) by the end."""
    XID = "xid"
    """Target GPUs report XID ``magnitude`` (default 79: fallen off the bus) during the interval."""
    ECC = "ecc"
    """Single-bit ECC errors on the targets at ``magnitude`` per hour (default 120), and one
    double-bit error at the interval's midpoint."""
    MISSING = "missing"
    """Target GPUs send no samples at all during the interval."""
    IDLE = "idle"
    """Target GPUs stay allocated (memory held) but do nothing."""


_DEFAULT_MAGNITUDE: dict[FaultKind, float] = {
    FaultKind.STRAGGLER: 1.6,
    FaultKind.COMM: 0.15,
    FaultKind.THERMAL: 0.6,
    FaultKind.MEMORY_LEAK: 0.99,
    FaultKind.XID: 79.0,
    FaultKind.ECC: 120.0,
    FaultKind.MISSING: 0.0,
    FaultKind.IDLE: 0.0,
}


@dataclass(frozen=True)
class Fault:
    """An injected fault and its ground truth: kind, targets (GPUs and/or whole nodes), interval."""

    kind: FaultKind
    start_s: float
    end_s: float
    gpus: tuple[GpuRef, ...] = ()
    nodes: tuple[str, ...] = ()
    magnitude: float | None = None
    """Kind-specific strength (see :class:`FaultKind`); None: the kind's default."""

    @property
    def strength(self) -> float:
        """``magnitude``, or the kind's default."""
        return _DEFAULT_MAGNITUDE[self.kind] if self.magnitude is None else self.magnitude


@dataclass(frozen=True)
class TelemetryPlan:
    """Everything the generator needs: hosts, jobs on their GPUs, faults and a seed."""

    nodes: tuple[NodeSpec, ...]
    jobs: tuple[JobSpec, ...] = ()
    faults: tuple[Fault, ...] = ()
    seed: int = 0


@dataclass(frozen=True)
class Telemetry:
    """Generated telemetry: series (GPUs, then nodes), samples in SAMPLE_SCHEMA and the injected faults."""

    series: list[Series]
    samples: pa.Table
    truth: tuple[Fault, ...]


# ---------------------------------------------------------------------------- randomness as a hash


def _mix(x: npt.NDArray[np.uint64]) -> npt.NDArray[np.uint64]:
    """splitmix64's finaliser: a bijective scramble of 64-bit keys."""
    with np.errstate(over="ignore"):
        x = (x ^ (x >> np.uint64(30))) * np.uint64(0xBF58476D1CE4E5B9)
        x = (x ^ (x >> np.uint64(27))) * np.uint64(0x94D049BB133111EB)
        return x ^ (x >> np.uint64(31))


def _uniform(seed: int, stream: int, a: npt.ArrayLike, b: npt.ArrayLike = 0) -> FloatArray:
    """Uniform [0, 1) numbers that depend only on (seed, stream, a, b), elementwise."""
    with np.errstate(over="ignore"):
        key = np.asarray(a, dtype=np.int64).astype(np.uint64) * np.uint64(0x9E3779B97F4A7C15)
        key = _mix(key ^ (np.asarray(b, dtype=np.int64).astype(np.uint64) + np.uint64(0x632BE59BD9B4E019)))
        key = _mix(key ^ np.uint64((seed * 1_000_003 + stream) & 0xFFFFFFFFFFFFFFFF))
    return (key >> np.uint64(11)).astype(np.float64) * (1.0 / (1 << 53))


# ---------------------------------------------------------------------------- one job's step schedule


@dataclass(frozen=True)
class _Schedule:
    """A training job's steps: start times (K + 1 edges), and per step the stall, per-rank compute,
    the slowest compute and the communication time. Ranks are the job's GPUs in order."""

    edges: FloatArray
    stall: FloatArray
    compute: Matrix
    slowest: FloatArray
    comm: FloatArray

    @cached_property
    def _sums(self) -> tuple[FloatArray, Matrix, FloatArray]:
        """Running totals of stall, compute and comm before each step, made once per schedule."""
        cs = np.concatenate(([0.0], np.cumsum(self.stall)))
        cm = np.concatenate(([0.0], np.cumsum(self.comm)))
        cc = np.concatenate((np.zeros((self.compute.shape[0], 1)), np.cumsum(self.compute, axis=1)), axis=1)
        return cs, cc, cm

    def cumulative(self, x: FloatArray) -> tuple[Matrix, Matrix, Matrix]:
        """Seconds of (stall, compute per rank, comm) since the job started, at each time in ``x``.

        ``compute`` has one row per rank, or a single row shared by every rank when no fault sets
        a rank apart (the caller broadcasts it).
        """
        k = np.clip(np.searchsorted(self.edges, x, side="right") - 1, 0, self.stall.size - 1)
        off = np.clip(x - self.edges[0], 0.0, None) - (self.edges[k] - self.edges[0])
        off = np.minimum(off, self.edges[k + 1] - self.edges[k])
        cs, cc, cm = self._sums
        stall = cs[k] + np.clip(off, 0.0, self.stall[k])
        after = off - self.stall[k]
        compute = cc[:, k] + np.clip(after[None, :], 0.0, self.compute[:, k])
        comm = cm[k] + np.clip(after - self.slowest[k], 0.0, self.comm[k])
        return stall, compute, comm


@dataclass(frozen=True)
class _JobParams:
    index: int
    spec: JobSpec
    rows: IntArray
    """Rows (GPU series ids) of the job's GPUs, in rank order."""
    step_s: float
    compute_share: float
    tensor_share: float
    memory_fraction: float
    ramp_s: float


# ---------------------------------------------------------------------------- the generator


class SyntheticTelemetry:
    """Deterministic per-GPU telemetry for a :class:`TelemetryPlan`.

    Series ids: GPUs first (nodes in plan order, GPUs by index), then one
    node-scope series per host (InfiniBand fields). ``generate(start_s,
    end_s, interval_s)`` samples every ``interval_s`` in ``(start_s, end_s]``.
    """

    def __init__(self, plan: TelemetryPlan) -> None:
        _validate(plan)
        self.plan = plan
        self.gpus: list[GpuRef] = [GpuRef(n.hostname, i) for n in plan.nodes for i in range(n.gpus)]
        self._row = {g: i for i, g in enumerate(self.gpus)}
        self._node_of_row = np.array(
            [k for k, n in enumerate(plan.nodes) for _ in range(n.gpus)], dtype=np.int64
        )
        self._models = [gpu_model(plan.nodes[k].gpu_model) for k in self._node_of_row]
        self._jobs = [self._params(i, job) for i, job in enumerate(plan.jobs)]
        self._starts = [job.start_s for job in plan.jobs]
        self._ends = [job.end_s for job in plan.jobs]
        self._bounds: tuple[FloatArray, FloatArray] | None = None
        self._schedules: dict[int, _Schedule] = {}

    @property
    def truth(self) -> tuple[Fault, ...]:
        """The injected faults: kind, targets and interval of each."""
        return self.plan.faults

    def fault_gpus(self, fault: Fault) -> list[GpuRef]:
        """Every GPU a fault touches: its GPUs plus all GPUs of its nodes."""
        hosts = set(fault.nodes)
        return sorted({*fault.gpus, *(g for g in self.gpus if g.hostname in hosts)})

    def series(self, at_s: float | None = None) -> list[Series]:
        """Every series with its labels; GPUs carry the job and user running on them at ``at_s``."""
        running: dict[int, JobSpec] = {}
        if at_s is not None:
            for job in self._jobs:
                if job.spec.start_s <= at_s < job.spec.end_s:
                    running.update({int(r): job.spec for r in job.rows})
        out = [self.gpu_series(row, running.get(row)) for row in range(len(self.gpus))]
        base = len(self.gpus)
        out += [
            Series(base + k, Scope.NODE.value, {"Hostname": n.hostname})
            for k, n in enumerate(self.plan.nodes)
        ]
        return out

    def generate(self, start_s: float, end_s: float, interval_s: float = 1.0) -> Telemetry:
        """Samples at ``start_s + interval_s, ...`` up to ``end_s``; labels as of ``end_s``."""
        return Telemetry(self.series(end_s), self.samples(start_s, end_s, interval_s), self.truth)

    def chunks(
        self, start_s: float, end_s: float, interval_s: float = 1.0, chunk_s: float = 300.0
    ) -> Iterator[pa.Table]:
        """The same samples as :meth:`generate`, a chunk of ``chunk_s`` at a time (bounded memory)."""
        ticks = max(1, round(chunk_s / interval_s))
        total = math.floor((end_s - start_s) / interval_s + 1e-9)
        for first in range(0, total, ticks):
            lo = start_s + first * interval_s
            yield self.samples(lo, lo + min(ticks, total - first) * interval_s, interval_s)

    def samples(
        self, start_s: float, end_s: float, interval_s: float = 1.0, fields: Collection[Field] | None = None
    ) -> pa.Table:
        """Samples only (see :meth:`generate`), in SAMPLE_SCHEMA, ordered by field, series, time;
        only ``fields`` when given (default: every field of the schema)."""
        if not interval_s > 0 or end_s < start_s:
            raise TelemetryError(
                f"synthetic telemetry needs interval_s > 0 and start_s <= end_s, "
                f"got interval_s={interval_s!r}, start_s={start_s!r}, end_s={end_s!r}"
            )
        count = math.floor((end_s - start_s) / interval_s + 1e-9)
        times = start_s + interval_s * np.arange(1, count + 1, dtype=np.float64)
        values = _Frame(self, times, interval_s).values()
        present = self._present(times)
        parts = []
        for f, matrix in values.items():
            if fields is not None and f not in fields:
                continue
            rows = present if f.scope is Scope.GPU else np.ones(matrix.shape, dtype=bool)
            base = 0 if f.scope is Scope.GPU else len(self.gpus)
            series_idx, tick_idx = np.nonzero(rows)
            parts.append(
                (
                    times[tick_idx],
                    (series_idx + base).astype(np.int32),
                    np.full(series_idx.size, field_code(f), dtype=np.int32),
                    matrix[rows],
                )
            )
        columns = [np.concatenate([p[i] for p in parts]) for i in range(4)]
        return pa.Table.from_arrays([pa.array(c) for c in columns], schema=SAMPLE_SCHEMA)

    # -- helpers used by _Frame

    def schedule(self, job: _JobParams, until_s: float) -> _Schedule:
        """The job's steps up to ``until_s`` (a prefix of any longer schedule: cached, extended)."""
        cached = self._schedules.get(job.index)
        if cached is not None and cached.edges[-1] >= min(until_s, job.spec.end_s):
            return cached
        # Built ahead (as far again as the job has run, at least 10 minutes) so that a caller moving
        # forward sample by sample rebuilds it a logarithmic number of times, not once per sample.
        ahead = until_s + max(until_s - job.spec.start_s, 600.0)
        made = _build_schedule(self, job, ahead)
        self._schedules[job.index] = made
        return made

    def faults_of(self, kind: FaultKind) -> list[tuple[Fault, IntArray]]:
        """The plan's faults of one kind with the rows of their target GPUs."""
        return self._fault_rows.get(kind, [])

    @cached_property
    def _fault_rows(self) -> dict[FaultKind, list[tuple[Fault, IntArray]]]:
        out: dict[FaultKind, list[tuple[Fault, IntArray]]] = {}
        for f in self.plan.faults:
            rows = np.array([self._row[g] for g in self.fault_gpus(f)], dtype=np.int64)
            out.setdefault(f.kind, []).append((f, rows))
        return out

    @property
    def jobs(self) -> list[_JobParams]:
        """Every job: the plan's, then those added by :meth:`add_job`; a job's index is its position."""
        return self._jobs

    def jobs_between(self, lo_s: float, hi_s: float) -> list[_JobParams]:
        """The jobs whose run overlaps ``[lo_s, hi_s]``, in index order."""
        if self._bounds is None:
            self._bounds = (np.array(self._starts, dtype=np.float64), np.array(self._ends, dtype=np.float64))
        starts, ends = self._bounds
        return [self._jobs[i] for i in np.flatnonzero((starts <= hi_s) & (ends >= lo_s))]

    def add_job(self, job: JobSpec) -> int:
        """Add a job after construction (a live cluster); return its index, which keeps its draws stable.

        Checked like a plan's job, except for overlap: the caller (a simulator) keeps two jobs from
        holding one GPU at once. Samples already generated for times before ``job.start_s`` stay valid.
        """
        _validate_job(job, self._row.keys(), f"add_job({job.id})")
        params = self._params(len(self._jobs), job)
        self._jobs.append(params)
        self._starts.append(job.start_s)
        self._ends.append(job.end_s)
        self._bounds = None
        return params.index

    def end_job(self, index: int, end_s: float) -> None:
        """End job ``index`` at ``end_s`` (earlier than planned: preempted, or an open-ended allocation)."""
        params = self._jobs[index]
        if not end_s > params.spec.start_s:
            raise TelemetryError(
                f"end_job({params.spec.id}): end_s {end_s} must be after {params.spec.start_s}"
            )
        self._jobs[index] = replace(params, spec=replace(params.spec, end_s=end_s))
        self._ends[index] = end_s
        self._bounds = None

    @cached_property
    def models(self) -> dict[str, Matrix]:
        """Per-GPU model constants as columns (shape (gpus, 1)) for broadcasting."""
        names = ("memory_mib", "idle_w", "tdp_w", "max_sm_clock_mhz", "idle_sm_clock_mhz", "nvlink_bytes_s")
        return {n: np.array([[getattr(m, n)] for m in self._models], dtype=np.float64) for n in names}

    @property
    def node_of_row(self) -> IntArray:
        return self._node_of_row

    def _present(self, times: FloatArray) -> npt.NDArray[np.bool_]:
        present = np.ones((len(self.gpus), times.size), dtype=bool)
        for fault, rows in self.faults_of(FaultKind.MISSING):
            inside = (times > fault.start_s) & (times <= fault.end_s)
            present[np.ix_(rows, inside)] = False
        return present

    def gpu_series(self, row: int, job: JobSpec | None) -> Series:
        """GPU ``row``'s series, labelled with ``job``'s id and user when it runs one."""
        gpu = self.gpus[row]
        labels = {
            "gpu": str(gpu.index),
            "UUID": gpu_uuid(gpu),
            "device": f"nvidia{gpu.index}",
            "modelName": self._models[row].label,
            "Hostname": gpu.hostname,
        }
        if job is not None:
            labels |= {"job": job.id, "user": job.user}
        return Series(row, Scope.GPU.value, labels)

    def _params(self, index: int, job: JobSpec) -> _JobParams:
        u = _uniform(self.plan.seed, 1, index, np.arange(5))
        return _JobParams(
            index=index,
            spec=job,
            rows=np.array([self._row[g] for g in job.gpus], dtype=np.int64),
            step_s=job.step_s if job.step_s is not None else 3.0 + 9.0 * float(u[0]),
            compute_share=0.65 + 0.2 * float(u[1]),
            tensor_share=0.35 + 0.4 * float(u[2]),
            memory_fraction=job.memory_fraction
            if job.memory_fraction is not None
            else 0.45 + 0.45 * float(u[3]),
            ramp_s=30.0 + 90.0 * float(u[4]),
        )


def gpu_uuid(gpu: GpuRef) -> str:
    """A stable UUID for a GPU, in NVIDIA's ``GPU-xxxxxxxx-...`` form, from its host and index."""
    return f"GPU-{uuid.uuid5(uuid.NAMESPACE_DNS, f'{gpu.hostname}.gpu{gpu.index}.loadmaster')}"


_STALL_CHANCE = 0.05
"""Chance that a step starts with a data-loading stall."""
_COMM_STALL_EVERY = 3
"""Under a COMM fault every third step waits on the degraded link."""


def _build_schedule(gen: SyntheticTelemetry, job: _JobParams, until_s: float) -> _Schedule:
    """Steps from the job's start until ``until_s``; step k depends only on k and the faults at its start."""
    spec = job.spec
    horizon = min(until_s, spec.end_s)
    n_gpus = job.rows.size
    capacity = max(1, math.ceil((horizon - spec.start_s) / (0.9 * job.step_s)) + 2)
    k = np.arange(capacity)
    seed = gen.plan.seed
    stall = np.where(
        _uniform(seed, 2, job.index, k) < _STALL_CHANCE,
        job.step_s * (0.5 + 2.5 * _uniform(seed, 3, job.index, k)),
        0.0,
    )
    jitter = 1.0 + 0.06 * (_uniform(seed, 4, job.index, k) - 0.5)
    base = job.step_s * job.compute_share * jitter
    comm = np.full(capacity, job.step_s * (1.0 - job.compute_share))
    nominal = spec.start_s + np.concatenate(([0.0], np.cumsum(stall + base + comm)))[:-1]
    # Fault membership is decided on the nominal step start: close enough, and keeps steps independent.
    slowed = []
    for kind in (FaultKind.STRAGGLER, FaultKind.THERMAL):
        for fault, rows in gen.faults_of(kind):
            ranks = np.flatnonzero(np.isin(job.rows, rows))
            inside = (nominal >= fault.start_s) & (nominal < fault.end_s)
            if ranks.size and inside.any():
                slowed.append(
                    (ranks, inside, fault.strength if kind is FaultKind.STRAGGLER else 1.0 / fault.strength)
                )
    # One row shared by all ranks unless a fault sets some apart: a 64-GPU job's day of steps stays small.
    compute = np.broadcast_to(base, (n_gpus, capacity)).copy() if slowed else base[None, :]
    for ranks, inside, slowdown in slowed:
        compute[np.ix_(ranks, inside)] *= slowdown
    hosts = {gen.plan.nodes[gen.node_of_row[r]].hostname for r in job.rows}
    for fault in (f for f in gen.plan.faults if f.kind is FaultKind.COMM):
        if len(hosts) > 1 and hosts & set(fault.nodes):
            hit = (nominal >= fault.start_s) & (nominal < fault.end_s) & (k % _COMM_STALL_EVERY == 0)
            comm[hit] /= fault.strength
    slowest = compute.max(axis=0)
    edges = spec.start_s + np.concatenate(([0.0], np.cumsum(stall + slowest + comm)))
    last = int(np.searchsorted(edges, horizon, side="left"))
    last = min(max(last, 1), capacity)
    return _Schedule(edges[: last + 1], stall[:last], compute[:, :last], slowest[:last], comm[:last])


# ---------------------------------------------------------------------------- one window of samples


_TEMP_WINDOW_S = 60.0
"""Temperature follows the mean activity of the last minute."""


class _Frame:
    """The activity of every GPU over one window, and the fields derived from it."""

    def __init__(self, gen: SyntheticTelemetry, times: FloatArray, interval_s: float) -> None:
        self.gen = gen
        self.times = times
        self.dt = interval_s
        shape = (len(gen.gpus), times.size)
        self.alloc = np.zeros(shape)
        self.stall = np.zeros(shape)
        self.compute = np.zeros(shape)
        self.comm = np.zeros(shape)
        self.heat = np.zeros(shape)
        self.memory_mib = np.zeros(shape)
        self.tensor_share = np.zeros(shape)
        self.nvlink = np.zeros(shape)
        self.node_comm = np.zeros((len(gen.plan.nodes), times.size))
        if times.size:
            lo = float(times[0]) - max(interval_s, _TEMP_WINDOW_S)
            for job in gen.jobs_between(lo, float(times[-1])):
                self._add_job(job)
        self._apply_idle()

    def _add_job(self, job: _JobParams) -> None:
        spec, t, rows = job.spec, self.times, job.rows
        if spec.end_s <= t[0] - max(self.dt, _TEMP_WINDOW_S) or spec.start_s >= t[-1]:
            return
        self.alloc[rows] += _overlap(t - self.dt, t, spec.start_s, spec.end_s) / self.dt
        inside = (t > spec.start_s) & (t - self.dt < spec.end_s)
        self.memory_mib[np.ix_(rows, inside)] = self._memory(job, t[inside])
        self.tensor_share[rows] = np.where(inside, job.tensor_share, self.tensor_share[rows])
        if spec.workload is Workload.IDLE:
            return
        sched = self.gen.schedule(job, float(t[-1]))
        s1, c1, m1 = sched.cumulative(t)
        s0, c0, m0 = sched.cumulative(t - self.dt)
        self.stall[rows] += (s1 - s0) / self.dt
        self.compute[rows] += (c1 - c0) / self.dt
        comm = (m1 - m0) / self.dt
        self.comm[rows] += comm
        _, cw, _ = sched.cumulative(t - _TEMP_WINDOW_S)
        self.heat[rows] += (c1 - cw) / _TEMP_WINDOW_S
        nodes = self.gen.node_of_row[rows]
        per_node = np.bincount(nodes, minlength=len(self.gen.plan.nodes))
        shares_node = per_node[nodes] > 1
        self.nvlink[rows[shares_node]] += comm
        if np.count_nonzero(per_node) > 1:
            np.add.at(self.node_comm, nodes, comm / per_node[nodes][:, None])

    def _memory(self, job: _JobParams, t: FloatArray) -> Matrix:
        total = self.gen.models["memory_mib"][job.rows]
        age = np.clip(t - job.spec.start_s, 0.0, None)
        plateau = 600.0 + (total * job.memory_fraction - 600.0) * (1.0 - np.exp(-age / job.ramp_s))
        ripple = 1.0 + 0.01 * np.sin(2 * np.pi * t / job.step_s)
        used = plateau * ripple
        for fault, rows in self.gen.faults_of(FaultKind.MEMORY_LEAK):
            ranks = np.flatnonzero(np.isin(job.rows, rows))
            grow = np.clip((t - fault.start_s) / (fault.end_s - fault.start_s), 0.0, 1.0)
            grow = np.where(t < fault.end_s, grow, 0.0)
            target = total[ranks] * fault.strength
            used[ranks] = np.maximum(used[ranks], used[ranks] + (target - used[ranks]) * grow)
        return np.asarray(np.minimum(used, total), dtype=np.float64)

    def _apply_idle(self) -> None:
        for fault, rows in self.gen.faults_of(FaultKind.IDLE):
            inside = (self.times > fault.start_s) & (self.times <= fault.end_s)
            for arr in (self.stall, self.compute, self.comm, self.heat, self.nvlink):
                arr[np.ix_(rows, inside)] = 0.0

    def _window(self, kind: FaultKind) -> list[tuple[Fault, IntArray, npt.NDArray[np.bool_]]]:
        t = self.times
        return [(f, rows, (t > f.start_s) & (t <= f.end_s)) for f, rows in self.gen.faults_of(kind)]

    def values(self) -> dict[Field, Matrix]:
        """Every field's values, GPU fields (gpus x times) and node fields (nodes x times)."""
        gen, m = self.gen, self.gen.models
        rows = np.arange(len(gen.gpus))[:, None]
        noise = 2.0 * _uniform(gen.plan.seed, 10, rows, np.rint(self.times / self.dt)[None, :]) - 1.0
        busy = np.clip(self.compute + self.comm, 0.0, 1.0)
        wait = np.clip(self.alloc - busy - self.stall, 0.0, 1.0)
        load = 0.85 * self.compute + 0.3 * self.comm + 0.1 * self.stall + 0.12 * wait
        power = m["idle_w"] + (m["tdp_w"] - m["idle_w"]) * load * (1.0 + 0.03 * noise)
        active = busy + self.stall > 0.01
        reasons = np.where(active, 0, CLOCKS_GPU_IDLE)
        capped = power > 0.95 * m["tdp_w"]
        reasons = reasons | np.where(capped, CLOCKS_SW_POWER_CAP, 0)
        power = np.minimum(power, 0.95 * m["tdp_w"] + 5.0 * noise)
        clock = np.where(active, m["max_sm_clock_mhz"], m["idle_sm_clock_mhz"])
        clock = np.where(capped, clock * 0.97, clock)
        temp = 31.0 + 2.0 * (m["tdp_w"] / 700.0) + 48.0 * np.clip(self.heat, 0.0, 1.0) + 0.7 * noise
        for fault, targets, inside in self._window(FaultKind.THERMAL):
            cells = np.ix_(targets, inside)
            clock[cells] = m["max_sm_clock_mhz"][targets] * fault.strength
            temp[cells] = 88.0 + 2.0 * noise[cells]
            power[cells] = np.minimum(power[cells], 0.7 * m["tdp_w"][targets])
            reasons[cells] |= CLOCKS_SW_THERMAL | CLOCKS_HW_THERMAL | CLOCKS_HW_SLOWDOWN
        total = m["memory_mib"]
        used = np.where(self.alloc > 0, self.memory_mib, 0.0)
        pcie_rx = 2.5e9 * self.stall + 3e8 * self.compute + 2e6 * (1.0 + noise)
        pcie_tx = 8e7 * self.compute + 1e6 * (1.0 + noise)
        nvlink = m["nvlink_bytes_s"] * self.nvlink * (1.0 + 0.05 * noise)
        out: dict[str, Matrix] = {
            "SM_CLOCK": np.rint(clock),
            "CLOCKS_EVENT_REASONS": reasons.astype(np.float64),
            "GPU_TEMP": np.rint(temp),
            "POWER_USAGE": np.round(power, 3),
            "GPU_UTIL": np.rint(
                np.clip(100.0 * (busy + 0.05 * self.stall) + 1.5 * noise * (busy > 0), 0, 100)
            ),
            "MEM_COPY_UTIL": np.rint(np.clip(100.0 * (0.35 * self.compute + 0.1 * self.comm), 0, 100)),
            "XID_ERRORS": self._xid(),
            "FB_USED": np.rint(used),
            "FB_FREE": np.rint(np.maximum(total - used - 0.01 * total, 0.0)),
            "ECC_SBE_VOL_TOTAL": self._ecc(single=True),
            "ECC_DBE_VOL_TOTAL": self._ecc(single=False),
            "GR_ENGINE_ACTIVE": np.clip(0.99 * self.compute + 0.9 * self.comm + 0.05 * self.stall, 0, 1),
            "SM_ACTIVE": np.clip(0.93 * self.compute + 0.12 * self.comm + 0.01 * noise * (busy > 0), 0, 1),
            "PIPE_TENSOR_ACTIVE": np.clip(self.tensor_share * self.compute, 0, 1),
            "DRAM_ACTIVE": np.clip(0.4 * self.compute + 0.15 * self.comm, 0, 1),
            "PCIE_TX_BYTES": np.maximum(pcie_tx, 0.0),
            "PCIE_RX_BYTES": np.maximum(pcie_rx, 0.0),
            "NVLINK_TX_BYTES": nvlink,
            "NVLINK_RX_BYTES": nvlink,
        }
        out |= self._infiniband()
        by_key = {f.key: f for f in FIELDS}
        return {by_key[k]: np.asarray(v, dtype=np.float64) for k, v in out.items()}

    def _xid(self) -> Matrix:
        xid = np.zeros(self.alloc.shape)
        for fault, targets, inside in self._window(FaultKind.XID):
            xid[np.ix_(targets, inside)] = fault.strength
        return xid

    def _ecc(self, single: bool) -> Matrix:
        """Cumulative ECC errors: events at times drawn per fault and GPU, counted up to each sample."""
        count = np.zeros(self.alloc.shape)
        for index, (fault, targets, _) in enumerate(self._window(FaultKind.ECC)):
            span = fault.end_s - fault.start_s
            for target in targets:
                if single:
                    n = max(1, round(fault.strength * span / 3600.0))
                    u = np.sort(_uniform(self.gen.plan.seed, 20 + index, int(target), np.arange(n)))
                    events = fault.start_s + span * u
                else:
                    events = np.array([fault.start_s + span / 2.0])
                count[target] += np.searchsorted(events, self.times, side="left")
        return count

    def _infiniband(self) -> dict[str, Matrix]:
        nodes = self.gen.plan.nodes
        peak = np.array([[n.ib_bytes_s if n.infiniband else 0.0] for n in nodes])
        share = np.ones(self.node_comm.shape)
        for fault in (f for f in self.gen.plan.faults if f.kind is FaultKind.COMM):
            inside = (self.times > fault.start_s) & (self.times <= fault.end_s)
            hit = np.array([k for k, n in enumerate(nodes) if n.hostname in fault.nodes], dtype=np.int64)
            share[np.ix_(hit, inside)] = fault.strength
        node_rows = np.arange(len(nodes))[:, None]
        noise = _uniform(self.gen.plan.seed, 11, node_rows, np.rint(self.times / self.dt)[None, :])
        base = peak * self.node_comm * share
        return {
            "NODE_IB_TX_BYTES": base * (0.97 + 0.06 * noise) + 1e5,
            "NODE_IB_RX_BYTES": base * (1.03 - 0.06 * noise) + 1e5,
        }


def _overlap(lo: FloatArray, hi: FloatArray, start: float, end: float) -> FloatArray:
    return np.asarray(np.clip(np.minimum(hi, end) - np.maximum(lo, start), 0.0, None), dtype=np.float64)


# ---------------------------------------------------------------------------- validation and adapters


def _validate_job(job: JobSpec, known: Collection[GpuRef], where: str) -> None:
    if not job.end_s > job.start_s:
        raise TelemetryError(f"{where}: end_s {job.end_s} must be after start_s {job.start_s}")
    if not job.gpus:
        raise TelemetryError(f"{where}: gpus is empty")
    if job.step_s is not None and not job.step_s > 0:
        raise TelemetryError(f"{where}: step_s must be > 0, got {job.step_s}")
    for gpu in job.gpus:
        if gpu not in known:
            raise TelemetryError(f"{where}: GPU {gpu} is not on any node of the plan")


def _validate(plan: TelemetryPlan) -> None:
    hosts = {n.hostname: n for n in plan.nodes}
    if len(hosts) != len(plan.nodes):
        raise TelemetryError("TelemetryPlan.nodes: hostnames must be unique")
    known = {GpuRef(n.hostname, i) for n in plan.nodes for i in range(n.gpus)}
    used: dict[GpuRef, list[JobSpec]] = {}
    for job in plan.jobs:
        where = f"TelemetryPlan.jobs[{job.id}]"
        _validate_job(job, known, where)
        for gpu in job.gpus:
            for other in used.setdefault(gpu, []):
                if other.start_s < job.end_s and job.start_s < other.end_s:
                    raise TelemetryError(
                        f"{where}: GPU {gpu} is also used by job {other.id} at the same time"
                    )
            used[gpu].append(job)
    for i, fault in enumerate(plan.faults):
        where = f"TelemetryPlan.faults[{i}] ({fault.kind.value})"
        if not fault.end_s > fault.start_s:
            raise TelemetryError(f"{where}: end_s {fault.end_s} must be after start_s {fault.start_s}")
        unknown = [str(g) for g in fault.gpus if g not in known] + [h for h in fault.nodes if h not in hosts]
        if unknown:
            raise TelemetryError(f"{where}: unknown target(s) {', '.join(unknown)}")
        if not fault.gpus and not fault.nodes:
            raise TelemetryError(f"{where}: needs target gpus or nodes")
        if fault.kind in (FaultKind.COMM,) and not fault.nodes:
            raise TelemetryError(f"{where}: a communication fault targets nodes (their links), not GPUs")
        if fault.kind in (FaultKind.STRAGGLER,) and not fault.strength >= 1.0:
            raise TelemetryError(f"{where}: magnitude is a slowdown factor and must be >= 1")
        if fault.kind in (FaultKind.COMM, FaultKind.THERMAL, FaultKind.MEMORY_LEAK) and not (
            0.0 < fault.strength <= 1.0
        ):
            raise TelemetryError(f"{where}: magnitude is a share and must be in (0, 1]")


def plan_from_snapshot(
    snapshot: ClusterSnapshot, until_s: float, faults: Sequence[Fault] = (), seed: int = 0
) -> TelemetryPlan:
    """The running jobs of a snapshot on their exact GPUs, each running until its expected end
    (at most ``until_s``); partly bound gangs are idle allocations."""
    nodes = node_specs(snapshot.nodes)
    jobs = tuple(
        _running_spec(snapshot.nodes, rj, until_s) for rj in snapshot.running if rj.start_s < until_s
    )
    return TelemetryPlan(nodes=nodes, jobs=jobs, faults=tuple(faults), seed=seed)


def plan_from_run(
    nodes: NodeTable, jobs: JobTable, faults: Sequence[Fault] = (), seed: int = 0
) -> TelemetryPlan:
    """The jobs of a simulator run on the nodes it recorded; GPUs on each node are picked lowest-free-first
    at each start (the job table records nodes, not GPU indices), the job's GPUs split evenly over them."""
    index = {n.name: i for i, n in enumerate(nodes.nodes)}
    free_at = [np.zeros(n.gpus) for n in nodes.nodes]
    specs: list[JobSpec] = []
    for j in np.argsort(jobs.start_s, kind="stable"):
        start, end = float(jobs.start_s[j]), float(jobs.end_s[j])
        names = [n for n in str(jobs.node_names[j]).split(",") if n]
        if not (math.isfinite(start) and math.isfinite(end)) or not names or end <= start:
            continue
        per_node = max(1, round(float(jobs.gpus[j]) / len(names)))
        picked: list[GpuRef] = []
        for name in names:
            free = free_at[index[name]]
            choice = np.flatnonzero(free <= start)[:per_node]
            free[choice] = end
            picked += [GpuRef(name, int(g)) for g in choice]
        if picked:
            specs.append(JobSpec(str(jobs.job_id[j]), str(jobs.user[j]), tuple(picked), start, end))
    return TelemetryPlan(nodes=node_specs(nodes), jobs=tuple(specs), faults=tuple(faults), seed=seed)


def node_specs(nodes: NodeTable) -> tuple[NodeSpec, ...]:
    """One :class:`NodeSpec` per node of a table, in order, with its GPU model and interconnect."""
    specs = []
    for node in nodes.nodes:
        rtype = nodes.resource_types.get(node.resource_type)
        model = rtype.gpu_model if rtype is not None else node.resource_type
        infiniband = rtype is not None and rtype.interconnect == "infiniband"
        specs.append(NodeSpec(node.name, node.gpus, model, infiniband))
    return tuple(specs)


def _running_spec(nodes: NodeTable, rj: RunningJob, until_s: float) -> JobSpec:
    gpus = tuple(GpuRef(nodes.nodes[p.node].name, int(g)) for p in rj.placements for g in p.gpu_indices)
    started = len(rj.placements) >= rj.job.tasks
    end = min(rj.expected_end_s, until_s) if rj.job.time_limit_s > 0 else until_s
    workload = Workload.TRAINING if started else Workload.IDLE
    return JobSpec(
        rj.job.id, rj.job.user, tuple(sorted(set(gpus))), rj.start_s, max(end, rj.start_s + 1.0), workload
    )


__all__ = [
    "GPU_MODELS",
    "Fault",
    "FaultKind",
    "GpuModel",
    "GpuRef",
    "JobSpec",
    "NodeSpec",
    "SyntheticTelemetry",
    "Telemetry",
    "TelemetryPlan",
    "Workload",
    "gpu_model",
    "gpu_uuid",
    "node_specs",
    "plan_from_run",
    "plan_from_snapshot",
]
