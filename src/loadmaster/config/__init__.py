"""Loading cluster, profile and workload files; every error names the file, line and field."""

from loadmaster.config.cluster import BUILTIN_CLUSTERS, Cluster, load_cluster
from loadmaster.config.profiles import (
    BUILTIN_PROFILES,
    load_profile_with_args,
    load_profiles,
    load_selected,
    select_profiles,
)
from loadmaster.config.workload import BUILTIN_WORKLOADS, Workload, load_trace_workload, load_workload

__all__ = [
    "BUILTIN_CLUSTERS",
    "BUILTIN_PROFILES",
    "BUILTIN_WORKLOADS",
    "Cluster",
    "Workload",
    "load_cluster",
    "load_profile_with_args",
    "load_profiles",
    "load_selected",
    "load_trace_workload",
    "load_workload",
    "select_profiles",
]
