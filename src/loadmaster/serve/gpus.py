"""Every GPU of the cluster as one flat index, and its telemetry read through the store.

The dashboard numbers GPUs in node order (node 0's GPUs, then node 1's...),
so a per-GPU column is one array and a node's GPUs are a contiguous slice.
:class:`GpuIndex` maps that flat index to (node, GPU) and to the telemetry
series id; :class:`TelemetryView` reads a field for every GPU at once, from
the last batch the demo appended (live) or from the store (a past time).
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass

import numpy as np
import numpy.typing as npt

from loadmaster.model import NodeTable
from loadmaster.telemetry import Field, field
from loadmaster.telemetry.store import Series, TelemetryStore

FloatArray = npt.NDArray[np.float64]
IntArray = npt.NDArray[np.int64]


@dataclass(frozen=True)
class GpuIndex:
    """Flat GPU numbering: ``node[i]`` and ``gpu[i]`` of flat GPU ``i``; ``first[n]`` is node n's first."""

    nodes: NodeTable
    node: IntArray
    gpu: IntArray
    first: IntArray

    @classmethod
    def of(cls, nodes: NodeTable) -> GpuIndex:
        counts = nodes.gpus.astype(np.int64)
        node = np.repeat(np.arange(len(nodes), dtype=np.int64), counts)
        first = np.concatenate(([0], np.cumsum(counts)[:-1])).astype(np.int64)
        gpu = np.arange(node.size, dtype=np.int64) - first[node]
        return cls(nodes, node, gpu, first)

    @property
    def size(self) -> int:
        return int(self.node.size)

    def flat(self, grid: npt.NDArray[np.int32]) -> npt.NDArray[np.int32]:
        """A (nodes, max_gpus) grid as one value per real GPU, in flat order."""
        return grid[self.node, self.gpu]

    def of_node(self, node: int) -> slice:
        """The flat GPUs of one node."""
        start = int(self.first[node])
        return slice(start, start + int(self.nodes.gpus[node]))


def series_positions(index: GpuIndex, series: Sequence[Series]) -> IntArray:
    """The series id of each flat GPU (-1 where none), matched on the ``Hostname`` and ``gpu`` labels
    (a MIG instance's series, which carries its parent's ``gpu`` and a ``GPU_I_ID``, is not the GPU's)."""
    by_place = {
        (s.labels.get("Hostname"), s.labels.get("gpu")): s.id
        for s in series
        if s.scope == "gpu" and "GPU_I_ID" not in s.labels
    }
    names = [n.name for n in index.nodes.nodes]
    return np.array(
        [by_place.get((names[n], str(g)), -1) for n, g in zip(index.node, index.gpu, strict=True)],
        dtype=np.int64,
    )


class TelemetryView:
    """Per-GPU values of a field: live from the last appended batch, or at a past time from the store."""

    def __init__(self, index: GpuIndex, store: TelemetryStore, series_of_gpu: IntArray) -> None:
        self.index = index
        self.store = store
        self.series_of_gpu = series_of_gpu
        size = int(series_of_gpu.max(initial=-1)) + 1
        self._flat_of_series = np.full(size, -1, dtype=np.int64)
        known = series_of_gpu >= 0
        self._flat_of_series[series_of_gpu[known]] = np.flatnonzero(known)
        self._live: dict[str, FloatArray] = {}

    def remember(self, latest: Mapping[str, Mapping[int, float]]) -> None:
        """Keep the newest value of each field (by key) per series, as the demo has just appended them."""
        for key, values in latest.items():
            current = self._live.get(key)
            if current is None:
                current = np.full(self.index.size, np.nan)
            self._live[key] = self._merge(current, values)

    def values(self, ref: str | Field, at_s: float | None = None) -> FloatArray:
        """``ref``'s value on every flat GPU (NaN where there is none); ``at_s`` None: the newest."""
        f = field(ref) if isinstance(ref, str) else ref
        if at_s is None and f.key in self._live:
            return self._live[f.key]
        return self._merge(np.full(self.index.size, np.nan), self.store.latest(f, at_s))

    def _merge(self, into: FloatArray, values: Mapping[int, float]) -> FloatArray:
        out = into.copy()
        if not values:
            return out
        ids = np.fromiter(values.keys(), dtype=np.int64, count=len(values))
        vals = np.fromiter(values.values(), dtype=np.float64, count=len(values))
        inside = ids < self._flat_of_series.size
        flat = self._flat_of_series[ids[inside]]
        ok = flat >= 0
        out[flat[ok]] = vals[inside][ok]
        return out
