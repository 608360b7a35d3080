"""yarn: Tiresias' consolidated placement (its simulator's ``yarn`` scheme, ``switch.ms_yarn_alloc_res``).

A job of at most one node's GPUs goes whole on the first node (in node-table
order) with room for all of it, or waits; it never spreads. A larger job
takes wholly free nodes, first ones first, for as many whole nodes as it
fills, and the first other node with room for the rest, or waits. Tiresias
keeps a job on one switch; loadmaster's racks play no part here (every
cluster Tiresias ships has one switch). CPU and memory are checked by the
fit as usual, not by Tiresias' per-GPU CPU rule. Tasks are taken to be one
GPU each, as the Tiresias reader makes them (a node's capacity is then its
free GPUs); the largest node's GPU count is "a whole node".
"""

from __future__ import annotations

from collections.abc import Sequence

import numpy as np
import numpy.typing as npt

from loadmaster.model import NodeTable
from loadmaster.scheduling.framework import FloatArray, PlaceGangPlugin


class Yarn(PlaceGangPlugin):
    """First node that takes the whole job; else whole free nodes, then the first with room for the rest."""

    name = "yarn"

    def choose_node(
        self,
        capacity: npt.NDArray[np.int64],
        remaining: int,
        used: Sequence[int],
        scores: FloatArray,
        nodes: NodeTable,
    ) -> int:
        taken = np.zeros(capacity.shape, dtype=bool)
        taken[list(used)] = True
        if remaining >= nodes.max_gpus:
            room = (capacity >= nodes.gpus) & (nodes.gpus > 0) & ~taken  # a wholly free node
        else:
            room = (capacity >= remaining) & ~taken  # the rest on one node
        hits = np.flatnonzero(room)
        return int(hits[0]) if hits.size else -1
