"""The generator of synthetic GPU telemetry: a plan in, every field of the schema out.

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
from collections.abc import Collection, Iterator
from dataclasses import dataclass, replace
from functools import cached_property

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from loadmaster.errors import TelemetryError
from loadmaster.telemetry.buckets import FloatArray, IntArray
from loadmaster.telemetry.schema import FIELDS, SAMPLE_SCHEMA, Field, Scope, field_code
from loadmaster.telemetry.store import Series
from loadmaster.telemetry.synthetic.plan import (
    CLOCKS_GPU_IDLE,
    CLOCKS_HW_SLOWDOWN,
    CLOCKS_HW_THERMAL,
    CLOCKS_SW_POWER_CAP,
    CLOCKS_SW_THERMAL,
    Fault,
    FaultKind,
    GpuRef,
    PlannedJob,
    TelemetryPlan,
    Workload,
    gpu_model,
    validate_job,
    validate_plan,
)
from loadmaster.telemetry.synthetic.steps import JobParams, Matrix, StepSchedule, uniform


@dataclass(frozen=True)
class Telemetry:
    """Generated telemetry: series (GPUs, then nodes), samples in SAMPLE_SCHEMA and the injected faults."""

    series: list[Series]
    samples: pa.Table
    truth: tuple[Fault, ...]


class SyntheticTelemetry:
    """Deterministic per-GPU telemetry for a :class:`TelemetryPlan`.

    Series ids: GPUs first (nodes in plan order, GPUs by index), then one
    node-scope series per host (InfiniBand fields). ``generate(start_s,
    end_s, interval_s)`` samples every ``interval_s`` in ``(start_s, end_s]``.
    """

    def __init__(self, plan: TelemetryPlan) -> None:
        validate_plan(plan)
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
        self._schedules: dict[int, StepSchedule] = {}

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
        running: dict[int, PlannedJob] = {}
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

    def schedule(self, job: JobParams, until_s: float) -> StepSchedule:
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
    def jobs(self) -> list[JobParams]:
        """Every job: the plan's, then those added by :meth:`add_job`; a job's index is its position."""
        return self._jobs

    def jobs_between(self, lo_s: float, hi_s: float) -> list[JobParams]:
        """The jobs whose run overlaps ``[lo_s, hi_s]``, in index order."""
        if self._bounds is None:
            self._bounds = (np.array(self._starts, dtype=np.float64), np.array(self._ends, dtype=np.float64))
        starts, ends = self._bounds
        return [self._jobs[i] for i in np.flatnonzero((starts <= hi_s) & (ends >= lo_s))]

    def add_job(self, job: PlannedJob) -> int:
        """Add a job after construction (a live cluster); return its index, which keeps its draws stable.

        Checked like a plan's job, except for overlap: the caller (a simulator) keeps two jobs from
        holding one GPU at once. Samples already generated for times before ``job.start_s`` stay valid.
        """
        validate_job(job, self._row.keys(), f"add_job({job.id})")
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

    def gpu_series(self, row: int, job: PlannedJob | None) -> Series:
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

    def _params(self, index: int, job: PlannedJob) -> JobParams:
        u = uniform(self.plan.seed, 1, index, np.arange(5))
        return JobParams(
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


def _build_schedule(gen: SyntheticTelemetry, job: JobParams, until_s: float) -> StepSchedule:
    """Steps from the job's start until ``until_s``; step k depends only on k and the faults at its start."""
    spec = job.spec
    horizon = min(until_s, spec.end_s)
    n_gpus = job.rows.size
    capacity = max(1, math.ceil((horizon - spec.start_s) / (0.9 * job.step_s)) + 2)
    k = np.arange(capacity)
    seed = gen.plan.seed
    stall = np.where(
        uniform(seed, 2, job.index, k) < _STALL_CHANCE,
        job.step_s * (0.5 + 2.5 * uniform(seed, 3, job.index, k)),
        0.0,
    )
    jitter = 1.0 + 0.06 * (uniform(seed, 4, job.index, k) - 0.5)
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
    return StepSchedule(edges[: last + 1], stall[:last], compute[:, :last], slowest[:last], comm[:last])


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

    def _add_job(self, job: JobParams) -> None:
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

    def _memory(self, job: JobParams, t: FloatArray) -> Matrix:
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
        noise = 2.0 * uniform(gen.plan.seed, 10, rows, np.rint(self.times / self.dt)[None, :]) - 1.0
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
                    u = np.sort(uniform(self.gen.plan.seed, 20 + index, int(target), np.arange(n)))
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
        noise = uniform(self.gen.plan.seed, 11, node_rows, np.rint(self.times / self.dt)[None, :])
        base = peak * self.node_comm * share
        return {
            "NODE_IB_TX_BYTES": base * (0.97 + 0.06 * noise) + 1e5,
            "NODE_IB_RX_BYTES": base * (1.03 - 0.06 * noise) + 1e5,
        }


def _overlap(lo: FloatArray, hi: FloatArray, start: float, end: float) -> FloatArray:
    return np.asarray(np.clip(np.minimum(hi, end) - np.maximum(lo, start), 0.0, None), dtype=np.float64)
