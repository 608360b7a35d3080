"""The one literal table of plugins and actions. Nothing registers itself at import time."""

from __future__ import annotations

import importlib
from collections.abc import Iterator, Mapping

from loadmaster.scheduling.framework import Plugin

_P = "loadmaster.scheduling.plugins."

PLUGIN_CLASSES: Mapping[str, tuple[str, str]] = {
    # The ordering and packing baselines (plugins.baselines.BASELINE_PLUGINS).
    "sjf": (_P + "sjf", "ShortestJobFirst"),
    "drf": (_P + "drf", "DominantResourceFairness"),
    "f1": (_P + "hpc", "F1"),
    "wfp3": (_P + "hpc", "Wfp3"),
    "unicep": (_P + "hpc", "Unicep"),
    "multifactor": (_P + "multifactor", "Multifactor"),
    "tetris": (_P + "tetris", "Tetris"),
    "random-order": (_P + "random_order", "RandomOrder"),
    # Admission (plugins.admission.ADMISSION_PLUGINS).
    "quota": (_P + "quota", "Quota"),
    "dedicated": (_P + "dedicated", "Dedicated"),
    "size-zones": (_P + "size_zones", "SizeZones"),
    "resource-types": (_P + "resource_types", "ResourceTypes"),
    # GPU sharing (plugins.sharing.SHARING_PLUGINS).
    "random-share": (_P + "sharing", "RandomShare"),
    "best-fit": (_P + "sharing", "BestFit"),
    "dot-product": (_P + "sharing", "DotProduct"),
    "gpu-packing": (_P + "sharing", "GpuPacking"),
    "gpu-clustering": (_P + "sharing", "GpuClustering"),
    "fgd": (_P + "sharing", "FragmentationGradient"),
    "fgd-balanced": (_P + "sharing", "FgdBalanced"),
    # The Tiresias family (plugins.las.LAS_PLUGINS).
    "las": (_P + "las", "Las"),
    "las-time": (_P + "las", "LasTime"),
    "gittins": (_P + "las", "Gittins"),
    "las-preempt": (_P + "las", "LasPreempt"),
    "las-count": (_P + "las", "LasCount"),
    "yarn": (_P + "yarn", "Yarn"),
    "fifo": (_P + "fifo", "Fifo"),
    "priority": (_P + "priority", "PriorityClass"),
    "gang": (_P + "gang", "Gang"),
    "first-fit": (_P + "firstfit", "FirstFit"),
    "binpack": (_P + "binpack", "BinPack"),
    "spread": (_P + "spread", "Spread"),
    "random": (_P + "random_fit", "RandomFit"),
    "backfill": (_P + "backfill", "Backfill"),
    "multi-queue": (_P + "multiqueue", "MultiQueue"),
    "learned": (_P + "learned", "Learned"),
    "priority-preempt": (_P + "preempt_priority", "PriorityPreempt"),
    "cuda-compat": (_P + "cuda_compat", "CudaCompat"),
    "node-unschedulable": (_P + "node_unschedulable", "NodeUnschedulable"),
    "taint-toleration": (_P + "taint_toleration", "TaintToleration"),
    "node-affinity": (_P + "node_affinity", "NodeAffinityPlugin"),
}
"""Plugin name -> (module, class): the table :data:`PLUGINS` imports from, one entry at a time."""


class _LazyPlugins(Mapping[str, type[Plugin]]):
    """Plugin name -> class, each plugin's module imported when its class is first asked for.

    Why: a run uses the plugins of its profiles, a handful of the forty; importing every plugin's
    module (GPU sharing, the Tiresias family, ...) would cost ``loadmaster simulate`` about a tenth
    of a second before it simulates. Names, order and membership come from
    :data:`PLUGIN_CLASSES` alone, so listing or checking a name imports nothing.
    """

    def __getitem__(self, name: str) -> type[Plugin]:
        module, attribute = PLUGIN_CLASSES[name]
        cls: type[Plugin] = getattr(importlib.import_module(module), attribute)
        return cls

    def __iter__(self) -> Iterator[str]:
        return iter(PLUGIN_CLASSES)

    def __len__(self) -> int:
        return len(PLUGIN_CLASSES)

    def __contains__(self, name: object) -> bool:
        return name in PLUGIN_CLASSES


PLUGINS: Mapping[str, type[Plugin]] = _LazyPlugins()
"""Plugin name -> class."""

ACTIONS: tuple[str, ...] = ("admit", "allocate", "backfill", "preempt")
"""Action names a profile may list, in the order they make sense."""

INCOMPATIBLE: tuple[tuple[frozenset[str], str], ...] = (
    (frozenset({"binpack", "spread"}), "binpack and spread pull in opposite directions"),
    (frozenset({"random", "binpack"}), "random placement overrides binpack's scores"),
    (frozenset({"random", "spread"}), "random placement overrides spread's scores"),
    (frozenset({"random", "first-fit"}), "random placement overrides first-fit's order"),
    (
        frozenset({"learned", "multi-queue"}),
        "the learned policy was trained on one queue and ranks jobs of every size against each other;"
        " splitting the queue by size throws that ranking away",
    ),
)
"""Plugin combinations a profile may not hold together, with the reason."""
