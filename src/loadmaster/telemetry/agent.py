"""The node agent: reads the GPUs through NVML and serves dcgm-exporter-compatible ``/metrics``.

NVML sits behind :class:`GpuReader` (the seam, like an HTTP transport):
:class:`NvmlReader` talks to the driver through ``pynvml`` (nvidia-ml-py),
:class:`FakeReader` answers tests. Fields NVML gives directly: SM clock,
clock-event reasons, temperature, power, GPU and memory-copy utilisation, FB
used/free, volatile ECC totals; PCIe TX/RX come from NVML's PCIe throughput
counters (KB/s over its 20 ms window, an approximation of DCGM's profiling
fields). Absent, because only DCGM's profiling module measures them: every
``DCGM_FI_PROF_*`` activity ratio (SM, tensor, DRAM, graphics engine) and
NVLink bytes; XID errors (NVML reports them only as events); InfiniBand
(not a GPU field). Run dcgm-exporter beside or instead of the agent where
those are needed: the store reads both the same way.
"""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from typing import Any, Protocol

from loadmaster.errors import TelemetryError
from loadmaster.telemetry.exposition import LatestValues
from loadmaster.telemetry.schema import Field, Scope, field
from loadmaster.telemetry.store import Series

NVML_FIELDS: tuple[str, ...] = (
    "SM_CLOCK",
    "CLOCKS_EVENT_REASONS",
    "GPU_TEMP",
    "POWER_USAGE",
    "GPU_UTIL",
    "MEM_COPY_UTIL",
    "FB_FREE",
    "FB_USED",
    "ECC_SBE_VOL_TOTAL",
    "ECC_DBE_VOL_TOTAL",
    "PCIE_TX_BYTES",
    "PCIE_RX_BYTES",
)
"""Field keys the NVML reader can fill; the rest of the schema is absent from the agent."""


@dataclass(frozen=True)
class Device:
    """One GPU as NVML names it."""

    index: int
    uuid: str
    name: str


class GpuReader(Protocol):
    """What the agent needs from NVML."""

    def devices(self) -> Sequence[Device]:
        """The GPUs of this host."""
        ...

    def read(self, index: int) -> Mapping[str, float]:
        """Current values by field key (``GPU_UTIL``); a field the GPU does not support is left out."""
        ...


class NvmlReader:
    """:class:`GpuReader` over ``pynvml``; without a driver or GPU it raises a TelemetryError saying so."""

    def __init__(self) -> None:
        import pynvml  # noqa: PLC0415 - imported where used: only the agent needs the driver's library

        self._nvml: Any = pynvml
        try:
            pynvml.nvmlInit()
        except pynvml.NVMLError as exc:
            raise TelemetryError(
                f"cannot read GPUs through NVML ({exc}): this host has no NVIDIA driver or GPU; "
                "run the agent on a GPU node (or use --fake-gpus to try it)"
            ) from exc
        count = pynvml.nvmlDeviceGetCount()
        self._handles = [pynvml.nvmlDeviceGetHandleByIndex(i) for i in range(count)]

    def close(self) -> None:
        """Release NVML."""
        self._nvml.nvmlShutdown()

    def devices(self) -> list[Device]:
        """The GPUs NVML sees, by index."""
        nv = self._nvml
        return [
            Device(i, _text(nv.nvmlDeviceGetUUID(h)), _text(nv.nvmlDeviceGetName(h)))
            for i, h in enumerate(self._handles)
        ]

    def read(self, index: int) -> dict[str, float]:
        """Every NVML field this GPU supports."""
        nv, h = self._nvml, self._handles[index]
        readers: dict[str, Callable[[], float]] = {
            "SM_CLOCK": lambda: nv.nvmlDeviceGetClockInfo(h, nv.NVML_CLOCK_SM),
            "CLOCKS_EVENT_REASONS": lambda: nv.nvmlDeviceGetCurrentClocksEventReasons(h),
            "GPU_TEMP": lambda: nv.nvmlDeviceGetTemperature(h, nv.NVML_TEMPERATURE_GPU),
            "POWER_USAGE": lambda: nv.nvmlDeviceGetPowerUsage(h) / 1000.0,
            "GPU_UTIL": lambda: nv.nvmlDeviceGetUtilizationRates(h).gpu,
            "MEM_COPY_UTIL": lambda: nv.nvmlDeviceGetUtilizationRates(h).memory,
            "FB_FREE": lambda: nv.nvmlDeviceGetMemoryInfo(h).free / 2**20,
            "FB_USED": lambda: nv.nvmlDeviceGetMemoryInfo(h).used / 2**20,
            "ECC_SBE_VOL_TOTAL": lambda: nv.nvmlDeviceGetTotalEccErrors(
                h, nv.NVML_MEMORY_ERROR_TYPE_CORRECTED, nv.NVML_VOLATILE_ECC
            ),
            "ECC_DBE_VOL_TOTAL": lambda: nv.nvmlDeviceGetTotalEccErrors(
                h, nv.NVML_MEMORY_ERROR_TYPE_UNCORRECTED, nv.NVML_VOLATILE_ECC
            ),
            "PCIE_TX_BYTES": lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_TX_BYTES) * 1024.0,
            "PCIE_RX_BYTES": lambda: nv.nvmlDeviceGetPcieThroughput(h, nv.NVML_PCIE_UTIL_RX_BYTES) * 1024.0,
        }
        out: dict[str, float] = {}
        for key, read in readers.items():
            try:
                out[key] = float(read())
            except nv.NVMLError:
                continue  # not supported on this GPU (ECC off, no power sensor): absent, as DCGM leaves it
        return out


def _text(value: str | bytes) -> str:
    return value.decode() if isinstance(value, bytes) else value


class FakeReader:
    """A :class:`GpuReader` with fixed devices and values that tests (and ``--fake-gpus``) set."""

    def __init__(
        self, devices: Sequence[Device], values: Mapping[int, Mapping[str, float]] | None = None
    ) -> None:
        self._devices = list(devices)
        self.values: dict[int, dict[str, float]] = {
            d.index: dict((values or {}).get(d.index, {})) for d in devices
        }
        self.reads = 0

    @classmethod
    def busy(cls, gpus: int, model: str = "NVIDIA H100 80GB HBM3") -> FakeReader:
        """``gpus`` fake GPUs that look busy (for trying the agent without a GPU)."""
        devices = [Device(i, f"GPU-00000000-0000-0000-0000-{i:012d}", model) for i in range(gpus)]
        values = {
            "SM_CLOCK": 1980.0,
            "GPU_TEMP": 65.0,
            "POWER_USAGE": 550.0,
            "GPU_UTIL": 97.0,
            "FB_USED": 60000.0,
        }
        return cls(devices, {d.index: values for d in devices})

    def devices(self) -> list[Device]:
        """The fake GPUs."""
        return list(self._devices)

    def read(self, index: int) -> dict[str, float]:
        """The values set for GPU ``index``."""
        self.reads += 1
        return dict(self.values[index])


class Agent:
    """Reads every GPU at most once per ``interval_s`` and hands the values to the exposition.

    A scrape between two reads gets the cached values, so many scrapers cost
    NVML nothing extra. Labels are dcgm-exporter's: gpu, UUID, device,
    modelName, Hostname.
    """

    def __init__(
        self,
        reader: GpuReader,
        hostname: str | None = None,
        interval_s: float = 1.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.reader = reader
        self.hostname = hostname or socket.gethostname()
        self.interval_s = interval_s
        self._clock = clock
        self._lock = threading.Lock()
        self.series = [
            Series(
                d.index,
                Scope.GPU.value,
                {
                    "gpu": str(d.index),
                    "UUID": d.uuid,
                    "device": f"nvidia{d.index}",
                    "modelName": d.name,
                    "Hostname": self.hostname,
                },
            )
            for d in reader.devices()
        ]
        self._cached: LatestValues | None = None
        self._read_at = -float("inf")

    def latest(self) -> LatestValues:
        """The values of the last read, reading again when it is older than ``interval_s``."""
        with self._lock:
            now = self._clock()
            if self._cached is None or now - self._read_at >= self.interval_s:
                self._cached = self._read()
                self._read_at = now
            return self._cached

    def _read(self) -> LatestValues:
        values: dict[Field, dict[int, float]] = {}
        for series in self.series:
            for key, value in self.reader.read(series.id).items():
                values.setdefault(field(key), {})[series.id] = value
        return LatestValues(self.series, values)
