"""cuda-compat: a job runs only on nodes whose NVIDIA driver can run the CUDA its image was built with.

The node's driver comes from GPU feature discovery's labels
(``nvidia.com/cuda.driver.major``/``minor``/``rev``; a simulated cluster
writes them from its spec's ``driver_version``); the job's CUDA release from
``Job.cuda``. The rules (toolkit drivers, minor-version compatibility,
forward compatibility through cuda-compat on data-center GPUs) are NVIDIA's,
kept as data in :mod:`loadmaster.model.cuda`. A job that declares no CUDA
release passes everywhere.
"""

from __future__ import annotations

from collections.abc import Hashable
from dataclasses import dataclass

import numpy as np

from loadmaster.model import Job, NodeTable
from loadmaster.model.cuda import CudaVersion, DriverVersion, check, driver_of, is_data_center, requirement
from loadmaster.scheduling.framework import BoolArray, CycleContext, FilterPlugin, FilterResult


@dataclass(frozen=True, slots=True)
class CudaCompatArgs:
    unknown_driver: str = "allow"
    """A node without driver labels: ``allow`` (assume it runs anything; clusters without GPU feature
    discovery keep working) or ``reject`` (only nodes that declare a driver take CUDA jobs)."""

    def __post_init__(self) -> None:
        if self.unknown_driver not in {"allow", "reject"}:
            raise ValueError(f"unknown_driver: {self.unknown_driver!r}; allowed: allow, reject")


class CudaCompat(FilterPlugin):
    """Nodes whose driver runs the job's CUDA release (natively, or by minor-version or forward compat)."""

    name = "cuda-compat"
    reads_nodes_only = True  # the job and the node table (ctx.state.nodes); no time, no draws
    marks_cycle = True  # ctx.data[CUDA_FILTERED]: the cycle's shortfalls name the drivers counted
    Args = CudaCompatArgs

    def __init__(self, args: CudaCompatArgs | None = None) -> None:
        super().__init__(args)
        self.settings: CudaCompatArgs = args or CudaCompatArgs()
        self._nodes: NodeTable | None = None
        self._drivers: list[tuple[DriverVersion | None, bool]] = []
        self._masks: dict[tuple[CudaVersion, bool], FilterResult] = {}

    def memo_key(self, job: Job) -> Hashable:
        return (job.cuda, job.cuda_compat)

    def filter(self, job: Job, ctx: CycleContext) -> FilterResult:
        nodes = ctx.state.nodes
        if job.cuda is None:
            return FilterResult(np.ones(len(nodes), dtype=bool))
        ctx.data[self.name] = True  # a shortfall of this cycle then names the drivers it counted
        if nodes is not self._nodes:
            self._nodes = nodes
            self._drivers = [
                (
                    driver_of(n.labels),
                    is_data_center(n.labels, nodes.resource_types[n.resource_type].gpu_model),
                )
                for n in nodes.nodes
            ]
            self._masks = {}
        key = (job.cuda, job.cuda_compat)
        if key not in self._masks:
            self._masks[key] = self._result(job.cuda, job.cuda_compat)
        return self._masks[key]

    def _result(self, cuda: CudaVersion, compat: bool) -> FilterResult:
        allow_unknown = self.settings.unknown_driver == "allow"
        verdicts = [
            None if driver is None else check(cuda, driver, data_center=dc, compat_package=compat)
            for driver, dc in self._drivers
        ]
        mask: BoolArray = np.array([allow_unknown if v is None else v.ok for v in verdicts], dtype=bool)
        mask.setflags(write=False)
        seen = sorted({str(d) for d, _ in self._drivers if d is not None})
        have = ", ".join(seen) if seen else "none declared"
        reason = (
            f"cuda-compat: CUDA {cuda}{' with cuda-compat' if compat else ''} needs "
            f"{requirement(cuda, compat)}; node drivers: {have}"
        )
        return FilterResult(mask, reason)
