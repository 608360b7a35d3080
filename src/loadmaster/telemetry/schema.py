"""The telemetry schema: GPU metrics keyed by DCGM field IDs, labelled as dcgm-exporter labels them.

Every source (the simulator's synthetic telemetry, the NVML agent, a
Prometheus server scraping dcgm-exporter) produces samples of these fields,
and every consumer (the store, the dashboard, diagnostics) reads them by
field ID, so a cluster that already runs dcgm-exporter needs no translation.
Names are kept as aliases: ``DCGM_FI_DEV_GPU_UTIL`` is field 203.

A sample is (time, series, field, value); a series is one GPU (or MIG
instance, or node for node-level fields) with its labels. In Arrow the
samples are a long table (:data:`SAMPLE_SCHEMA`) and the series a small
table of labels (:data:`SERIES_SCHEMA`) joined by ``series``.
"""

from __future__ import annotations

from dataclasses import dataclass
from enum import StrEnum

import pyarrow as pa


class Kind(StrEnum):
    """How a field's values behave, as Prometheus types them."""

    GAUGE = "gauge"
    COUNTER = "counter"
    """Monotonic until the device resets; readers must handle resets."""


class Scope(StrEnum):
    """What one series of a field describes."""

    GPU = "gpu"
    NODE = "node"


@dataclass(frozen=True)
class Field:
    """One telemetry field: DCGM ID (None for loadmaster's own node fields), name, unit, kind, meaning."""

    id: int | None
    name: str
    unit: str
    kind: Kind
    doc: str
    scope: Scope = Scope.GPU

    @property
    def key(self) -> str:
        """The name used in stores and the API: the DCGM name without its prefix (``GPU_UTIL``)."""
        for prefix in ("DCGM_FI_DEV_", "DCGM_FI_PROF_", "LOADMASTER_"):
            if self.name.startswith(prefix):
                return self.name[len(prefix) :]
        return self.name


FIELDS: tuple[Field, ...] = (
    Field(100, "DCGM_FI_DEV_SM_CLOCK", "MHz", Kind.GAUGE, "SM clock frequency"),
    Field(
        112,
        "DCGM_FI_DEV_CLOCKS_EVENT_REASONS",
        "bitmask",
        Kind.GAUGE,
        "why clocks are held down (throttling)",
    ),
    Field(150, "DCGM_FI_DEV_GPU_TEMP", "C", Kind.GAUGE, "GPU temperature"),
    Field(155, "DCGM_FI_DEV_POWER_USAGE", "W", Kind.GAUGE, "power draw"),
    Field(203, "DCGM_FI_DEV_GPU_UTIL", "%", Kind.GAUGE, "GPU utilisation (time a kernel ran)"),
    Field(204, "DCGM_FI_DEV_MEM_COPY_UTIL", "%", Kind.GAUGE, "memory copy utilisation"),
    Field(230, "DCGM_FI_DEV_XID_ERRORS", "xid", Kind.GAUGE, "value of the last XID error (0: none)"),
    Field(251, "DCGM_FI_DEV_FB_FREE", "MiB", Kind.GAUGE, "framebuffer memory free"),
    Field(252, "DCGM_FI_DEV_FB_USED", "MiB", Kind.GAUGE, "framebuffer memory used"),
    Field(310, "DCGM_FI_DEV_ECC_SBE_VOL_TOTAL", "errors", Kind.COUNTER, "single-bit volatile ECC errors"),
    Field(311, "DCGM_FI_DEV_ECC_DBE_VOL_TOTAL", "errors", Kind.COUNTER, "double-bit volatile ECC errors"),
    Field(1001, "DCGM_FI_PROF_GR_ENGINE_ACTIVE", "ratio", Kind.GAUGE, "graphics engine active (0-1)"),
    Field(1002, "DCGM_FI_PROF_SM_ACTIVE", "ratio", Kind.GAUGE, "SMs with at least one warp (0-1)"),
    Field(1004, "DCGM_FI_PROF_PIPE_TENSOR_ACTIVE", "ratio", Kind.GAUGE, "tensor pipes active (0-1)"),
    Field(1005, "DCGM_FI_PROF_DRAM_ACTIVE", "ratio", Kind.GAUGE, "device memory interface active (0-1)"),
    Field(1009, "DCGM_FI_PROF_PCIE_TX_BYTES", "B/s", Kind.GAUGE, "PCIe bytes sent"),
    Field(1010, "DCGM_FI_PROF_PCIE_RX_BYTES", "B/s", Kind.GAUGE, "PCIe bytes received"),
    Field(1011, "DCGM_FI_PROF_NVLINK_TX_BYTES", "B/s", Kind.GAUGE, "NVLink bytes sent"),
    Field(1012, "DCGM_FI_PROF_NVLINK_RX_BYTES", "B/s", Kind.GAUGE, "NVLink bytes received"),
    Field(None, "LOADMASTER_NODE_IB_TX_BYTES", "B/s", Kind.GAUGE, "node InfiniBand bytes sent", Scope.NODE),
    Field(
        None, "LOADMASTER_NODE_IB_RX_BYTES", "B/s", Kind.GAUGE, "node InfiniBand bytes received", Scope.NODE
    ),
)
"""Every field loadmaster collects, stores and shows."""

BY_KEY: dict[str, Field] = {f.key: f for f in FIELDS}
BY_ID: dict[int, Field] = {f.id: f for f in FIELDS if f.id is not None}
BY_NAME: dict[str, Field] = {f.name: f for f in FIELDS}


def field(ref: str | int) -> Field:
    """A field by DCGM ID (203), full name (``DCGM_FI_DEV_GPU_UTIL``) or key (``GPU_UTIL``)."""
    found = BY_ID.get(ref) if isinstance(ref, int) else BY_KEY.get(ref) or BY_NAME.get(ref)
    if found is None:
        raise KeyError(f"unknown telemetry field {ref!r}; known: {', '.join(BY_KEY)}")
    return found


LABELS: tuple[str, ...] = (
    "gpu",
    "UUID",
    "device",
    "modelName",
    "Hostname",
    "GPU_I_PROFILE",
    "GPU_I_ID",
    "pod",
    "namespace",
    "container",
    "job",
    "user",
)
"""Series labels: dcgm-exporter's (gpu index, UUID, device, model, host, MIG profile and instance,
Kubernetes pod/namespace/container) plus loadmaster's job and user."""

SERIES_SCHEMA = pa.schema(
    [pa.field("series", pa.int32(), nullable=False), pa.field("scope", pa.string(), nullable=False)]
    + [pa.field(label, pa.string()) for label in LABELS]
)
"""One row per series: its id, its scope (gpu or node) and its labels (null when not set)."""

SAMPLE_SCHEMA = pa.schema(
    [
        pa.field("time_s", pa.float64(), nullable=False),
        pa.field("series", pa.int32(), nullable=False),
        pa.field("field", pa.int32(), nullable=False),
        pa.field("value", pa.float64()),
    ]
)
"""One row per sample: seconds since the epoch (or simulation start), series id, field (DCGM ID, or
the negative index in :data:`FIELDS` for fields without one), value (null: the sample is missing)."""


def field_code(f: Field) -> int:
    """The integer stored in ``SAMPLE_SCHEMA.field``: the DCGM ID, or -(index + 1) for loadmaster's own."""
    return f.id if f.id is not None else -(FIELDS.index(f) + 1)
