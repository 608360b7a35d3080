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
