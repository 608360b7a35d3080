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
from typing import Any

import numpy as np
import numpy.typing as npt
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
    """Bins sample batches onto the grid as per-step sums, counts and maxima; :meth:`frame` finishes.

    Each (field, GPU) and (field, node) pair is a *cell*; the accumulators are (cells x steps).
    A batch is binned in one vectorised pass: a lookup table maps (series, field) to a cell, and
    one ``np.bincount`` over the cells x (the batch's step range) gives its sums and counts, so
    the cost is linear in the batch and in its time span, not in the whole frame.
    """

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
        self.times = grid(start_s, end_s, step_s)
        self.start_s, self.step_s = start_s, step_s
        self.fields = GPU_FIELDS + NODE_FIELDS
        self._first_cell = self._cell_offsets()
        self._cell_lut = self._cell_table(series, node_series)
        n_cells, steps = int(self._first_cell[-1]), self.times.size
        self._sum = np.zeros((n_cells, steps))
        self._count: npt.NDArray[np.integer[Any]] = np.zeros((n_cells, steps), dtype=np.uint8)
        self._count_bound = 0
        self._finished = False
        """Most samples any (cell, step) can hold so far; the counts widen past uint8's range."""
        peak_slots = [i for i, f in enumerate(self.fields) if f.key in _PEAK_KEYS]
        self._peak_cells = np.concatenate(
            [np.zeros(0, dtype=np.int64)]
            + [np.arange(self._first_cell[i], self._first_cell[i + 1]) for i in peak_slots]
        ).astype(np.int64)
        self._peak_of_cell = np.full(n_cells + 1, -1, dtype=np.int64)
        self._peak_of_cell[self._peak_cells] = np.arange(self._peak_cells.size)
        self._max = np.full((self._peak_cells.size, steps), np.nan)

    def _cell_offsets(self) -> IntArray:
        """First cell of each field slot (and the cell count last): GPU fields, then node fields."""
        rows = [len(self.gpus) if f.scope is Scope.GPU else len(self.nodes) for f in self.fields]
        return np.concatenate(([0], np.cumsum(rows))).astype(np.int64)

    def _cell_table(self, series: Sequence[Series], node_series: Sequence[Series]) -> IntArray:
        """(series id x field slot) -> cell, flattened; -1 where the pair is not in the frame."""
        n_fields = len(self.fields)
        max_id = max([s.id for s in series] + [0]) + 1
        self._slot_lut = np.full(2 * _CODE_OFFSET + 1, n_fields, dtype=np.int64)
        for slot, f in enumerate(self.fields):
            self._slot_lut[field_code(f) + _CODE_OFFSET] = slot
        lut = np.full((max_id + 1, n_fields + 1), -1, dtype=np.int64)
        n_gpu_fields = len(GPU_FIELDS)
        for row, g in enumerate(self.gpus):
            lut[g.series, :n_gpu_fields] = self._first_cell[:n_gpu_fields] + row
        node_rows = {s.labels.get("Hostname", ""): s.id for s in node_series}
        for row, host in enumerate(self.nodes):
            if host in node_rows:
                lut[node_rows[host], n_gpu_fields:n_fields] = self._first_cell[n_gpu_fields:n_fields] + row
        self._lut_width = n_fields + 1
        return lut.reshape(-1)

    def add(self, samples: pa.Table) -> None:
        """Add one batch in SAMPLE_SCHEMA (other columns ignored; unknown series and fields skipped)."""
        table = samples.select(SAMPLE_SCHEMA.names).cast(SAMPLE_SCHEMA)
        cell = self._cells(table)
        k = np.asarray(table.column("time_s").to_numpy(), dtype=np.float64) - self.start_s
        np.divide(k, self.step_s, out=k)
        k -= 1e-9
        np.ceil(k, out=k)
        step = k.astype(np.int64)
        step -= 1
        value = table.column("value")
        if value.null_count:
            value = pc.fill_null(value, np.nan)
        v = np.asarray(value.to_numpy(), dtype=np.float64)
        keep = (cell >= 0) & (step >= 0) & (step < self.times.size) & np.isfinite(v)
        if not keep.all():
            cell, step, v = cell[keep], step[keep], v[keep]
        if cell.size:
            self._accumulate(cell, step, v)

    def _cells(self, table: pa.Table) -> IntArray:
        """Each sample's cell (-1: not in the frame). Looked up once per run of equal (series, field),
        since batches usually come ordered by field and series; unknown ids hit -1 sentinels."""
        s = np.asarray(table.column("series").to_numpy(), dtype=np.int32)
        f = np.asarray(table.column("field").to_numpy(), dtype=np.int32)
        if s.size == 0:
            return np.zeros(0, dtype=np.int64)
        change = s[1:] != s[:-1]
        change |= f[1:] != f[:-1]
        starts = np.concatenate(([0], np.flatnonzero(change) + 1))
        lengths = np.diff(np.append(starts, s.size))
        run_series = s[starts].astype(np.int64)
        slot = np.take(self._slot_lut, f[starts].astype(np.int64) + _CODE_OFFSET, mode="clip")
        max_id = self._cell_lut.size // self._lut_width - 1
        run_series[(run_series < 0) | (run_series > max_id)] = max_id
        return np.repeat(self._cell_lut[run_series * self._lut_width + slot], lengths)

    def _accumulate(self, cell: IntArray, step: IntArray, v: FloatArray) -> None:
        """Add binned sums, counts and maxima over the batch's step range to the accumulators."""
        first, last = int(step.min()), int(step.max())
        width = last - first + 1
        flat = cell * width
        flat += step
        flat -= first
        size = self._sum.shape[0] * width
        self._sum[:, first : last + 1] += np.bincount(flat, weights=v, minlength=size).reshape(-1, width)
        count = np.bincount(flat, minlength=size)
        self._count_bound += int(count.max())
        if self._count_bound > np.iinfo(self._count.dtype).max:
            self._count = self._count.astype(np.int64)
        self._count[:, first : last + 1] += count.reshape(-1, width).astype(self._count.dtype)
        if self._peak_cells.size:
            peak = self._peak_of_cell[cell]
            sel = peak >= 0
            if sel.any():
                np.fmax.at(self._max, (peak[sel], step[sel]), v[sel])

    def frame(self) -> JobFrame:
        """The finished frame: means per step, counters reset-corrected, gaps within a GPU's own
        sampling interval filled. Call it once: the sums become the means in place."""
        if self._finished:
            raise TelemetryError("FrameBuilder.frame() was already called; build a new FrameBuilder")
        self._finished = True
        mean = self._sum
        with np.errstate(invalid="ignore", divide="ignore"):
            np.divide(mean, self._count, out=mean)
        mean[self._count == 0] = np.nan
        mean[self._peak_cells] = self._max
        raw = {f.key: mean[self._first_cell[i] : self._first_cell[i + 1]] for i, f in enumerate(self.fields)}
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
        metrics[f.key] = _fill_gaps(values, native - 1)
    node_metrics = {f.key: np.asarray(raw[f.key], dtype=np.float64) for f in NODE_FIELDS}
    filled = _fill_gaps(np.where(present, 1.0, np.nan), native - 1)
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


def _fill_gaps(values: FloatArray, limit: IntArray) -> FloatArray:
    """:func:`forward_fill` on the rows with ``limit > 0`` only (others need none): most GPUs are
    sampled on the grid, and their matrices are passed through without a copy."""
    rows = np.flatnonzero(limit > 0)
    if rows.size == 0:
        return values
    out = np.array(values, dtype=np.float64)
    out[rows] = forward_fill(out[rows], limit[rows])
    return out


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


def frame_from_store(  # noqa: PLR0917 - store, job, then the grid
    store: TelemetryStore,
    job: str,
    start_s: float,
    end_s: float,
    step_s: float = 1.0,
    series: Sequence[Series] | None = None,
) -> JobFrame:
    """A frame from a store's ``range`` reads (the store bins; bitmask and XID fields use the step max).

    The job's GPUs are the series labelled ``job``, or ``series`` when given (the caller knows them
    another way, such as by their pods: dcgm-exporter labels series with pods, not jobs).
    """
    everything = store.series()
    if series is not None:
        hosts = {s.labels.get("Hostname", "") for s in series}
        nodes = [
            s for s in everything if s.scope == Scope.NODE.value and s.labels.get("Hostname", "") in hosts
        ]
        gpu_series = [
            Series(s.id, s.scope, {**s.labels, "job": job}) for s in series if s.scope == Scope.GPU.value
        ]
        node_series = nodes
    else:
        gpu_series, node_series = job_series(everything, job)
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
