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

MIG instances are series of their own, labelled as dcgm-exporter labels them
(the parent's ``gpu``, ``UUID`` and ``device`` plus ``GPU_I_PROFILE`` and
``GPU_I_ID``), with the memory NVML reports per instance. With a
:class:`~loadmaster.telemetry.pods.PodSource` (the kubelet's pod-resources
API) every GPU and MIG instance allocated to a container carries its ``pod``,
``namespace`` and ``container``.

NVML is read in a thread of its own (:meth:`Agent.start`): a scrape returns
the last sample and its age (``loadmaster_agent_sample_age_seconds``) and
never waits for the driver, so a hung GPU shows as a growing age, not as a
scrape that times out.
"""

from __future__ import annotations

import json
import logging
import math
import socket
import threading
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, Protocol

from loadmaster.errors import TelemetryError
from loadmaster.telemetry.exposition import Gauge, LatestValues
from loadmaster.telemetry.pods import PodRef, PodSource, labels_for, owners
from loadmaster.telemetry.schema import Field, Scope, field
from loadmaster.telemetry.store import Series

LOG = logging.getLogger("loadmaster.agent")

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
MIG_FIELDS: tuple[str, ...] = ("FB_FREE", "FB_USED")
"""Field keys NVML gives per MIG instance (utilisation, clocks and power are the parent GPU's)."""


@dataclass(frozen=True)
class Device:
    """One GPU as NVML names it."""

    index: int
    uuid: str
    name: str


@dataclass(frozen=True)
class MigDevice:
    """One MIG instance: its parent GPU's index, GPU instance id, profile (``1g.10gb``) and MIG UUID."""

    parent: int
    gpu_instance: int
    profile: str
    uuid: str


class GpuReader(Protocol):
    """What the agent needs from NVML."""

    def devices(self) -> Sequence[Device]:
        """The GPUs of this host."""
        ...

    def mig_devices(self) -> Sequence[MigDevice]:
        """The MIG instances of every GPU in MIG mode (none when MIG is off)."""
        ...

    def read(self, index: int) -> Mapping[str, float]:
        """Current values by field key (``GPU_UTIL``); a field the GPU does not support is left out."""
        ...

    def read_mig(self, uuid: str) -> Mapping[str, float]:
        """Current values of one MIG instance by field key (of :data:`MIG_FIELDS`)."""
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
        self._mig_handles: dict[str, Any] = {}

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

    def mig_devices(self) -> list[MigDevice]:
        """Every MIG instance, by parent and slot. The profile name is NVML's slice count and memory
        (``{slices}g.{GiB rounded up}gb``), the form of NVIDIA's profile names."""
        nv = self._nvml
        out: list[MigDevice] = []
        for index, handle in enumerate(self._handles):
            try:
                current, _ = nv.nvmlDeviceGetMigMode(handle)
            except nv.NVMLError:
                continue  # no MIG support on this GPU
            if current != nv.NVML_DEVICE_MIG_ENABLE:
                continue
            for slot in range(nv.nvmlDeviceGetMaxMigDeviceCount(handle)):
                try:
                    mig = nv.nvmlDeviceGetMigDeviceHandleByIndex(handle, slot)
                except nv.NVMLError:
                    continue  # an empty slot
                attrs = nv.nvmlDeviceGetAttributes(mig)
                profile = f"{attrs.gpuInstanceSliceCount}g.{math.ceil(attrs.memorySizeMB / 1024)}gb"
                uuid = _text(nv.nvmlDeviceGetUUID(mig))
                self._mig_handles[uuid] = mig
                out.append(MigDevice(index, int(nv.nvmlDeviceGetGpuInstanceId(mig)), profile, uuid))
        return out

    def read_mig(self, uuid: str) -> dict[str, float]:
        """Memory of one MIG instance (MiB)."""
        nv = self._nvml
        try:
            info = nv.nvmlDeviceGetMemoryInfo(self._mig_handles[uuid])
        except nv.NVMLError:
            return {}
        return {"FB_FREE": info.free / 2**20, "FB_USED": info.used / 2**20}

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
    """A :class:`GpuReader` with fixed devices and values that tests (and ``--fake-gpus``) set.

    ``values_file``: a JSON object ``{"0": {"XID_ERRORS": 79}}`` laid over the values at every read
    (so a test can inject a fault into a running agent); ``hang`` set blocks every read until cleared
    (a hung GPU).
    """

    def __init__(
        self,
        devices: Sequence[Device],
        values: Mapping[int, Mapping[str, float]] | None = None,
        *,
        mig: Sequence[MigDevice] = (),
        values_file: Path | None = None,
    ) -> None:
        self._devices = list(devices)
        self._mig = list(mig)
        self.values: dict[int, dict[str, float]] = {
            d.index: dict((values or {}).get(d.index, {})) for d in devices
        }
        self.mig_values: dict[str, dict[str, float]] = {m.uuid: {} for m in self._mig}
        self.values_file = values_file
        self.reads = 0
        self.hang = threading.Event()
        self.released = threading.Event()

    @classmethod
    def busy(cls, gpus: int, model: str = "NVIDIA H100 80GB HBM3", *, host_tag: int = 0,
             values_file: Path | None = None) -> FakeReader:  # fmt: skip
        """``gpus`` fake GPUs that look busy (for trying the agent without a GPU); ``host_tag`` goes into
        their UUIDs so that several fake nodes have distinct GPUs."""
        devices = [Device(i, f"GPU-{host_tag:08d}-0000-0000-0000-{i:012d}", model) for i in range(gpus)]
        values = {
            "SM_CLOCK": 1980.0,
            "GPU_TEMP": 65.0,
            "POWER_USAGE": 550.0,
            "GPU_UTIL": 97.0,
            "FB_USED": 60000.0,
            "FB_FREE": 21559.0,
            "XID_ERRORS": 0.0,
        }
        return cls(devices, {d.index: values for d in devices}, values_file=values_file)

    def devices(self) -> list[Device]:
        """The fake GPUs."""
        return list(self._devices)

    def mig_devices(self) -> list[MigDevice]:
        """The fake MIG instances."""
        return list(self._mig)

    def read(self, index: int) -> dict[str, float]:
        """The values set for GPU ``index`` (with the values file laid over them)."""
        while self.hang.is_set() and not self.released.is_set():
            time.sleep(0.01)
        self.reads += 1
        out = dict(self.values[index])
        out.update(self._overlay().get(str(index), {}))
        return out

    def read_mig(self, uuid: str) -> dict[str, float]:
        """The values set for one MIG instance."""
        return dict(self.mig_values[uuid])

    def _overlay(self) -> dict[str, dict[str, float]]:
        if self.values_file is None or not self.values_file.exists():
            return {}
        try:
            data = json.loads(self.values_file.read_text() or "{}")
        except json.JSONDecodeError as exc:
            raise TelemetryError(f"{self.values_file}: not JSON ({exc})") from exc
        return {str(k): {str(f): float(v) for f, v in vals.items()} for k, vals in data.items()}


@dataclass(frozen=True)
class Sample:
    """One read of every GPU: the values, when it was taken (the agent's clock) and how long it took."""

    values: LatestValues
    taken_s: float
    duration_s: float


class Agent:
    """Reads every GPU (and MIG instance) and labels each with the pod that holds it; serves the last read.

    :meth:`sample` reads once in the caller's thread; :meth:`start` runs it every
    ``interval_s`` in a thread of its own. :meth:`latest` (what a scrape calls)
    never reads: it returns the last sample with its age, so many scrapers
    cost NVML nothing and a hung GPU cannot block a scrape. Labels are
    dcgm-exporter's: gpu, UUID, device, modelName, Hostname, GPU_I_PROFILE and
    GPU_I_ID on MIG instances, pod/namespace/container when allocated.
    """

    def __init__(
        self,
        reader: GpuReader,
        hostname: str | None = None,
        interval_s: float = 1.0,
        *,
        clock: Callable[[], float] = time.monotonic,
        pods: PodSource | None = None,
        stale_after_s: float | None = None,
    ) -> None:
        self.reader = reader
        self.stale_after_s = stale_after_s if stale_after_s is not None else max(3 * interval_s, 10.0)
        """``/healthz`` fails once the last sample is this old (default: three intervals, at least 10 s)."""
        self.hostname = hostname or socket.gethostname()
        self.interval_s = interval_s
        self.pods = pods
        self._clock = clock
        self._lock = threading.Lock()
        devices = list(reader.devices())
        self._mig = list(reader.mig_devices())
        by_index = {d.index: d for d in devices}
        self.series: list[Series] = [Series(d.index, Scope.GPU.value, self._gpu_labels(d)) for d in devices]
        self._keys: list[tuple[str, ...]] = [(d.uuid, f"nvidia{d.index}") for d in devices]
        first = max((d.index for d in devices), default=-1) + 1
        for k, m in enumerate(self._mig):
            parent = self._gpu_labels(by_index[m.parent])
            labels = {**parent, "GPU_I_PROFILE": m.profile, "GPU_I_ID": str(m.gpu_instance)}
            self.series.append(Series(first + k, Scope.GPU.value, labels))
            self._keys.append((m.uuid, f"{m.parent}-{m.gpu_instance}"))
        self._parent_row = {d.index: row for row, d in enumerate(devices)}
        self._last: Sample | None = None
        self._started_s = clock()
        self.samples = 0
        self.read_errors = 0
        self.pod_errors = 0
        self._pods_ok: bool | None = None
        self._stop = threading.Event()
        self._thread: threading.Thread | None = None

    def _gpu_labels(self, d: Device) -> dict[str, str]:
        return {"gpu": str(d.index), "UUID": d.uuid, "device": f"nvidia{d.index}", "modelName": d.name,
                "Hostname": self.hostname}  # fmt: skip

    def sample(self) -> Sample:
        """Read every GPU and MIG instance and the pods now; keep and return the sample."""
        began = self._clock()
        values: dict[Field, dict[int, float]] = {}
        for series in self.series[: len(self._parent_row)]:
            for key, value in self.reader.read(series.id).items():
                values.setdefault(field(key), {})[series.id] = value
        for k, m in enumerate(self._mig):
            sid = len(self._parent_row) + k
            for key, value in self.reader.read_mig(m.uuid).items():
                values.setdefault(field(key), {})[sid] = value
        labelled = self._labelled(self._owners())
        ended = self._clock()
        taken = Sample(LatestValues(labelled, values), ended, ended - began)
        with self._lock:
            self._last = taken
            self.samples += 1
        return taken

    def _owners(self) -> dict[str, PodRef]:
        """Device key -> pod, or nothing when the kubelet cannot say (labels dropped, as dcgm-exporter)."""
        if self.pods is None:
            return {}
        try:
            found = owners(self.pods.allocations())
        except TelemetryError as exc:
            self.pod_errors += 1
            if self._pods_ok is not False:
                LOG.warning("cannot read pods, GPUs go unlabelled until it works again: %s", exc)
            self._pods_ok = False
            return {}
        if self._pods_ok is False:
            LOG.info("reading pods works again")
        self._pods_ok = True
        return found

    def _labelled(self, found: Mapping[str, PodRef]) -> list[Series]:
        """The series with pod labels; a GPU in MIG mode takes its instances' pod when there is only one."""
        pods = [labels_for(keys, found) for keys in self._keys]
        by_parent: dict[int, set[tuple[tuple[str, str], ...]]] = {}
        for k, m in enumerate(self._mig):
            own = pods[len(self._parent_row) + k]
            if own:
                by_parent.setdefault(m.parent, set()).add(tuple(sorted(own.items())))
        for parent, held in by_parent.items():
            row = self._parent_row[parent]
            if not pods[row] and len(held) == 1:
                pods[row] = dict(next(iter(held)))
        return [
            Series(s.id, s.scope, {**s.labels, **p}) if p else s
            for s, p in zip(self.series, pods, strict=True)
        ]

    def latest(self) -> LatestValues:
        """The last sample (nothing before the first) with the agent's own gauges: its age and counts."""
        with self._lock:
            last = self._last
        now = self._clock()
        age = now - last.taken_s if last is not None else math.inf
        extra = (
            Gauge("loadmaster_agent_sample_age_seconds", "Seconds since the GPUs were last read.", age),
            Gauge(
                "loadmaster_agent_sample_duration_seconds",
                "Seconds the last read of every GPU took.",
                last.duration_s if last is not None else math.nan,
            ),
            Gauge("loadmaster_agent_samples_total", "Reads of every GPU.", float(self.samples), "counter"),
            Gauge(
                "loadmaster_agent_read_errors_total", "Reads that failed.", float(self.read_errors), "counter"
            ),
            Gauge(
                "loadmaster_agent_pod_resources_errors_total",
                "Failed pod-resources List calls.",
                float(self.pod_errors),
                "counter",
            ),
        )
        if last is None:
            return LatestValues(self.series, {}, extra)
        return LatestValues(last.values.series, last.values.values, extra)

    def health(self) -> tuple[bool, str]:
        """Healthy while the last sample is younger than ``stale_after_s``."""
        with self._lock:
            last = self._last
        limit = self.stale_after_s
        if last is None:
            waited = self._clock() - self._started_s
            return waited < limit, f"no sample yet after {waited:.1f} s"
        age = self._clock() - last.taken_s
        return age < limit, f"last sample {age:.1f} s old (limit {limit:g} s)"

    def start(self) -> Agent:
        """Read every ``interval_s`` in a daemon thread until :meth:`stop`; returns itself."""
        self._thread = threading.Thread(target=self._run, name="nvml-sampler", daemon=True)
        self._thread.start()
        return self

    def stop(self, timeout_s: float = 5.0) -> None:
        """Stop the sampler (a read in progress is left to finish: the thread is a daemon)."""
        self._stop.set()
        if self._thread is not None:
            self._thread.join(timeout_s)

    def _run(self) -> None:
        while not self._stop.is_set():
            began = self._clock()
            try:
                self.sample()
            except Exception:  # a failed read is logged and counted; the next interval tries again
                self.read_errors += 1
                LOG.exception("reading the GPUs failed (the last sample is served meanwhile)")
            self._stop.wait(max(0.0, self.interval_s - (self._clock() - began)))
