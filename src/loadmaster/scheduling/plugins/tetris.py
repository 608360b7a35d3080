"""tetris: multi-resource alignment (Grandl et al., SIGCOMM'14) as a node score.

A task goes where its demand vector points the same way as the node's free
vector: a CPU-heavy task to a node with spare CPU, a GPU-heavy one to a node
with spare GPUs. Packing along every resource at once leaves fewer nodes with
one resource exhausted and the others stranded. It is the "Tetris-style
packing" baseline the learned scheduler is compared with.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Annotated

import numpy as np
import numpy.typing as npt
from pydantic import Field

from loadmaster.model import MILLI_PER_GPU, Job, TaskRequest
from loadmaster.scheduling.framework import CycleContext, FloatArray, ScorePlugin
from loadmaster.scheduling.state import WorkingState

Weight = Annotated[float, Field(ge=0)]


@dataclass(frozen=True, slots=True)
class TetrisArgs:
    gpu_weight: Weight = 1.0
    """Weight of the GPU term of the dot product."""
    cpu_weight: Weight = 1.0
    """Weight of the CPU term of the dot product."""
    memory_weight: Weight = 1.0
    """Weight of the memory term of the dot product."""


def per_capacity(amount: npt.ArrayLike, capacity: npt.NDArray[np.int64]) -> FloatArray:
    """``amount / capacity`` per node, 0 where the node has none of the resource."""
    amounts = np.broadcast_to(np.asarray(amount, dtype=float), capacity.shape)
    out = np.zeros(capacity.shape, dtype=float)
    np.divide(amounts, capacity, out=out, where=capacity > 0)
    return out


def alignment(request: TaskRequest, state: WorkingState, weights: tuple[float, float, float]) -> FloatArray:
    """Sum over GPU, CPU and memory of weight * (demand / capacity) * (free / capacity), per node."""
    nodes = state.nodes
    terms = (
        (request.gpu_milli, state.free_milli, nodes.gpus * MILLI_PER_GPU),
        (request.cpu_milli, state.cpu_free, nodes.cpu_milli),
        (request.memory_mib, state.memory_free, nodes.memory_mib),
    )
    score = np.zeros(len(nodes), dtype=float)
    for weight, (demand, free, capacity) in zip(weights, terms, strict=True):
        if weight and demand:
            score += weight * per_capacity(demand, capacity) * per_capacity(free, capacity)
    return score


class Tetris(ScorePlugin):
    """Score = weighted dot product of the task's demand and the node's free resources, each over capacity."""

    name = "tetris"
    Args = TetrisArgs

    def __init__(self, args: TetrisArgs | None = None) -> None:
        super().__init__(args)
        chosen = args or TetrisArgs()
        self.weights = (chosen.gpu_weight, chosen.cpu_weight, chosen.memory_weight)

    def score(self, job: Job, request: TaskRequest, ctx: CycleContext) -> FloatArray:
        return alignment(request, ctx.state, self.weights)
