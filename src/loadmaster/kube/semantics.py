"""Kubernetes semantics every loadmaster profile runs with on a cluster, as kube-scheduler does.

kube-scheduler enables its NodeUnschedulable, TaintToleration and
NodeAffinity plugins in every profile; :func:`kube_scheduler` appends
loadmaster's forms of them (``node-unschedulable``, ``taint-toleration``,
``node-affinity``) to a profile that does not list them itself, so that a
profile written for the simulator behaves as Kubernetes users expect. A
profile that lists one keeps its own weight for it.

MIG devices a node advertises become a :class:`~loadmaster.scheduling.mig_pool.MigPool`
(:func:`mig_layouts`, :func:`mig_pool`), so MIG pods are placed by the same
code as in the simulator.
"""

from __future__ import annotations

from collections.abc import Mapping

from loadmaster.errors import ModelError
from loadmaster.kube.profiles import ProfileScheduler
from loadmaster.kube.translate import SCHEDULER_NAME
from loadmaster.model import MigInstance, NodeTable
from loadmaster.model.mig import MIG_MODELS, MigModel, mig_model_for, pack_layout
from loadmaster.scheduling import PluginSpec, Scheduler
from loadmaster.scheduling.mig_pool import MigPool
from loadmaster.scheduling.profile import with_plugins

KUBE_PLUGINS: tuple[PluginSpec, ...] = (
    PluginSpec("node-unschedulable", {}),
    PluginSpec("taint-toleration", {}, weight=3.0),
    PluginSpec("node-affinity", {}, weight=2.0),
)
"""Added to every profile; the weights are kube-scheduler's defaults for these plugins' scores
(pkg/scheduler/apis/config/v1/default_plugins.go: TaintToleration 3, NodeAffinity 2)."""


def kube_scheduler(scheduler: Scheduler) -> Scheduler:
    """``scheduler``, or a scheduler of its profile with :data:`KUBE_PLUGINS` added where missing.

    For a :class:`ProfileScheduler`, each of its profiles.
    """
    if isinstance(scheduler, ProfileScheduler):
        return ProfileScheduler({name: kube_scheduler(s) for name, s in scheduler.schedulers.items()})
    profile = with_plugins(scheduler.profile, KUBE_PLUGINS, "<kubernetes default plugins>")
    return scheduler if profile is scheduler.profile else Scheduler(profile)


def scheduler_names(scheduler: Scheduler) -> tuple[str, ...]:
    """The ``schedulerName`` values ``scheduler`` takes pods of: its profiles', or ``loadmaster`` alone."""
    if isinstance(scheduler, ProfileScheduler):
        return tuple(scheduler.schedulers)
    return (SCHEDULER_NAME,)


MAX_MIG_DEVICES = 7 * 16
"""MIG devices of one profile a node is taken to have at most (7 per GPU, 16 GPUs): any quantity is a
valid count, and the packing must stay small."""


def mig_layouts(
    gpu_product: str, counts: Mapping[str, int]
) -> tuple[MigModel, list[tuple[MigInstance, ...]]] | None:
    """GPU layouts that hold the MIG devices a node advertises (``nvidia.com/mig-<profile>: count``).

    The device plugin advertises counts per profile, not which GPU holds
    which instance, so the instances are packed onto as few GPUs as the MIG
    placement rules allow (largest first, each on the first GPU it still fits,
    :func:`~loadmaster.model.mig.pack_layout` deciding). The GPU model is the
    node's ``nvidia.com/gpu.product``, or else the first MIG-capable model that
    offers every advertised profile (profile names differ by model: 1g.5gb is
    an A100-40GB's, 1g.18gb an H200's). None when no model offers them all.
    """
    names = sorted({name for name, count in counts.items() if count > 0})
    if not names:
        return None
    model = mig_model_for(gpu_product)
    if model is None or not all(model.has(n) for n in names):
        model = next((m for m in MIG_MODELS.values() if all(m.has(n) for n in names)), None)
    if model is None:
        return None
    chosen = model
    gpus: list[list[str]] = []
    for name in sorted(names, key=lambda n: (-chosen.profile(n).size, n)):
        first = 0  # GPUs before it refused this profile once: adding more never makes room
        for _ in range(min(counts[name], MAX_MIG_DEVICES)):
            while first < len(gpus) and not _fits(chosen, [*gpus[first], name]):
                first += 1
            if first == len(gpus):
                gpus.append([])
            gpus[first].append(name)
    return chosen, [pack_layout(chosen, gpu) for gpu in gpus]


def _fits(model: MigModel, profiles: list[str]) -> bool:
    chosen = [model.profile(name) for name in profiles]
    if (
        sum(p.compute_slices for p in chosen) > model.compute_slices
        or sum(p.size for p in chosen) > model.memory_slots
        or any(profiles.count(p.name) > p.max_per_gpu for p in chosen)
    ):
        return False  # the cheap necessary conditions first: the search below is exponential in repeats
    try:
        pack_layout(model, profiles)
    except ModelError:
        return False
    return True


def mig_pool(
    nodes: NodeTable, layouts: Mapping[int, tuple[MigModel, list[tuple[MigInstance, ...]]]]
) -> MigPool | None:
    """A MIG pool of every node's advertised instances, all free (None when no node has any).

    A node's MIG GPUs are numbered after its whole GPUs (``nvidia.com/gpu``), so the two never share an index.
    """
    gpus: dict[tuple[int, int], tuple[MigModel, tuple[MigInstance, ...]]] = {}
    for node, (model, node_layouts) in layouts.items():
        first = int(nodes.gpus[node])
        for k, layout in enumerate(node_layouts):
            gpus[(node, first + k)] = (model, layout)
    return MigPool.build(len(nodes), gpus) if gpus else None
