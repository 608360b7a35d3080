"""The live demo cluster: the real scheduler driving the simulator in accelerated wall-clock time.

:func:`build_demo` loads a cluster (the built-in ``lab``, or the lab scaled
to about ``gpus`` GPUs), generates its synthetic workload, builds the
:class:`~loadmaster.scheduling.Scheduler` of the chosen profile, warms the
cluster up to a busy weekday afternoon and registers every GPU's telemetry
series. :meth:`Demo.tick` then moves simulated time forward by ``speed``
simulated seconds per wall second and appends synthetic telemetry every
``telemetry_step_s`` of simulated time. Everything the API reads goes through
:attr:`Demo.lock`, because the stepping task and the request handlers run on
different threads.
"""

from __future__ import annotations

import math
import threading
from collections import Counter
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, Protocol

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from loadmaster.config import load_cluster, load_selected, load_workload
from loadmaster.config.cluster import Cluster, cluster_from_document
from loadmaster.config.yamlfile import YamlDocument, find_document
from loadmaster.errors import ConfigError
from loadmaster.scheduling import Scheduler
from loadmaster.serve.auth import TokenTable
from loadmaster.serve.feed import DASHBOARD_FIELDS, DemoTelemetry
from loadmaster.serve.gpus import GpuIndex, TelemetryView, series_positions
from loadmaster.serve.live import LiveSimulator
from loadmaster.serve.views import NotFoundError
from loadmaster.sim import SimOptions
from loadmaster.telemetry.duck import DuckDBStore, Retention
from loadmaster.telemetry.schema import BY_ID, FIELDS
from loadmaster.telemetry.store import Series, TelemetryStore

LAB_GPUS = 160
"""GPUs of the built-in ``lab`` cluster, the unit :func:`scaled_lab` multiplies."""
BACKFILL_S = 3600.0
"""Simulated time before the demo starts serving for which telemetry is generated (the rest of the
warm-up only schedules), so a job page has an hour of history from the first second."""
SAMPLE_BATCH_STEPS = 30
"""Telemetry steps generated and stored in one batch (bounds memory when the demo jumps ahead)."""
DEMO_LOAD = 1.1
"""The offered load ``serve --demo`` asks: a tenth more than the cluster holds, so the queue, why each
job waits and its estimated start show from the demo's first minute (at the lab's 0.85 the default
demo's queue held one job at the start and was empty half a simulated hour later)."""
LAB_JOBS_PER_GPU_DAY = 4000 / 160 / 14.9
"""Jobs per GPU per day of the built-in lab workload (4,000 jobs over about 14.9 days on 160 GPUs)."""


@dataclass(frozen=True)
class DemoOptions:
    """How the demo cluster is built and how fast it runs."""

    cluster: str = "lab"
    """Built-in cluster name or spec file; ignored when ``gpus`` is set."""
    gpus: int | None = None
    """Build the lab cluster scaled to about this many GPUs instead (10,000 for the scale benchmark)."""
    workload: str = "lab"
    """Built-in workload name or spec file, generated for the cluster."""
    load: float | None = None
    """Offered load of the workload (GPU-seconds asked / GPU-seconds the pools hold, over its span);
    None: the workload file's (the lab's 0.85). ``serve --demo`` asks :data:`DEMO_LOAD`."""
    profile: str = "sds"
    """Scheduling profile (built-in name); sds: gang + FIFO + bin packing + backfill + multi-queue."""
    speed: float = 60.0
    """Simulated seconds per wall second: 60 shows an hour of the cluster in a minute."""
    days: float = 4.0
    """Simulated days of workload to generate; the demo idles when they are used up."""
    warmup_s: float = 37 * 3600.0
    """Simulated time to run before serving: Tuesday 13:00, near the daily peak, so the cluster is busy."""
    period_s: float = 60.0
    """The scheduler also runs a cycle every minute, as a live scheduler does."""
    telemetry_step_s: float = 60.0
    """Simulated seconds between telemetry samples (dcgm-exporter's usual scrape is 15-60 s)."""
    history_s: float = 6 * 3600.0
    """How far back the time scrubber reaches (ownership frames and raw telemetry kept)."""
    seed: int = 0
    """Seed of the workload, the scheduler's random choices and the synthetic telemetry."""
    sample_users: int = 3
    """Users given demo tokens: the ones holding the most GPUs when the demo starts."""
    fields: tuple[str, ...] | None = DASHBOARD_FIELDS
    """Telemetry fields generated and stored; None: every field of the schema (about half again the data)."""

    def __post_init__(self) -> None:
        checks = {
            "speed": self.speed > 0,
            "days": self.days > 0,
            "warmup_s": self.warmup_s >= 0,
            "telemetry_step_s": self.telemetry_step_s > 0,
            "history_s": self.history_s > 0,
            "sample_users": self.sample_users >= 1,
            "load": self.load is None or self.load > 0,
        }
        for name, ok in checks.items():
            if not ok:
                raise ConfigError("demo options", name, f"must be positive, got {getattr(self, name)!r}")
        if self.gpus is not None and self.gpus < 8:
            raise ConfigError("demo options", "gpus", f"must be at least 8, got {self.gpus}")


class TelemetrySource(Protocol):
    """What feeds the demo's store (:class:`~loadmaster.serve.feed.DemoTelemetry`)."""

    def series(self) -> list[Series]:
        """Every series this source writes, with its labels (registered once, relabelled as jobs change)."""
        ...

    def observe(self, time_s: float, sim: LiveSimulator) -> list[Series]:
        """Take in the cluster at ``time_s`` (a telemetry step); return the series whose labels changed."""
        ...

    def samples(self, start_s: float, end_s: float, interval_s: float) -> pa.Table:
        """Samples every ``interval_s`` in ``(start_s, end_s]`` in SAMPLE_SCHEMA, for the steps observed."""
        ...


def scaled_lab(gpus: int) -> Cluster:
    """The built-in lab cluster with every node group (and its racks) scaled to about ``gpus`` GPUs."""
    doc = find_document("clusters", "lab", ("lab",))
    factor = gpus / LAB_GPUS
    data: dict[str, Any] = {**doc.data, "name": f"lab-x{factor:g}"}
    pools = {}
    for name, pool in doc.data["pools"].items():
        groups = []
        for group in pool["node_groups"]:
            count = max(1, round(group["count"] * factor))
            racks = max(1, math.ceil(count / 32))  # about 32 servers per rack row
            groups.append({**group, "count": count, "racks": racks})
        pools[name] = {**pool, "node_groups": groups}
    data["pools"] = pools
    data["description"] = f"the lab cluster scaled to about {gpus:,} GPUs"
    return cluster_from_document(YamlDocument(f"lab scaled to {gpus} GPUs", data, None))


class Demo:
    """A running demo: the live simulator, its telemetry store and the tokens of its sample users."""

    def __init__(
        self,
        sim: LiveSimulator,
        *,
        store: TelemetryStore,
        source: TelemetrySource,
        tokens: TokenTable,
        options: DemoOptions,
        cluster_name: str,
    ) -> None:
        self.sim = sim
        self.store = store
        self.source = source
        self.tokens = tokens
        self.options = options
        self.cluster_name = cluster_name
        self.speed = options.speed
        self.paused = False
        self.lock = threading.RLock()
        self.index = GpuIndex.of(sim.nodes)
        series = source.series()
        store.register(series)
        self.telemetry = TelemetryView(self.index, store, series_positions(self.index, series))
        self._next_sample_s = sim.now_s

    @property
    def now_s(self) -> float:
        return self.sim.now_s

    def gpu_series_of(self, job_id: str) -> list[Series]:
        """The series of the GPUs the job runs on (or last ran on): one fixed series per GPU."""
        from loadmaster.serve.dashboard import placements_of, series_of_gpus  # noqa: PLC0415 - no cycle at import

        return series_of_gpus(self, placements_of(self.sim, job_id))

    @property
    def oldest_s(self) -> float:
        """The oldest time the scrubber can show."""
        frames = self.sim.frames
        return max(frames[0].time_s if frames else self.now_s, self.now_s - self.options.history_s)

    def tick(self, wall_s: float) -> None:
        """Advance by ``wall_s`` wall seconds at the current speed (nothing while paused)."""
        if not self.paused:
            self.advance(wall_s * self.speed)

    def advance(self, sim_s: float) -> None:
        """Advance simulated time by ``sim_s``, with telemetry at every telemetry step on the way.

        The source observes the cluster at each step; the samples of all the steps passed are then
        generated and stored in batches of at most :data:`SAMPLE_BATCH_STEPS` steps (the samples
        depend only on what was observed and the time, so generating later changes nothing).
        """
        step = self.options.telemetry_step_s
        with self.lock:
            target = self.sim.now_s + sim_s
            first = self._next_sample_s
            relabelled: dict[int, Series] = {}
            while self._next_sample_s <= target:
                self.sim.advance_to(self._next_sample_s)
                relabelled |= {s.id: s for s in self.source.observe(self._next_sample_s, self.sim)}
                self._next_sample_s += step
            self.sim.advance_to(target)
            if relabelled:
                self.store.register(list(relabelled.values()))
            steps = round((self._next_sample_s - first) / step)
            for lo in range(0, steps, SAMPLE_BATCH_STEPS):
                hi = min(steps, lo + SAMPLE_BATCH_STEPS)
                self._append(self.source.samples(first + (lo - 1) * step, first + (hi - 1) * step, step))

    def _append(self, batch: pa.Table) -> None:
        self.store.append(batch)
        times = batch.column("time_s")
        if batch.num_rows:
            newest = pc.equal(times, pc.max(times))
            self.telemetry.remember(_latest_by_key(batch.filter(newest)))

    def evict(self, job_id: str, reason: str) -> None:
        """Reclaim evicted the job: it ends in the simulator now and its GPUs go to the queue."""
        with self.lock:
            if not self.sim.evict_now(job_id, reason):
                raise NotFoundError(f"no running job {job_id!r}")

    def set_speed(self, speed: float) -> None:
        """Change the speed (simulated seconds per wall second); 0 pauses."""
        if not (math.isfinite(speed) and speed >= 0):
            raise ConfigError("speed", "", f"must be a finite number >= 0, got {speed!r}")
        with self.lock:
            self.paused = speed == 0
            if speed > 0:
                self.speed = speed


def _latest_by_key(batch: pa.Table) -> Mapping[str, Mapping[int, float]]:
    """The last value of each (field, series) in a batch, keyed by field key then series id."""
    codes = np.asarray(batch.column("field").to_numpy(), dtype=np.int64)
    series = np.asarray(batch.column("series").to_numpy(), dtype=np.int64)
    values = np.asarray(batch.column("value").to_numpy(zero_copy_only=False), dtype=np.float64)
    out: dict[str, dict[int, float]] = {}
    for code in np.unique(codes):
        f = BY_ID[int(code)] if code >= 0 else FIELDS[-int(code) - 1]
        mask = codes == code
        out[f.key] = dict(zip(series[mask].tolist(), values[mask].tolist(), strict=True))
    return out


def build_demo(options: DemoOptions, store: TelemetryStore | None = None) -> Demo:
    """Build, warm up and return the demo. The store defaults to an in-memory DuckDB that keeps
    ``history_s`` of raw samples."""
    if store is None:
        raw_s = max(options.history_s, 1800.0)
        store = DuckDBStore(":memory:", Retention(raw_s=raw_s, minute_s=max(raw_s, 7 * 86400.0)))
    cluster = scaled_lab(options.gpus) if options.gpus is not None else load_cluster(options.cluster)
    total = cluster.nodes.total_gpus
    jobs = max(200, round(LAB_JOBS_PER_GPU_DAY * total * options.days))
    workload = load_workload(
        options.workload, cluster, jobs=jobs, load=options.load, seed=options.seed or None
    )
    profile = load_selected([options.profile], "--profile")[0]
    sim_options = SimOptions(seed=options.seed, period_s=options.period_s)
    sim = LiveSimulator(
        cluster.nodes,
        Scheduler(profile),
        workload.jobs,
        sim_options,
        history_s=options.history_s,
        frame_step_s=max(options.telemetry_step_s, options.history_s / 120),
    )
    # Telemetry for the last hour of the warm-up only: enough for job pages, and ready in seconds.
    warm_start = max(sim.now_s, options.warmup_s - min(options.history_s, BACKFILL_S))
    sim.advance_to(warm_start)
    source = DemoTelemetry(sim, begin_s=warm_start, seed=options.seed, fields=options.fields)
    tokens = TokenTable.generate(_sample_users(sim, options.sample_users), ["operator"])
    demo = Demo(sim, store=store, source=source, tokens=tokens, options=options, cluster_name=cluster.name)
    demo.advance(max(0.0, options.warmup_s - warm_start))
    return demo


def _sample_users(sim: LiveSimulator, count: int) -> list[str]:
    """The ``count`` users holding the most GPUs now (then by pending jobs), so their pages are full."""
    held: Counter[str] = Counter()
    for running in sim.cluster.running.values():
        held[running.job.user] += int(running.job.gpus * 1000)
    for pending in sim.cluster.pending.values():
        held[pending.job.user] += 1
    for trace in sim.jobs:
        held[trace.job.user] += 0
    ranked = sorted(held, key=lambda user: (-held[user], user))
    return ranked[:count]
