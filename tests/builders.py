"""Fluent builders for scheduling and simulation tests.

``a_job("j1").tasks(4).gpus(1).submitted(10).build()`` is a gang of four 1-GPU
tasks; ``gpus`` is per task, as in :class:`TaskRequest` (0.5 is half a GPU).
``a_cluster().nodes(4, gpus=8).build()`` is a :class:`NodeTable`;
``a_snapshot(cluster).used("n1", 3).running(job, "n0", since=50).pending(job).build()``
is the view one scheduling cycle sees. :class:`RecordingScheduler` keeps every Bind a
simulation carried out, with its time.
"""

from __future__ import annotations

import dataclasses
import importlib.util
import sys
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, replace
from pathlib import Path
from types import ModuleType
from typing import Any

import numpy as np
import pyarrow as pa

from loadmaster.model import (
    MILLI_PER_GPU,
    ClusterSnapshot,
    Job,
    JobTable,
    Node,
    NodeAffinity,
    NodeTable,
    PendingJob,
    ResourceType,
    RunningJob,
    Taint,
    TaskPlacement,
    TaskRequest,
    Toleration,
    TraceJob,
)
from loadmaster.model.snapshot import gpu_summary
from loadmaster.scheduling import (
    ACTIONS,
    PLUGINS,
    Bind,
    CycleResult,
    Decision,
    PluginSpec,
    Profile,
    Scheduler,
    build_profile,
)
from loadmaster.scheduling.framework import AdmitPlugin, ReservePlugin, VictimPlugin
from loadmaster.traces import SCHEMA, ReadReport, Trace

DEFAULT_TYPE = "gpu"


def resource_type(name: str = DEFAULT_TYPE) -> ResourceType:
    """A resource type with no CPU or memory bundled, so that only GPUs decide fit."""
    return ResourceType(
        name=name, gpu_model="test", gpu_memory_mib=80_000, cpu_milli_per_gpu=0, memory_mib_per_gpu=0
    )


@dataclass(frozen=True)
class JobBuilder:
    """A job of ``tasks`` identical tasks of ``gpus`` GPUs each; every setter returns a copy."""

    job_id: str
    _tasks: int = 1
    _gpus: float = 1.0
    _user: str = "u1"
    _group: str = "g1"
    _submit_s: float = 0.0
    _limit_s: float = 3600.0
    _pool: str | None = None
    _queue: str = "default"
    _priority_class: str = "normal"
    _min_available: int = 0
    _tolerations: tuple[Toleration, ...] = ()
    _affinity: NodeAffinity | None = None
    _selector: tuple[tuple[str, str], ...] = ()

    def tolerates(self, *tolerations: Toleration) -> JobBuilder:
        return replace(self, _tolerations=self._tolerations + tolerations)

    def affinity(self, affinity: NodeAffinity) -> JobBuilder:
        return replace(self, _affinity=affinity)

    def selector(self, **labels: str) -> JobBuilder:
        """``nodeSelector``: exact node labels (``a_job("j").selector(disk="ssd")``)."""
        return replace(self, _selector=self._selector + tuple(labels.items()))

    def tasks(self, count: int) -> JobBuilder:
        return replace(self, _tasks=count)

    def gpus(self, per_task: float) -> JobBuilder:
        """GPUs per task: a whole number, or a fraction below one (0.5 is 500 milli-GPU)."""
        return replace(self, _gpus=per_task)

    def user(self, name: str, group: str = "g1") -> JobBuilder:
        return replace(self, _user=name, _group=group)

    def submitted(self, at_s: float) -> JobBuilder:
        return replace(self, _submit_s=at_s)

    def limit(self, seconds: float) -> JobBuilder:
        return replace(self, _limit_s=seconds)

    def pool(self, name: str) -> JobBuilder:
        return replace(self, _pool=name)

    def queue(self, name: str) -> JobBuilder:
        return replace(self, _queue=name)

    def priority(self, priority_class: str) -> JobBuilder:
        return replace(self, _priority_class=priority_class)

    def min_available(self, count: int) -> JobBuilder:
        return replace(self, _min_available=count)

    def build(self) -> Job:
        return Job(
            id=self.job_id,
            user=self._user,
            group=self._group,
            submit_s=self._submit_s,
            tasks=self._tasks,
            request=TaskRequest(gpu_milli=round(self._gpus * MILLI_PER_GPU)),
            time_limit_s=self._limit_s,
            queue=self._queue,
            min_available=self._min_available,
            priority_class=self._priority_class,
            pool=self._pool,
            node_selector=dict(self._selector),
            tolerations=self._tolerations,
            affinity=self._affinity,
        )


def a_job(job_id: str) -> JobBuilder:
    return JobBuilder(job_id)


@dataclass(frozen=True)
class NodeBuilder:
    """One node; CPU and memory are plentiful so that GPUs alone decide fit."""

    name: str
    _gpus: int = 8
    _pool: str = "default"
    _zone: str = "z0"
    _rack: str = "r0"
    _type: str = DEFAULT_TYPE
    _labels: tuple[tuple[str, str], ...] = ()
    _taints: tuple[Taint, ...] = ()
    _cordoned: bool = False
    _max_pods: int | None = None

    def labels(self, **labels: str) -> NodeBuilder:
        return replace(self, _labels=self._labels + tuple(labels.items()))

    def taint(self, key: str, value: str = "", effect: str = "NoSchedule") -> NodeBuilder:
        return replace(self, _taints=(*self._taints, Taint(key, value, effect)))

    def cordoned(self) -> NodeBuilder:
        return replace(self, _cordoned=True)

    def max_pods(self, count: int) -> NodeBuilder:
        return replace(self, _max_pods=count)

    def gpus(self, count: int) -> NodeBuilder:
        return replace(self, _gpus=count)

    def pool(self, name: str) -> NodeBuilder:
        return replace(self, _pool=name)

    def rack(self, name: str, zone: str = "z0") -> NodeBuilder:
        return replace(self, _rack=name, _zone=zone)

    def of_type(self, name: str) -> NodeBuilder:
        return replace(self, _type=name)

    def build(self) -> Node:
        return Node(
            name=self.name,
            pool=self._pool,
            zone=self._zone,
            rack=self._rack,
            resource_type=self._type,
            gpus=self._gpus,
            cpu_milli=128_000,
            memory_mib=1_048_576,
            labels=dict(self._labels),
            taints=self._taints,
            unschedulable=self._cordoned,
            max_pods=self._max_pods,
        )


def a_node(name: str) -> NodeBuilder:
    return NodeBuilder(name)


@dataclass(frozen=True)
class ClusterBuilder:
    """Nodes in the order added; ``nodes(n, ...)`` names them n0, n1, ... continuing the count."""

    _nodes: tuple[NodeBuilder, ...] = ()

    def nodes(self, count: int, gpus: int = 8, pool: str = "default") -> ClusterBuilder:
        start = len(self._nodes)
        added = tuple(a_node(f"n{start + i}").gpus(gpus).pool(pool) for i in range(count))
        return replace(self, _nodes=self._nodes + added)

    def node(self, node: NodeBuilder) -> ClusterBuilder:
        return replace(self, _nodes=(*self._nodes, node))

    def build(self) -> NodeTable:
        built = [n.build() for n in self._nodes]
        types = {n.resource_type: resource_type(n.resource_type) for n in built}
        return NodeTable.build(built, types)


def a_cluster() -> ClusterBuilder:
    return ClusterBuilder()


@dataclass
class SnapshotBuilder:
    """A cluster with some GPUs already taken and some jobs pending, as one cycle sees it."""

    cluster: NodeTable
    _used: dict[str, int] = field(default_factory=dict)
    _pending: list[PendingJob] = field(default_factory=list)
    _running: list[tuple[Job, tuple[str, ...], float]] = field(default_factory=list)

    def used(self, node: str, gpus: int) -> SnapshotBuilder:
        """Take the first ``gpus`` GPUs of ``node`` (by someone not in the snapshot's queue)."""
        self._used[node] = gpus
        return self

    def pending(self, *jobs: Job | JobBuilder) -> SnapshotBuilder:
        self._pending.extend(PendingJob(j.build() if isinstance(j, JobBuilder) else j) for j in jobs)
        return self

    def running(self, job: Job | JobBuilder, *nodes: str, since: float = 0.0) -> SnapshotBuilder:
        """``job`` running since ``since``: task ``i`` on ``nodes[i]`` (one name: every task there).

        Its tasks take the lowest free GPUs of their nodes after ``used``, in the
        order the running jobs were added; its expected end is ``since`` plus its limit.
        """
        built = job.build() if isinstance(job, JobBuilder) else job
        if len(nodes) not in (1, built.tasks):
            raise ValueError(f"{built.id}: name one node, or one per task ({built.tasks}); got {nodes}")
        self._running.append((built, nodes * built.tasks if len(nodes) == 1 else nodes, since))
        return self

    def build(self) -> ClusterSnapshot:
        gpu_free = np.where(self.cluster.gpu_exists(), MILLI_PER_GPU, 0).astype(np.int64)
        names = [n.name for n in self.cluster.nodes]
        for node, gpus in self._used.items():
            gpu_free[names.index(node), :gpus] = 0
        running = tuple(
            RunningJob(job, tuple(_occupy(gpu_free, names.index(n), job.request) for n in nodes), since)
            for job, nodes, since in self._running
        )
        whole, largest, total = gpu_summary(gpu_free)
        pods_free = None
        if any(n.max_pods is not None for n in self.cluster.nodes):
            pods_free = np.array([1 << 40 if n.max_pods is None else n.max_pods for n in self.cluster.nodes])
            for run in running:
                for placement in run.placements:
                    pods_free[placement.node] -= 1
        return ClusterSnapshot(
            nodes=self.cluster,
            gpu_free_milli=gpu_free,
            cpu_free_milli=self.cluster.cpu_milli.copy(),
            memory_free_mib=self.cluster.memory_mib.copy(),
            whole_free=whole,
            largest_share=largest,
            free_milli=total,
            running=running,
            pending=tuple(self._pending),
            pods_free=pods_free,
        )


def _occupy(gpu_free: np.ndarray, node: int, request: TaskRequest) -> TaskPlacement:
    """Take one task of ``request`` on ``node``'s lowest free GPUs (a share: the first GPU with room)."""
    milli = min(request.gpu_milli, MILLI_PER_GPU)
    if request.gpu_milli >= MILLI_PER_GPU:
        gpus = np.flatnonzero(gpu_free[node] == MILLI_PER_GPU)[: request.whole_gpus]
    else:
        gpus = np.flatnonzero(gpu_free[node] >= milli)[:1]
    if len(gpus) < max(request.whole_gpus, 1):
        raise ValueError(f"a running task of {request.gpus:g} GPU(s) does not fit node {node}")
    gpu_free[node, gpus] -= milli
    return TaskPlacement(node, tuple(int(g) for g in gpus), milli, request.cpu_milli, request.memory_mib)


def a_snapshot(cluster: NodeTable) -> SnapshotBuilder:
    return SnapshotBuilder(cluster)


def profile(
    *plugins: str,
    strict: bool = True,
    actions: Sequence[str] | None = None,
    args: Mapping[str, Mapping[str, object]] | None = None,
) -> Profile:
    """A validated profile of ``plugins`` in the order given; ``strict`` is fifo's argument.

    ``args`` gives other plugins' arguments by plugin name (``{"backfill": {"mode": "easy"}}``).
    Without ``actions``, the profile gets the actions its plugins need: ``admit``
    for admit plugins, ``backfill`` for a reserve plugin, ``preempt`` for victim plugins.
    """
    given = args or {}
    base = {"fifo": {"strict": strict}}
    specs = [PluginSpec(name, {**base.get(name, {}), **given.get(name, {})}) for name in plugins]
    return build_profile("test", actions if actions is not None else needed_actions(plugins), specs)


def needed_actions(plugins: Sequence[str]) -> list[str]:
    """allocate, plus the actions through which the named plugins act, in the valid order."""
    kinds = {name: PLUGINS[name] for name in plugins if name in PLUGINS}
    wanted = {"allocate"}
    wanted |= {"admit"} if any(issubclass(k, AdmitPlugin) for k in kinds.values()) else set()
    wanted |= {"backfill"} if any(issubclass(k, ReservePlugin) for k in kinds.values()) else set()
    wanted |= {"preempt"} if any(issubclass(k, VictimPlugin) for k in kinds.values()) else set()
    return [a for a in ACTIONS if a in wanted]


def trace(job: Job | JobBuilder, duration_s: float) -> TraceJob:
    return TraceJob(job.build() if isinstance(job, JobBuilder) else job, duration_s)


@dataclass(frozen=True, slots=True)
class TimedBind:
    """A Bind and the simulated time of the cycle that made it."""

    time_s: float
    bind: Bind


class RecordingScheduler(Scheduler):
    """A Scheduler that keeps every Bind with its time, and stops a run after ``max_cycles`` cycles.

    The cycle limit turns a simulation that would never end into a loud failure.
    """

    def __init__(self, profile: Profile, max_cycles: int = 100_000) -> None:
        super().__init__(profile)
        self.binds: list[TimedBind] = []
        self.cycles = 0
        self.max_cycles = max_cycles

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        self.cycles += 1
        if self.cycles > self.max_cycles:
            raise RuntimeError(f"simulation still running after {self.max_cycles} cycles (t={now})")
        result = super().cycle(snapshot, now, rng)
        self.binds.extend(TimedBind(now, b) for b in result.binds)
        return result

    def binds_of(self, job_id: str) -> list[TimedBind]:
        return [b for b in self.binds if b.bind.job_id == job_id]


CycleSeen = tuple[tuple[Decision, ...], list[tuple[str, str]]]
"""What a driver reads of a cycle: the decisions and every pending job's status, as text."""


def same_cycles(
    profile: Profile, snapshots: Sequence[tuple[ClusterSnapshot, float]], *, off: Sequence[str], seed: int = 3
) -> tuple[Scheduler, list[CycleSeen], np.random.Generator]:
    """Run ``snapshots`` through a Scheduler and one with the shortcuts ``off`` turned off (see
    :class:`StatusLog`); assert that each cycle gives both the same decisions, statuses and draws.
    Returns the first scheduler, what each cycle gave, and its random stream."""
    fast, full = Scheduler(profile), Scheduler(profile)
    for shortcut in off:
        setattr(full, shortcut, None)
    rng_fast, rng_full = np.random.default_rng(seed), np.random.default_rng(seed)
    seen: list[CycleSeen] = []
    for snapshot, now in snapshots:
        got = [
            _seen(scheduler.cycle(snapshot, now, rng), snapshot, profile)
            for scheduler, rng in ((fast, rng_fast), (full, rng_full))
        ]
        assert got[0] == got[1]
        assert rng_fast.bit_generator.state == rng_full.bit_generator.state
        seen.append(got[0])
    return fast, seen, rng_fast


def _seen(result: CycleResult, snapshot: ClusterSnapshot, profile: Profile) -> CycleSeen:
    statuses = [(p.job.id, str(result.status_of(p.job.id, profile.lane(p.job)))) for p in snapshot.pending]
    return result.decisions, statuses


class StatusLog(Scheduler):
    """A Scheduler that also keeps every cycle's decisions and the status of every pending job (as the
    simulator reads them), with the shortcuts named in ``off`` turned off: the run to compare with."""

    def __init__(self, profile: Profile, *, off: Sequence[str] = ()) -> None:
        super().__init__(profile)
        for shortcut in off:  # "_repeats", "_carried": the scheduler then never takes that shortcut
            setattr(self, shortcut, None)
        self.cycles: list[tuple[str, list[tuple[str, str]]]] = []

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        result = super().cycle(snapshot, now, rng)
        statuses = [
            (p.job.id, str(result.status_of(p.job.id, self.profile.lane(p.job)))) for p in snapshot.pending
        ]
        self.cycles.append((repr(result.decisions), statuses))
        return result


def cycle(
    scheduler_profile: Profile, snapshot: ClusterSnapshot, now: float = 0.0, seed: int = 0
) -> CycleResult:
    """One scheduling cycle of a fresh scheduler."""
    return Scheduler(scheduler_profile).cycle(snapshot, now, np.random.default_rng(seed))


def bind_of(result: CycleResult, job_id: str) -> Bind | None:
    """The single Bind of ``job_id`` in ``result``, or None."""
    found = [b for b in result.binds if b.job_id == job_id]
    assert len(found) <= 1, f"{job_id} bound twice in one cycle: {found}"
    return found[0] if found else None


def nodes_of(cluster: NodeTable, bind: Bind) -> list[str]:
    """Names of the nodes a Bind uses, one entry per task."""
    return [cluster.nodes[p.node].name for p in bind.placements]


BENCHMARKS = Path(__file__).resolve().parents[1] / "benchmarks"


def load_benchmark(name: str) -> ModuleType:
    """The script ``benchmarks/<name>.py`` as a module, its neighbours (results_io, ...) importable
    as top-level modules, as they are when it runs from the repository root."""
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location(name, BENCHMARKS / f"{name}.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def assert_same_tables(got: JobTable, want: JobTable) -> None:
    """Every column of two job tables equal, job for job (NaN equal to NaN in float columns)."""
    for column in dataclasses.fields(want):
        mine, theirs = getattr(got, column.name), getattr(want, column.name)
        assert np.array_equal(mine, theirs, equal_nan=theirs.dtype.kind == "f"), column.name


def by_id(table: JobTable, column: str) -> dict[str, Any]:
    """One job-table column as job id -> value (floats as Python floats)."""
    values = getattr(table, column)
    return {str(j): v.item() if hasattr(v, "item") else v for j, v in zip(table.job_id, values, strict=True)}


# Traces in the canonical job table.


def a_trace_row(job_id: str, **fields: Any) -> dict[str, Any]:
    """A canonical row: one 1-GPU task submitted at 0 by nobody, completed; ``fields`` override."""
    base: dict[str, Any] = {
        "job_id": job_id,
        "user": "",
        "group": "",
        "submit_s": 0.0,
        "tasks": 1,
        "gpu_milli_per_task": 1000,
        "status": "completed",
    }
    return base | fields


def a_trace(rows: list[dict[str, Any]], **meta: str) -> Trace:
    """A trace of ``rows`` in the canonical schema (absent nullable columns are null), read from memory."""
    table = pa.Table.from_pylist(rows, schema=SCHEMA)
    return Trace(
        table, {"format": "test", "source": "mem.test"} | meta, ReadReport("mem.test", "test", len(rows))
    )


SHARED_GPU_PROMISE: tuple[tuple[str, int, float, float, float], ...] = (
    # (id, tasks, GPUs per task, submit, run time), on one 8-GPU node under conservative backfill.
    # At t=202, j5 (3 x half a GPU) reserves t=382 on GPUs 3, 4 and 4; j2, started then by
    # backfilling, leaves GPU 7 half used until 383; j18 (2 whole GPUs) is promised t=383 on GPUs 3
    # and 7. At t=382 j5 used to be placed afresh, on the half-used GPUs 4 and 7 and on 2, so j18
    # found one whole GPU at 383 and started at 384 (a scenario test and a property test's example).
    ("j0", 1, 1.0, 60, 180),
    ("j2", 1, 0.5, 62, 181),
    ("j3", 2, 1.0, 20, 182),
    ("j4", 2, 1.0, 59, 182),
    ("j5", 3, 0.5, 61, 2),
    ("j10", 1, 0.5, 47, 155),
    ("j12", 1, 1.0, 0, 201),
    ("j13", 1, 0.5, 61, 181),
    ("j14", 3, 0.5, 60, 180),
    ("j15", 2, 1.0, 60, 182),
    ("j18", 2, 1.0, 63, 1),
    ("j19", 1, 4.0, 59, 143),
)


SHORTCUT_RUNS = [("kube-default", 1.6), ("kube-default", 1.1), ("binpack-skip", 1.6)]
"""(profile, load) of the lab runs that compare a scheduler's shortcuts with a scheduler without."""


def lab_runs_with_and_without(
    name: str, load: float, off: Sequence[str]
) -> tuple[tuple[JobTable, StatusLog], tuple[JobTable, StatusLog]]:
    """The ``lab`` workload (600 jobs at ``load``) run with profile ``name`` by a :class:`StatusLog`
    with every shortcut and by one with the shortcuts ``off`` turned off: each run's job table and
    scheduler."""
    from loadmaster.config import load_cluster, load_profiles, load_workload  # noqa: PLC0415
    from loadmaster.sim import SimOptions, simulate  # noqa: PLC0415

    spec = load_cluster("lab")
    trace = list(load_workload("lab", spec, jobs=600, load=load).jobs)
    runs = []
    for shortcuts_off in ((), off):
        scheduler = StatusLog(load_profiles()[name], off=shortcuts_off)
        runs.append((simulate(spec.nodes, scheduler, trace, SimOptions()).jobs, scheduler))
    return runs[0], runs[1]
