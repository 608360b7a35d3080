"""Workloads: traces of jobs for the simulator, synthetic or replayed."""

from loadmaster.workload.synthetic import (
    GPU_SIZES,
    LabWorkloadParams,
    PoolTarget,
    heavy_user_ids,
    offered_load,
    sample_lab_workload,
)

__all__ = [
    "GPU_SIZES",
    "LabWorkloadParams",
    "PoolTarget",
    "heavy_user_ids",
    "offered_load",
    "sample_lab_workload",
]
