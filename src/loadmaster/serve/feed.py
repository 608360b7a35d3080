"""The demo's telemetry feed: one series per GPU, labelled as dcgm-exporter labels them, sampled from the sim.

A small, vectorised source so the demo runs on any cluster size: busy
GPUs follow a training step (compute phases broken by communication dips),
a fixed share of jobs sit idle on their allocation (the waste the operator
view shows), and a few GPUs carry faults (an XID error, ECC errors, thermal
throttling) so that every badge appears. Values are deterministic given the
seed, the time and the cluster state.
"""

from __future__ import annotations

import numpy as np
import pyarrow as pa

from loadmaster.serve.gpus import GpuIndex
from loadmaster.serve.live import FREE, LiveSimulator
from loadmaster.telemetry import SAMPLE_SCHEMA, field, field_code
from loadmaster.telemetry.store import Series, TelemetryStore

IDLE_JOB_SHARE = 0.12
"""Share of jobs that hold their GPUs without using them (notebooks left open, stuck data loaders)."""
RELABEL_MAX_GPUS = 2000
"""Above this many GPUs the feed does not relabel series with their job and user on every change:
re-registering hundreds of series per sample costs more than a tick (about 2 ms a series in DuckDB
here). The dashboard does not need it; it knows each GPU's job from the scheduler's state."""
FAULTY_GPU_SHARE = 0.004
"""Share of GPUs with an injected fault, split between XID, ECC and throttling."""

_FIELDS = ("GPU_UTIL", "SM_ACTIVE", "FB_USED", "FB_FREE", "POWER_USAGE", "GPU_TEMP",
           "XID_ERRORS", "CLOCKS_EVENT_REASONS")  # fmt: skip
_ECC = field("ECC_DBE_VOL_TOTAL")
"""Sent only by GPUs that have had ECC errors, as a sparse counter (most GPUs never report one)."""


class DemoFeed:
    """Synthetic per-GPU samples for the live demo (see the module docstring)."""

    def __init__(self, sim: LiveSimulator, store: TelemetryStore, seed: int = 0) -> None:
        self.index = GpuIndex.of(sim.nodes)
        self.store = store
        rng = np.random.default_rng(seed)
        n = self.index.size
        self.phase = rng.uniform(0, 2 * np.pi, n)
        fault = rng.random(n) < FAULTY_GPU_SHARE
        kinds = rng.integers(0, 3, n)
        self.xid = np.where(fault & (kinds == 0), 79, 0)
        self.ecc = np.where(fault & (kinds == 1), 2, 0)
        self.throttle = np.where(fault & (kinds == 2), 0x40, 0)
        self.memory_mib = np.array(
            [
                sim.nodes.resource_types[sim.nodes.nodes[i].resource_type].gpu_memory_mib
                for i in self.index.node
            ]
        )
        names = [n.name for n in sim.nodes.nodes]
        models = [sim.nodes.resource_types[n.resource_type].gpu_model for n in sim.nodes.nodes]
        self._base = [
            {"gpu": str(g), "UUID": f"GPU-{names[nd]}-{g}", "Hostname": names[nd], "modelName": models[nd]}
            for nd, g in zip(self.index.node.tolist(), self.index.gpu.tolist(), strict=True)
        ]
        self._owner = np.full(n, FREE, dtype=np.int32)
        self._codes = np.array([field_code(field(k)) for k in _FIELDS], dtype=np.int32)

    def series(self) -> list[Series]:
        return [Series(i, "gpu", labels) for i, labels in enumerate(self._base)]

    def sample(self, time_s: float, sim: LiveSimulator) -> pa.Table:
        owner = self.index.flat(sim.owner)
        self._relabel(owner, sim)
        busy = owner != FREE
        job_hash = (owner.astype(np.int64) * 2654435761) % 1000 / 1000.0
        idle = busy & (job_hash < IDLE_JOB_SHARE)
        step = 0.5 + 0.5 * np.sin(time_s / 45.0 + self.phase + owner)
        util = np.where(busy & ~idle, 72 + 25 * step, np.where(idle, 1.0, 0.0))
        sm = util / 100 * (0.6 + 0.3 * job_hash)
        used = np.where(busy, self.memory_mib * (0.3 + 0.6 * job_hash), 0.0)
        power = 60 + 3.2 * util
        temp = 32 + 0.45 * util + np.where(self.throttle > 0, 25, 0)
        values = np.stack([util, sm, used, self.memory_mib - used, power, temp,
                           self.xid, self.throttle]).astype(np.float64)  # fmt: skip
        n = self.index.size
        ecc = np.flatnonzero(self.ecc)
        return pa.table(
            {
                "time_s": np.full(values.size + ecc.size, time_s),
                "series": np.concatenate((np.tile(np.arange(n), len(_FIELDS)), ecc)).astype(np.int32),
                "field": np.concatenate((np.repeat(self._codes, n), np.full(ecc.size, field_code(_ECC)))),
                "value": np.concatenate((values.ravel(), self.ecc[ecc].astype(np.float64))),
            },
            schema=SAMPLE_SCHEMA,
        )

    def _relabel(self, owner: np.ndarray, sim: LiveSimulator) -> None:
        """Give the store the job and user of every GPU whose owner changed since the last sample."""
        changed = np.flatnonzero(owner != self._owner)
        if changed.size and self.index.size <= RELABEL_MAX_GPUS:
            updates = []
            for i in changed.tolist():
                labels = dict(self._base[i])
                if owner[i] != FREE:
                    job = sim.jobs[int(owner[i])].job
                    labels |= {"job": job.id, "user": job.user}
                updates.append(Series(i, "gpu", labels))
            self.store.register(updates)
            self._owner = owner.copy()
