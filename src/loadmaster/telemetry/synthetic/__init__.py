"""Synthetic GPU telemetry for running jobs, with injectable faults and their ground truth.

:class:`SyntheticTelemetry` turns a :class:`TelemetryPlan` (nodes, jobs on
GPUs, faults) into samples of every field in the schema, as a real cluster
running dcgm-exporter would show them; every value is a pure function of
(seed, series, time), and faults keep their ground truth in
:attr:`SyntheticTelemetry.truth`. What the samples model (training steps, idle
allocations, memory, temperature, power, clock-event reasons) is told once, in
:mod:`.generator`; docs/telemetry.md shows what each fault looks like.

The package, one job per module: :mod:`.plan` (hosts, jobs, faults, and the
checks a plan must pass), :mod:`.steps` (hashed randomness and a job's step
schedule), :mod:`.generator` (:class:`SyntheticTelemetry`: samples of every
field) and :mod:`.adapters` (plans from a simulator snapshot or run). The
names below are its public API.
"""

from loadmaster.telemetry.synthetic.adapters import node_specs, plan_from_run, plan_from_snapshot
from loadmaster.telemetry.synthetic.generator import SyntheticTelemetry, Telemetry, gpu_uuid
from loadmaster.telemetry.synthetic.plan import (
    GPU_MODELS,
    Fault,
    FaultKind,
    GpuModel,
    GpuRef,
    NodeSpec,
    PlannedJob,
    TelemetryPlan,
    Workload,
    gpu_model,
)

__all__ = [
    "GPU_MODELS",
    "Fault",
    "FaultKind",
    "GpuModel",
    "GpuRef",
    "NodeSpec",
    "PlannedJob",
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
