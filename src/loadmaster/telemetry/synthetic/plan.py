"""What synthetic telemetry is made from: hosts and GPU models, jobs on GPUs, injectable faults, and
the checks a plan must pass (:func:`validate_plan`)."""

from __future__ import annotations

from collections.abc import Collection, Sequence
from dataclasses import dataclass
from enum import StrEnum

from loadmaster.errors import TelemetryError

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
class PlannedJob:
    """A job of a telemetry plan: what it does on which GPUs from ``start_s`` to ``end_s`` (seconds on
    the telemetry clock). Not a submitted job file (:class:`loadmaster.config.jobspec.JobSpec`)."""

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
    jobs: tuple[PlannedJob, ...] = ()
    faults: tuple[Fault, ...] = ()
    seed: int = 0


# ---------------------------------------------------------------------------- validation


_SHARE_KINDS = frozenset({FaultKind.COMM, FaultKind.THERMAL, FaultKind.MEMORY_LEAK})
"""Kinds whose magnitude is a share of something (bandwidth, clock, memory): in (0, 1]."""


def validate_job(job: PlannedJob, known: Collection[GpuRef], where: str) -> None:
    """A TelemetryError naming ``where`` unless ``job`` runs a while, on GPUs of ``known``."""
    if not job.end_s > job.start_s:
        raise TelemetryError(f"{where}: end_s {job.end_s} must be after start_s {job.start_s}")
    if not job.gpus:
        raise TelemetryError(f"{where}: gpus is empty")
    if job.step_s is not None and not job.step_s > 0:
        raise TelemetryError(f"{where}: step_s must be > 0, got {job.step_s}")
    for gpu in job.gpus:
        if gpu not in known:
            raise TelemetryError(f"{where}: GPU {gpu} is not on any node of the plan")


def validate_plan(plan: TelemetryPlan) -> None:
    """A TelemetryError naming the first node, job or fault of ``plan`` that is not allowed."""
    hosts = {n.hostname for n in plan.nodes}
    if len(hosts) != len(plan.nodes):
        raise TelemetryError("TelemetryPlan.nodes: hostnames must be unique")
    known = {GpuRef(n.hostname, i) for n in plan.nodes for i in range(n.gpus)}
    _validate_jobs(plan.jobs, known)
    for i, fault in enumerate(plan.faults):
        problem = _fault_problem(fault, known, hosts)
        if problem is not None:
            raise TelemetryError(f"TelemetryPlan.faults[{i}] ({fault.kind.value}): {problem}")


def _validate_jobs(jobs: Sequence[PlannedJob], known: Collection[GpuRef]) -> None:
    """Each job checked by :func:`validate_job`, and no GPU held by two jobs at once."""
    used: dict[GpuRef, list[PlannedJob]] = {}
    for job in jobs:
        where = f"TelemetryPlan.jobs[{job.id}]"
        validate_job(job, known, where)
        for gpu in job.gpus:
            held = used.setdefault(gpu, [])
            other = next((o for o in held if o.start_s < job.end_s and job.start_s < o.end_s), None)
            if other is not None:
                raise TelemetryError(f"{where}: GPU {gpu} is also used by job {other.id} at the same time")
            held.append(job)


def _fault_problem(fault: Fault, known: Collection[GpuRef], hosts: Collection[str]) -> str | None:
    """Why ``fault`` is not allowed (its interval, targets or magnitude), or None."""
    if not fault.end_s > fault.start_s:
        return f"end_s {fault.end_s} must be after start_s {fault.start_s}"
    unknown = [str(g) for g in fault.gpus if g not in known] + [h for h in fault.nodes if h not in hosts]
    if unknown:
        return f"unknown target(s) {', '.join(unknown)}"
    if not fault.gpus and not fault.nodes:
        return "needs target gpus or nodes"
    if fault.kind is FaultKind.COMM and not fault.nodes:
        return "a communication fault targets nodes (their links), not GPUs"
    if fault.kind is FaultKind.STRAGGLER and not fault.strength >= 1.0:
        return "magnitude is a slowdown factor and must be >= 1"
    if fault.kind in _SHARE_KINDS and not 0.0 < fault.strength <= 1.0:
        return "magnitude is a share and must be in (0, 1]"
    return None
