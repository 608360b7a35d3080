"""Pure data: resources, nodes, jobs, snapshots and outcomes. No I/O, no clock."""

from loadmaster.model.constraints import (
    NodeAffinity,
    PreferredTerm,
    Requirement,
    SelectorTerm,
    Taint,
    Toleration,
)
from loadmaster.model.job import (
    SIZE_CLASSES,
    Job,
    PendingJob,
    RunningJob,
    TaskPlacement,
    TraceJob,
    size_class,
)
from loadmaster.model.mig import MigInstance, MigPoolConfig, MigSlot
from loadmaster.model.node import Node, NodeTable
from loadmaster.model.outcome import JobTable, Timeline
from loadmaster.model.pending_log import PendingLog
from loadmaster.model.resources import MILLI_PER_GPU, ResourceType, TaskRequest
from loadmaster.model.snapshot import (
    TRANSPOSED_FROM_NODES,
    ClusterSnapshot,
    MigView,
    gpu_summary,
    node_gpu_summary,
    per_node,
)
from loadmaster.model.usage import DecayedUsage, UsageLedger

__all__ = [
    "MILLI_PER_GPU",
    "SIZE_CLASSES",
    "TRANSPOSED_FROM_NODES",
    "ClusterSnapshot",
    "DecayedUsage",
    "Job",
    "JobTable",
    "MigInstance",
    "MigPoolConfig",
    "MigSlot",
    "MigView",
    "Node",
    "NodeAffinity",
    "NodeTable",
    "PendingJob",
    "PendingLog",
    "PreferredTerm",
    "Requirement",
    "ResourceType",
    "RunningJob",
    "SelectorTerm",
    "Taint",
    "TaskPlacement",
    "TaskRequest",
    "Timeline",
    "Toleration",
    "TraceJob",
    "UsageLedger",
    "gpu_summary",
    "node_gpu_summary",
    "per_node",
    "size_class",
]
