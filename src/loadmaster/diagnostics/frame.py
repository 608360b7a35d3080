"""A job's telemetry on one common time grid: the input every detector reads.

:class:`JobFrame` holds, per metric, a dense (GPUs x steps) matrix (node
metrics: nodes x steps), NaN where nothing was sampled. Builders read a
:class:`~loadmaster.telemetry.store.TelemetryStore`, Arrow tables or
Parquet/CSV files in the telemetry SAMPLE/SERIES schema. On the way in,
counters are made monotonic (device resets), NaN and null values count as
missing, and each GPU's own sampling interval is found so that a GPU sampled
every 5 s is not taken for missing on a 1 s grid (its values are carried
forward for up to one of its own intervals).

Step k of the grid holds samples with ``start_s + k step_s < t <= start_s +
(k + 1) step_s`` and is labelled by its end, ``times_s[k]``: a DCGM sample
at ``t`` averages the time just before it.
"""

from __future__ import annotations

import math
from collections.abc import Iterable, Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc
import pyarrow.csv as pacsv
import pyarrow.parquet as pq

from loadmaster.diagnostics.signals import (
    BoolArray,
    FloatArray,
    IntArray,
    correct_counter_resets,
    forward_fill,
)
from loadmaster.errors import TelemetryError
from loadmaster.telemetry.schema import FIELDS, SAMPLE_SCHEMA, Field, Kind, Scope, field_code
from loadmaster.telemetry.store import Series, TelemetryStore, series_from_table

GPU_FIELDS: tuple[Field, ...] = tuple(f for f in FIELDS if f.scope is Scope.GPU)
NODE_FIELDS: tuple[Field, ...] = tuple(f for f in FIELDS if f.scope is Scope.NODE)
_CODE_OFFSET = 1 << 16
"""Field codes (DCGM IDs, or small negative numbers) index a lookup table shifted by this."""
_PEAK_KEYS = frozenset({"CLOCKS_EVENT_REASONS", "XID_ERRORS"})
"""Fields whose per-step value is the step's max: a bitmask or an error code must not be averaged."""


@dataclass(frozen=True)
class GpuInfo:
    """One GPU of the job: its series id, host, index on the host, job and user labels."""

    series: int
    hostname: str
    index: str
    job: str | None = None
    user: str | None = None

    @property
    def name(self) -> str:
        """``host/index``, as findings name GPUs."""
        return f"{self.hostname}/{self.index}"


@dataclass(frozen=True)
class JobFrame:
    """A job's metrics on a common grid (see the module docstring for the grid's convention)."""

    job: str
    times_s: FloatArray
    step_s: float
    gpus: tuple[GpuInfo, ...]
    nodes: tuple[str, ...]
    node_of_gpu: IntArray
    metrics: Mapping[str, FloatArray]
    """GPU fields by key (``SM_ACTIVE``), (GPUs x steps), after gap filling."""
    node_metrics: Mapping[str, FloatArray]
    """Node fields by key (``NODE_IB_TX_BYTES``), (nodes x steps)."""
    present: BoolArray
    """(GPUs x steps): whether the GPU sent any sample in (or within its own interval before) the step."""
    native_step_s: FloatArray
    """Each GPU's own sampling interval (median gap between its samples), seconds."""

    @property
    def start_s(self) -> float:
        """Start of the first step."""
        return float(self.times_s[0] - self.step_s) if self.times_s.size else 0.0

    def metric(self, key: str) -> FloatArray:
        """A GPU metric, all NaN when the source did not have it."""
        found = self.metrics.get(key)
        return found if found is not None else np.full((len(self.gpus), self.times_s.size), np.nan)

    def interval(self, first: int, last: int) -> tuple[float, float]:
        """The time span (start, end] covered by steps ``first..last``."""
        return float(self.times_s[first] - self.step_s), float(self.times_s[last])

    @property
    def gpu_hours(self) -> float:
        """GPUs x hours covered: the denominator of analysis speed."""
        return len(self.gpus) * self.times_s.size * self.step_s / 3600.0


def grid(start_s: float, end_s: float, step_s: float) -> FloatArray:
    """Step end times of the grid from ``start_s`` to ``end_s`` (at least one step)."""
    if not step_s > 0 or not end_s > start_s:
        raise TelemetryError(
            f"a job frame needs step_s > 0 and end_s > start_s, got {step_s}, {start_s}, {end_s}"
        )
    n = max(1, math.ceil((end_s - start_s) / step_s - 1e-9))
    return np.asarray(start_s + step_s * np.arange(1, n + 1), dtype=np.float64)


def job_series(series: Sequence[Series], job: str | None) -> tuple[list[Series], list[Series]]:
    """The GPU series of ``job`` (all GPU series when None) and the node series of their hosts."""
    gpus = [s for s in series if s.scope == Scope.GPU.value and (job is None or s.labels.get("job") == job)]
    if not gpus:
        known = sorted({s.labels.get("job", "") for s in series if s.labels.get("job")})
        raise TelemetryError(
            f"no GPU series of job {job!r}; jobs with telemetry: {', '.join(known) or 'none'}"
        )
    hosts = {s.labels.get("Hostname", "") for s in gpus}
    nodes = [s for s in series if s.scope == Scope.NODE.value and s.labels.get("Hostname", "") in hosts]
    return gpus, nodes


class FrameBuilder:
    """Accumulates sample batches into per-step sums, counts and maxima; :meth:`frame` finishes."""

    def __init__(
        self, series: Sequence[Series], job: str | None, start_s: float, end_s: float, step_s: float
    ) -> None:
        gpu_series, node_series = job_series(series, job)
        gpu_series = sorted(gpu_series, key=lambda s: (s.labels.get("Hostname", ""), _index_key(s)))
        self.job = job or (gpu_series[0].labels.get("job") or "all")
        self.gpus = tuple(
            GpuInfo(
                s.id,
                s.labels.get("Hostname", "?"),
                s.labels.get("gpu", str(s.id)),
                s.labels.get("job"),
                s.labels.get("user"),
            )
            for s in gpu_series
        )
        self.nodes = tuple(sorted({g.hostname for g in self.gpus}))
        node_rows = {s.labels.get("Hostname", ""): s.id for s in node_series}
        self.times = grid(start_s, end_s, step_s)
        self.start_s, self.step_s = start_s, step_s
        self.fields = GPU_FIELDS + NODE_FIELDS
        self._code_slot = {field_code(f): i for i, f in enumerate(self.fields)}
        self._slot_lut = np.full(2 * _CODE_OFFSET, -1, dtype=np.int64)
        for code, slot in self._code_slot.items():
            self._slot_lut[code + _CODE_OFFSET] = slot
        max_id = max([s.id for s in series] + [0]) + 1
        self._gpu_row = np.full(max_id, -1, dtype=np.int64)
        self._gpu_row[[g.series for g in self.gpus]] = np.arange(len(self.gpus))
        self._node_row = np.full(max_id, -1, dtype=np.int64)
        for k, host in enumerate(self.nodes):
            if host in node_rows:
                self._node_row[node_rows[host]] = k
        rows = max(len(self.gpus), len(self.nodes))
        self._shape = (len(self.fields), rows, self.times.size)
        self._sum = np.zeros(int(np.prod(self._shape)))
        self._count = np.zeros_like(self._sum)
        self._max = {
            f.key: np.full((rows, self.times.size), np.nan) for f in self.fields if f.key in _PEAK_KEYS
        }

    def add(self, samples: pa.Table) -> None:
        """Add one batch in SAMPLE_SCHEMA (other columns ignored; unknown series and fields skipped)."""
        table = samples.select(SAMPLE_SCHEMA.names).cast(SAMPLE_SCHEMA)
        t = np.asarray(table.column("time_s").to_numpy(), dtype=np.float64)
        s = np.asarray(table.column("series").to_numpy(), dtype=np.int64)
        f = np.asarray(table.column("field").to_numpy(), dtype=np.int64)
        v = np.asarray(pc.fill_null(table.column("value"), np.nan).to_numpy(), dtype=np.float64)
        known = (s >= 0) & (s < self._gpu_row.size)
        s_ok = np.where(known, s, 0)
        f_ok = (f >= -_CODE_OFFSET) & (f < _CODE_OFFSET)
        fslot = np.where(f_ok, self._slot_lut[np.where(f_ok, f, 0) + _CODE_OFFSET], -1)
        is_node = fslot >= len(GPU_FIELDS)
        row = np.where(is_node, self._node_row[s_ok], self._gpu_row[s_ok])
        k = np.ceil((t - self.start_s) / self.step_s - 1e-9).astype(np.int64) - 1
        keep = known & (fslot >= 0) & (row >= 0) & (k >= 0) & (k < self.times.size) & np.isfinite(v)
        flat = (fslot[keep] * self._shape[1] + row[keep]) * self._shape[2] + k[keep]
        self._sum += np.bincount(flat, weights=v[keep], minlength=self._sum.size)
        self._count += np.bincount(flat, minlength=self._count.size)
        for key, peak in self._max.items():
            sel = keep & (fslot == self._code_slot[field_code(_by_key(key))])
            np.fmax.at(peak, (row[sel], k[sel]), v[sel])

    def frame(self) -> JobFrame:
        """The finished frame: means per step, counters reset-corrected, gaps within a GPU's own
        sampling interval filled."""
        total = self._sum.reshape(self._shape)
        count = self._count.reshape(self._shape)
        with np.errstate(invalid="ignore", divide="ignore"):
            mean = np.where(count > 0, total / np.maximum(count, 1), np.nan)
        g, n = len(self.gpus), len(self.nodes)
        raw = {
            f.key: self._max.get(f.key, mean[i])[: g if f.scope is Scope.GPU else n]
            for i, f in enumerate(self.fields)
        }
        return finish_frame(self.job, self.times, self.step_s, self.gpus, self.nodes, raw)


def _by_key(key: str) -> Field:
    return next(f for f in FIELDS if f.key == key)


def _index_key(s: Series) -> tuple[int, str]:
    index = s.labels.get("gpu", "")
    return (int(index), "") if index.isdigit() else (1 << 30, index)


def finish_frame(  # noqa: PLR0917 - the parts of a frame, in order
    job: str,
    times: FloatArray,
    step_s: float,
    gpus: tuple[GpuInfo, ...],
    nodes: tuple[str, ...],
    raw: Mapping[str, FloatArray],
) -> JobFrame:
    """Build a frame from raw per-step values (NaN = no sample): resets, native intervals, filling."""
    g = len(gpus)
    present = np.zeros((g, times.size), dtype=bool)
    for f in GPU_FIELDS:
        present |= np.isfinite(raw[f.key])
    native = _native_steps(present)
    metrics: dict[str, FloatArray] = {}
    for f in GPU_FIELDS:
        values = raw[f.key]
        if f.kind is Kind.COUNTER:
            values = correct_counter_resets(values)
        metrics[f.key] = forward_fill(values, native - 1)
    node_metrics = {f.key: np.asarray(raw[f.key], dtype=np.float64) for f in NODE_FIELDS}
    filled = forward_fill(np.where(present, 1.0, np.nan), native - 1)
    host_index = {h: i for i, h in enumerate(nodes)}
    return JobFrame(
        job=job,
        times_s=times,
        step_s=step_s,
        gpus=gpus,
        nodes=nodes,
        node_of_gpu=np.array([host_index[x.hostname] for x in gpus], dtype=np.int64),
        metrics=metrics,
        node_metrics=node_metrics,
        present=np.isfinite(filled),
        native_step_s=native.astype(np.float64) * step_s,
    )


def _native_steps(present: BoolArray) -> IntArray:
    """Each row's sampling interval in grid steps: the median gap between present steps (>= 1)."""
    out = np.ones(present.shape[0], dtype=np.int64)
    for r in range(present.shape[0]):
        idx = np.flatnonzero(present[r])
        if idx.size >= 3:
            out[r] = max(1, round(float(np.median(np.diff(idx)))))
    return out


# ---------------------------------------------------------------------------- sources


def frame_from_tables(  # noqa: PLR0917 - source, then optional grid
    series: Sequence[Series],
    samples: Iterable[pa.Table],
    job: str | None = None,
    step_s: float | None = None,
    start_s: float | None = None,
    end_s: float | None = None,
) -> JobFrame:
    """A frame from sample batches. Without ``start_s``/``end_s`` the batches are read twice (a list
    is needed); without ``step_s`` the grid step is the finest sampling interval seen (at least 1 s)."""
    if start_s is None or end_s is None or step_s is None:
        batches = list(samples)
        times = np.concatenate(
            [np.asarray(b.column("time_s").to_numpy(), dtype=np.float64) for b in batches] or [np.zeros(0)]
        )
        if times.size == 0:
            raise TelemetryError("no samples to diagnose")
        uniq = np.unique(times)
        gap = float(np.median(np.diff(uniq))) if uniq.size > 1 else 1.0
        step_s = step_s or max(1.0, gap)
        start_s = float(uniq[0]) - gap if start_s is None else start_s
        end_s = float(uniq[-1]) if end_s is None else end_s
        samples = batches
    builder = FrameBuilder(series, job, start_s, end_s, step_s)
    for table in samples:
        builder.add(table)
    return builder.frame()


def frame_from_store(
    store: TelemetryStore, job: str, start_s: float, end_s: float, step_s: float = 1.0
) -> JobFrame:
    """A frame from a store's ``range`` reads (the store bins; bitmask and XID fields use the step max)."""
    gpu_series, node_series = job_series(store.series(), job)
    builder = FrameBuilder([*gpu_series, *node_series], job, start_s, end_s, step_s)
    times = builder.times
    shift = 1e-6 * step_s  # store steps are [t, t + step); ours are (t, t + step]
    raw: dict[str, FloatArray] = {}
    gpu_ids = [g.series for g in builder.gpus]
    node_ids = {s.labels.get("Hostname", ""): s.id for s in node_series}
    for f in builder.fields:
        if f.scope is Scope.GPU:
            rng = store.range(f, gpu_ids, start_s + shift, end_s + shift, step_s)
            raw[f.key] = _fit(rng.peak if f.key in _PEAK_KEYS else rng.mean, times.size)
        else:
            ids = [node_ids[h] for h in builder.nodes if h in node_ids]
            values = np.full((len(builder.nodes), times.size), np.nan)
            if ids:
                rng = store.range(f, ids, start_s + shift, end_s + shift, step_s)
                rows = [i for i, h in enumerate(builder.nodes) if h in node_ids]
                values[rows] = _fit(rng.mean, times.size)
            raw[f.key] = values
    return finish_frame(builder.job, times, step_s, builder.gpus, builder.nodes, raw)


def _fit(m: FloatArray, n: int) -> FloatArray:
    out = np.full((m.shape[0], n), np.nan)
    out[:, : min(n, m.shape[1])] = m[:, :n]
    return out


def read_table(path: Path) -> pa.Table:
    """A Parquet (``.parquet``) or CSV file as an Arrow table."""
    if not path.exists():
        raise TelemetryError(f"{path}: no such file")
    if path.suffix.lower() in {".parquet", ".pq"}:
        return pq.read_table(path)
    return pacsv.read_csv(path)


def frame_from_files(
    samples_path: Path, series_path: Path, job: str | None = None, step_s: float | None = None
) -> JobFrame:
    """A frame from a samples file (SAMPLE_SCHEMA) and a series file (SERIES_SCHEMA), Parquet or CSV."""
    series_table = read_table(series_path)
    for name in ("series", "scope"):
        if name not in series_table.column_names:
            raise TelemetryError(f"{series_path}: series file lacks column {name!r} (see SERIES_SCHEMA)")
    series = series_from_table(_with_labels(series_table))
    return frame_from_tables(series, [read_table(samples_path)], job=job, step_s=step_s)


def _with_labels(table: pa.Table) -> pa.Table:
    """A series table with every SERIES_SCHEMA column (missing labels null, all as strings)."""
    from loadmaster.telemetry.schema import SERIES_SCHEMA  # noqa: PLC0415 - local to this adapter

    columns = {}
    for fld in SERIES_SCHEMA:
        if fld.name in table.column_names:
            columns[fld.name] = table.column(fld.name).cast(fld.type)
        else:
            columns[fld.name] = pa.nulls(table.num_rows, fld.type)
    return pa.table(columns, schema=SERIES_SCHEMA)
