"""Registry fragment: ordering and packing baselines (one small file per plugin)."""

from __future__ import annotations

from collections.abc import Mapping

from loadmaster.scheduling.framework import Plugin
from loadmaster.scheduling.plugins.drf import DominantResourceFairness
from loadmaster.scheduling.plugins.hpc import F1, Unicep, Wfp3
from loadmaster.scheduling.plugins.multifactor import Multifactor
from loadmaster.scheduling.plugins.random_order import RandomOrder
from loadmaster.scheduling.plugins.sjf import ShortestJobFirst
from loadmaster.scheduling.plugins.tetris import Tetris

BASELINE_PLUGINS: Mapping[str, type[Plugin]] = {
    "sjf": ShortestJobFirst,
    "drf": DominantResourceFairness,
    "f1": F1,
    "wfp3": Wfp3,
    "unicep": Unicep,
    "multifactor": Multifactor,
    "tetris": Tetris,
    "random-order": RandomOrder,
}
"""Plugin name -> class, merged into ``registry.PLUGINS``."""
