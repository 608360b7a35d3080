"""resource-types: a job asks for a resource type, and its CPU and memory stay within the type's bundle.

A resource type is a GPU model plus the CPU and memory that come with each
GPU on that host class. A task may use at most the bundle times its GPUs (a
task of half a GPU gets half a bundle), so that no job strands a host's GPUs
by taking its cores or memory. A job that breaks these rules can never run:
every node is filtered off with the reason, and the simulator rejects the
job when it arrives.
"""

from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from loadmaster.model import MILLI_PER_GPU, Job, NodeTable, ResourceType, TaskRequest
from loadmaster.scheduling.framework import BoolArray, CycleContext, FilterPlugin, FilterResult


@dataclass(frozen=True, slots=True)
class ResourceTypesArgs:
    require_type: bool = True
    """Reject a job that names no resource type (False: it may use any type whose bundle it fits)."""
    enforce_bundle: bool = True
    """Reject a task whose CPU or memory exceeds its type's per-GPU bundle times its GPUs."""


def bundle_excess(request: TaskRequest, rtype: ResourceType) -> str:
    """Why ``request`` does not fit the bundle of ``rtype`` for its GPUs, or "" when it does.

    Compared in integers (milli-units times milli-GPU), so a fraction of a
    bundle is exact.
    """
    gpus = request.gpu_milli
    problems = []
    if request.cpu_milli * MILLI_PER_GPU > rtype.cpu_milli_per_gpu * gpus:
        most = rtype.cpu_milli_per_gpu * gpus // MILLI_PER_GPU
        problems.append(
            f"{request.cpu_milli}m CPU (the bundle is {rtype.cpu_milli_per_gpu}m per GPU: at most {most}m)"
        )
    if request.memory_mib * MILLI_PER_GPU > rtype.memory_mib_per_gpu * gpus:
        most = rtype.memory_mib_per_gpu * gpus // MILLI_PER_GPU
        problems.append(
            f"{request.memory_mib} MiB memory (the bundle is {rtype.memory_mib_per_gpu} MiB per GPU: "
            f"at most {most} MiB)"
        )
    return " and ".join(problems)


class ResourceTypes(FilterPlugin):
    """All nodes, or none with the reason; a job without a type keeps the nodes whose bundle it fits."""

    name = "resource-types"
    reads_nodes_only = True  # the job and the node table (ctx.state.nodes); no time, no draws
    Args = ResourceTypesArgs

    def __init__(self, args: ResourceTypesArgs | None = None) -> None:
        super().__init__(args)
        self.settings: ResourceTypesArgs = args or ResourceTypesArgs()

    def filter(self, job: Job, ctx: CycleContext) -> FilterResult:
        nodes = ctx.state.nodes
        if job.resource_type is None:
            return self._untyped(job, nodes)
        rtype = nodes.resource_types.get(job.resource_type)
        if rtype is None or not self.settings.enforce_bundle:
            # An unknown type matches no node already (resource fit says so).
            return FilterResult(np.ones(len(nodes), dtype=bool))
        excess = bundle_excess(job.request, rtype)
        if not excess:
            return FilterResult(np.ones(len(nodes), dtype=bool))
        return FilterResult(
            np.zeros(len(nodes), dtype=bool),
            f"resource-types: each task of {job.request.gpus:g} GPU(s) of type {rtype.name} asks {excess}",
        )

    def _untyped(self, job: Job, nodes: NodeTable) -> FilterResult:
        if self.settings.require_type:
            return FilterResult(
                np.zeros(len(nodes), dtype=bool),
                f"resource-types: the job names no resource type; ask for one of "
                f"{', '.join(sorted(nodes.resource_types))}",
            )
        if not self.settings.enforce_bundle:
            return FilterResult(np.ones(len(nodes), dtype=bool))
        excess = {name: bundle_excess(job.request, nodes.resource_types[name]) for name in nodes.type_names}
        mask: BoolArray = np.isin(
            nodes.type_index, [i for i, n in enumerate(nodes.type_names) if not excess[n]]
        )
        too_big = "; ".join(f"{name}: {why}" for name, why in sorted(excess.items()) if why)
        return FilterResult(
            mask,
            f"resource-types: the job names no type, so it may use the types whose bundle it fits "
            f"(each task of {job.request.gpus:g} GPU(s) exceeds the bundle of {too_big})",
        )
