"""Kubernetes semantics every loadmaster profile runs with on a cluster, as kube-scheduler does.

kube-scheduler enables its NodeUnschedulable, TaintToleration and
NodeAffinity plugins in every profile; :func:`kube_scheduler` appends
loadmaster's forms of them (``node-unschedulable``, ``taint-toleration``,
``node-affinity``) to a profile that does not list them itself, so that a
profile written for the simulator behaves as Kubernetes users expect. A
profile that lists one keeps its own weight for it.
"""

from __future__ import annotations

from loadmaster.scheduling import PluginSpec, Scheduler
from loadmaster.scheduling.profile import with_plugins

KUBE_PLUGINS: tuple[PluginSpec, ...] = (
    PluginSpec("node-unschedulable", {}),
    PluginSpec("taint-toleration", {}, weight=3.0),
    PluginSpec("node-affinity", {}, weight=2.0),
)
"""Added to every profile; the weights are kube-scheduler's defaults for these plugins' scores
(pkg/scheduler/apis/config/v1/default_plugins.go: TaintToleration 3, NodeAffinity 2)."""


def kube_scheduler(scheduler: Scheduler) -> Scheduler:
    """``scheduler``, or a scheduler of its profile with :data:`KUBE_PLUGINS` added where missing."""
    profile = with_plugins(scheduler.profile, KUBE_PLUGINS, "<kubernetes default plugins>")
    return scheduler if profile is scheduler.profile else Scheduler(profile)
