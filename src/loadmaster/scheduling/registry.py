"""The one literal table of plugins and actions. Nothing registers itself at import time."""

from __future__ import annotations

from collections.abc import Mapping

from loadmaster.scheduling.framework import Plugin
from loadmaster.scheduling.plugins.admission import ADMISSION_PLUGINS
from loadmaster.scheduling.plugins.backfill import Backfill
from loadmaster.scheduling.plugins.baselines import BASELINE_PLUGINS
from loadmaster.scheduling.plugins.binpack import BinPack
from loadmaster.scheduling.plugins.cuda_compat import CudaCompat
from loadmaster.scheduling.plugins.fifo import Fifo
from loadmaster.scheduling.plugins.firstfit import FirstFit
from loadmaster.scheduling.plugins.gang import Gang
from loadmaster.scheduling.plugins.las import LAS_PLUGINS
from loadmaster.scheduling.plugins.learned import Learned
from loadmaster.scheduling.plugins.multiqueue import MultiQueue
from loadmaster.scheduling.plugins.node_affinity import NodeAffinityPlugin
from loadmaster.scheduling.plugins.node_unschedulable import NodeUnschedulable
from loadmaster.scheduling.plugins.preempt_priority import PriorityPreempt
from loadmaster.scheduling.plugins.priority import PriorityClass
from loadmaster.scheduling.plugins.random_fit import RandomFit
from loadmaster.scheduling.plugins.sharing import SHARING_PLUGINS
from loadmaster.scheduling.plugins.spread import Spread
from loadmaster.scheduling.plugins.taint_toleration import TaintToleration
from loadmaster.scheduling.plugins.yarn import Yarn

PLUGINS: Mapping[str, type[Plugin]] = {
    **BASELINE_PLUGINS,
    **ADMISSION_PLUGINS,
    **SHARING_PLUGINS,
    **LAS_PLUGINS,
    "yarn": Yarn,
    "fifo": Fifo,
    "priority": PriorityClass,
    "gang": Gang,
    "first-fit": FirstFit,
    "binpack": BinPack,
    "spread": Spread,
    "random": RandomFit,
    "backfill": Backfill,
    "multi-queue": MultiQueue,
    "learned": Learned,
    "priority-preempt": PriorityPreempt,
    "cuda-compat": CudaCompat,
    "node-unschedulable": NodeUnschedulable,
    "taint-toleration": TaintToleration,
    "node-affinity": NodeAffinityPlugin,
}
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
