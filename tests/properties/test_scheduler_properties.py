"""Properties of the scheduler and the simulator over random small clusters and workloads.

Every run goes through :class:`CheckingScheduler`, which checks each Bind
against the free resources of the snapshot it was decided on; the tests then
replay the recorded binds against the job table. Determinism (docs/design-principles.md, habit 5)
is checked for every valid combination of built-in plugins.
"""

from __future__ import annotations

import dataclasses
import itertools
import math
from collections.abc import Iterator, Sequence

import numpy as np
import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from builders import RecordingScheduler, TimedBind, a_cluster, a_job, a_node, by_id, profile, trace
from fuzzing import examples
from loadmaster.config import load_profiles
from loadmaster.errors import ConfigError
from loadmaster.model import MILLI_PER_GPU, ClusterSnapshot, JobTable, NodeTable, Timeline, TraceJob
from loadmaster.scheduling import PLUGINS, CycleResult, Profile
from loadmaster.scheduling.actions import allocate
from loadmaster.sim import RunResult, SimOptions, simulate

GANG_PROFILES = {
    "fifo+gang+first-fit": profile("fifo", "gang", "first-fit"),
    "fifo+gang+binpack": profile("fifo", "gang", "binpack"),
    "fifo(lax)+gang+spread": profile("fifo", "gang", "spread", strict=False),
    "fifo+gang+random": profile("fifo", "gang", "random"),
}
NO_GANG_PROFILES = {
    "fifo(lax)+binpack": profile("fifo", "binpack", strict=False),
    "priority+fifo(lax)+first-fit": profile("priority", "fifo", "first-fit", strict=False),
}
PROFILES = GANG_PROFILES | NO_GANG_PROFILES

FAST = settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""40 examples for each parametrized profile keep the whole file within ~20 s on two cores."""


class CheckingScheduler(RecordingScheduler):
    """Checks every Bind of a cycle against the snapshot it was decided on, and that every job
    left waiting has a reason."""

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        before = snapshot.gpu_free_milli.copy()
        result = super().cycle(snapshot, now, rng)
        check_binds(snapshot, before, result)
        started = {b.job_id for b in result.binds if b.starts}
        for pending in snapshot.pending:
            if pending.job.id not in started:
                status = result.status_of(pending.job.id, self.profile.lane(pending.job))
                assert status is not None, f"t={now}: {pending.job.id} waits without a status"
                assert status.reason, f"t={now}: {pending.job.id} waits with an empty reason"
        return result


def check_binds(snapshot: ClusterSnapshot, before: np.ndarray, result: CycleResult) -> None:
    """Each placement fits what was free, on a real GPU of an allowed node, and the gang counts add up."""
    nodes = snapshot.nodes
    exists = nodes.gpu_exists()
    pending = {p.job.id: p for p in snapshot.pending}
    free = before.copy()
    for bind in result.binds:
        assert bind.job_id in pending, f"{bind.job_id} bound but not pending"
        job, bound = pending[bind.job_id].job, pending[bind.job_id].bound
        held = len(bound) + len(bind.placements)
        assert bind.placements and held <= job.tasks
        assert bind.starts == (held >= job.min_available)
        request = job.request
        for placement in bind.placements:
            node = placement.node
            assert job.pool is None or nodes.nodes[node].pool == job.pool
            assert placement.gpu_milli == min(request.gpu_milli, MILLI_PER_GPU)
            assert len(set(placement.gpu_indices)) == len(placement.gpu_indices) == max(request.whole_gpus, 1)
            for gpu in placement.gpu_indices:
                assert exists[node, gpu], f"{bind.job_id} placed on missing GPU {gpu} of node {node}"
                if request.whole_gpus:
                    assert free[node, gpu] == MILLI_PER_GPU, f"{bind.job_id} got a shared GPU"
                free[node, gpu] -= placement.gpu_milli
                assert free[node, gpu] >= 0, f"{bind.job_id} over-allocates GPU {gpu} of node {node}"


@st.composite
def clusters(draw: st.DrawFn) -> NodeTable:
    """1-6 nodes of 1-8 GPUs, in one pool or spread over two."""
    count = draw(st.integers(1, 6))
    two_pools = draw(st.booleans())
    builder = a_cluster()
    for i in range(count):
        pool = draw(st.sampled_from(("p0", "p1"))) if two_pools else "p0"
        builder = builder.node(a_node(f"n{i}").gpus(draw(st.integers(1, 8))).pool(pool))
    return builder.build()


JOB_SHAPES = st.tuples(
    st.integers(1, 4),  # tasks
    st.sampled_from((0.5, 1, 1, 2, 4, 8)),  # GPUs per task, mostly small
    st.integers(1, 500),  # duration
    st.integers(0, 200),  # submit time; small integers make ties and simultaneous events likely
    st.sampled_from((None, None, "p0", "p1")),  # pool ("p1" may not exist: rejected)
    st.sampled_from(("normal", "high", "low")),
)


@st.composite
def workloads(draw: st.DrawFn) -> list[TraceJob]:
    """1-40 jobs of 1-4 tasks."""
    count = draw(st.integers(1, 40))  # drawn first: plain lists would stay short
    shapes = draw(st.lists(JOB_SHAPES, min_size=count, max_size=count))
    jobs = []
    for i, (tasks, gpus, duration, submit, pool, priority) in enumerate(shapes):
        builder = a_job(f"j{i}").tasks(tasks).gpus(gpus).submitted(submit).priority(priority)
        jobs.append(trace(builder.pool(pool) if pool else builder, duration))
    return jobs


def run(
    cluster: NodeTable, jobs: Sequence[TraceJob], chosen: Profile, seed: int = 0
) -> tuple[RunResult, CheckingScheduler]:
    scheduler = CheckingScheduler(chosen, max_cycles=10_000)
    return simulate(cluster, scheduler, jobs, SimOptions(seed=seed)), scheduler


def replay(cluster: NodeTable, binds: Sequence[TimedBind], table: JobTable) -> None:
    """Replay the binds in time, releasing each job's GPUs at its end: no GPU ever holds more than 1000m."""
    end = by_id(table, "end_s")
    changes: list[tuple[float, int, int, int, int]] = []
    for timed in binds:
        ends_at = end[timed.bind.job_id]
        for placement in timed.bind.placements:
            for gpu in placement.gpu_indices:
                changes.append((timed.time_s, 1, placement.node, gpu, placement.gpu_milli))
                if not math.isnan(ends_at):
                    changes.append((ends_at, 0, placement.node, gpu, -placement.gpu_milli))
    capacity = np.where(cluster.gpu_exists(), MILLI_PER_GPU, 0)
    used = np.zeros_like(capacity)
    for time_s, _, node, gpu, delta in sorted(changes, key=lambda c: (c[0], c[1])):
        used[node, gpu] += delta
        assert 0 <= used[node, gpu] <= capacity[node, gpu], f"t={time_s}: node {node} GPU {gpu} at {used}"


@pytest.mark.parametrize("name", PROFILES)
@FAST
@given(cluster=clusters(), jobs=workloads())
def test_no_node_is_ever_over_allocated(name: str, cluster: NodeTable, jobs: list[TraceJob]) -> None:
    result, scheduler = run(cluster, jobs, PROFILES[name])

    replay(cluster, scheduler.binds, result.jobs)
    submit, start = by_id(result.jobs, "submit_s"), by_id(result.jobs, "start_s")
    for timed in scheduler.binds:
        assert timed.time_s >= submit[timed.bind.job_id]
        if timed.bind.starts:
            assert timed.time_s == start[timed.bind.job_id]
    allocated = result.timeline.allocated_gpus.sum(axis=1)
    assert np.all(allocated <= cluster.total_gpus + 1e-9)
    assert np.all(result.timeline.free_gpus >= -1e-9)


@pytest.mark.parametrize("name", GANG_PROFILES)
@FAST
@given(cluster=clusters(), jobs=workloads())
def test_gang_places_every_task_of_a_job_at_once(name: str, cluster: NodeTable, jobs: list[TraceJob]) -> None:
    result, scheduler = run(cluster, jobs, PROFILES[name])

    start, tasks = by_id(result.jobs, "start_s"), by_id(result.jobs, "tasks")
    for job_id, started in start.items():
        binds = [t.bind for t in scheduler.binds_of(job_id)]
        if math.isnan(started):
            assert binds == []
        else:
            assert [(b.starts, len(b.placements)) for b in binds] == [(True, tasks[job_id])]
    assert np.all(result.jobs.held_idle_gpu_s == 0.0)


@pytest.mark.parametrize("name", NO_GANG_PROFILES)
@FAST
@given(cluster=clusters(), jobs=workloads())
def test_without_gang_partial_binds_add_up_and_are_charged(
    name: str, cluster: NodeTable, jobs: list[TraceJob]
) -> None:
    result, scheduler = run(cluster, jobs, PROFILES[name])

    start, tasks = by_id(result.jobs, "start_s"), by_id(result.jobs, "tasks")
    held = by_id(result.jobs, "held_idle_gpu_s")
    for job_id, started in start.items():
        binds = scheduler.binds_of(job_id)
        if math.isnan(started):
            assert all(not t.bind.starts for t in binds)
            continue
        assert [t.bind.starts for t in binds] == [False] * (len(binds) - 1) + [True]
        assert sum(len(t.bind.placements) for t in binds) == tasks[job_id]
        gpus = [sum(len(p.gpu_indices) * p.gpu_milli for p in t.bind.placements) / 1000 for t in binds]
        expected = sum((started - t.time_s) * g for t, g in zip(binds, gpus, strict=True))
        assert held[job_id] == pytest.approx(expected)


@pytest.mark.parametrize("name", PROFILES)
@FAST
@given(cluster=clusters(), jobs=workloads())
def test_every_job_finishes_or_says_why_not(name: str, cluster: NodeTable, jobs: list[TraceJob]) -> None:
    result, _ = run(cluster, jobs, PROFILES[name])

    table = result.jobs
    for i, job_id in enumerate(table.job_id):
        reason = str(table.reason[i])
        if math.isnan(table.end_s[i]):
            assert reason.startswith(("rejected", "still pending")), f"{job_id}: {reason!r}"
            if reason.startswith("rejected"):
                assert math.isnan(table.start_s[i])
        else:
            assert reason == ""
            assert table.end_s[i] == table.start_s[i] + table.duration_s[i]
            assert table.start_s[i] >= table.submit_s[i]
    if name in GANG_PROFILES:
        # With gang nothing holds GPUs while waiting, so every job that could ever fit finishes.
        assert not any(str(r).startswith("still pending") for r in table.reason)


STRICT_FIFO = [name for name in GANG_PROFILES if "lax" not in name]


@pytest.mark.parametrize("name", STRICT_FIFO)
@FAST
@given(cluster=clusters(), jobs=workloads())
def test_strict_fifo_never_lets_a_later_job_start_first(
    name: str, cluster: NodeTable, jobs: list[TraceJob]
) -> None:
    result, _ = run(cluster, jobs, PROFILES[name])

    # Rows are in submission order; rejected jobs never joined the queue.
    table = result.jobs
    queued = np.array([not str(r).startswith("rejected") for r in table.reason])
    starts = table.start_s[queued]
    assert np.all(np.diff(starts) >= 0), f"start times out of submission order: {starts}"


def assert_same_columns(a: JobTable | Timeline, b: JobTable | Timeline) -> None:
    """Every field of two JobTables or Timelines is equal, NaN equal to NaN."""
    for f in dataclasses.fields(a):
        x, y = getattr(a, f.name), getattr(b, f.name)
        if isinstance(x, np.ndarray):
            assert x.dtype == y.dtype and x.shape == y.shape, f.name
            assert np.array_equal(x, y, equal_nan=x.dtype.kind == "f"), f.name
        else:
            assert x == y, f.name


@pytest.mark.parametrize("name", PROFILES)
@settings(
    max_examples=examples(20),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
@given(cluster=clusters(), jobs=workloads(), seed=st.integers(0, 2**32 - 1))
def test_same_seed_same_run(name: str, cluster: NodeTable, jobs: list[TraceJob], seed: int) -> None:
    first, first_scheduler = run(cluster, jobs, PROFILES[name], seed)
    second, second_scheduler = run(cluster, jobs, PROFILES[name], seed)

    assert_same_columns(first.jobs, second.jobs)
    assert_same_columns(first.timeline, second.timeline)
    assert first_scheduler.binds == second_scheduler.binds


def spread_out_workload() -> tuple[NodeTable, list[TraceJob]]:
    """Twelve 1-GPU jobs arriving together on six empty 8-GPU nodes: placement is a free choice."""
    cluster = a_cluster().nodes(6, gpus=8).build()
    return cluster, [trace(a_job(f"j{i}"), 100) for i in range(12)]


def test_random_placement_depends_on_the_seed() -> None:
    cluster, jobs = spread_out_workload()
    chosen = profile("fifo", "gang", "random")
    placements = {tuple(run(cluster, jobs, chosen, seed)[0].jobs.node_names) for seed in range(5)}

    assert len(placements) > 1


@pytest.mark.parametrize("placer", ["first-fit", "binpack", "spread"])
def test_deterministic_placement_ignores_the_seed(placer: str) -> None:
    cluster, jobs = spread_out_workload()
    chosen = profile("fifo", "gang", placer)
    placements = {tuple(run(cluster, jobs, chosen, seed)[0].jobs.node_names) for seed in range(5)}

    assert len(placements) == 1


# Determinism of the simulator for every valid combination of built-in plugins.

CANONICAL_ORDER = ("priority", "fifo", "gang", "first-fit", "binpack", "spread", "random")
"""The foundation's plugins, whose every valid combination is checked."""


def every_profile() -> dict[str, Profile]:
    """Every valid subset of the foundation's plugins (fifo strict and not), every built-in profile,
    and each other plugin with fifo and gang; every registered plugin must be in one of them."""
    found: dict[str, Profile] = {}
    for size in range(len(CANONICAL_ORDER) + 1):
        for names in itertools.combinations(CANONICAL_ORDER, size):
            for strict in (True, False) if "fifo" in names else (True,):
                try:
                    built = profile(*names, strict=strict)
                except ConfigError:
                    continue  # an incompatible pair, rejected by design
                found["+".join(names) + ("" if strict else "(lax)") or "(none)"] = built
    found.update({f"builtin:{name}": p for name, p in load_profiles().items()})
    for name in sorted(set(PLUGINS) - set(CANONICAL_ORDER)):
        for names in ((name, "fifo", "gang"), ("fifo", "gang", name), (name, "gang")):
            try:
                found["+".join(names)] = profile(*names)
                break
            except ConfigError:
                continue
    # gittins needs a distribution of job sizes, which no default can give.
    found["gittins+gang"] = profile("gittins", "gang", args={"gittins": {"samples": [60, 600, 3600, 36000]}})
    covered = {plugin.name for p in found.values() for plugin in p.plugins}
    assert covered == set(PLUGINS), f"plugins missing from the determinism check: {set(PLUGINS) - covered}"
    return found


EVERY_PROFILE = every_profile()


def mixed_workload(seed: int = 7) -> tuple[NodeTable, list[TraceJob]]:
    """40 jobs of mixed shapes on a 2-pool cluster, drawn from a fixed seed."""
    rng = np.random.default_rng(seed)
    cluster = (
        a_cluster()
        .nodes(2, gpus=8, pool="p0")
        .nodes(2, gpus=4, pool="p0")
        .node(a_node("m0").gpus(2).pool("p1"))
        .node(a_node("m1").gpus(1).pool("p1"))
        .build()
    )
    jobs = []
    for i in range(40):
        builder = (
            a_job(f"j{i}")
            .tasks(int(rng.integers(1, 5)))
            .gpus(float(rng.choice([0.5, 1, 2, 4, 8])))
            .submitted(float(rng.integers(0, 200)))
            .priority(str(rng.choice(["low", "normal", "high"])))
        )
        pool = rng.choice(["", "p0", "p1"])
        jobs.append(trace(builder.pool(str(pool)) if pool else builder, float(rng.integers(1, 300))))
    return cluster, jobs


def test_every_plugin_combination_is_covered() -> None:
    # Foundation plugins: 4 order sets (none, priority, fifo, both; fifo twice) x gang or not x 7 placer sets.
    foundation = [
        k
        for k in EVERY_PROFILE
        if not k.startswith("builtin:")
        and set(k.replace("(lax)", "").split("+")) <= {*CANONICAL_ORDER, "(none)"}
    ]
    assert len(foundation) == 6 * 2 * 7


@pytest.mark.parametrize("name", EVERY_PROFILE)
def test_every_plugin_combination_is_deterministic(name: str) -> None:
    cluster, jobs = mixed_workload()
    first, first_scheduler = run(cluster, jobs, EVERY_PROFILE[name], seed=11)
    second, second_scheduler = run(cluster, jobs, EVERY_PROFILE[name], seed=11)

    assert_same_columns(first.jobs, second.jobs)
    assert_same_columns(first.timeline, second.timeline)
    assert first_scheduler.binds == second_scheduler.binds
    # Something ran, or (a quota with no groups configured, say) every job says why not.
    assert first.jobs.ran.any() or (first.jobs.reason != "").all()


DOMINANCE_PROFILES = ("sds", "slurm", "fifo", "kube-default")


@pytest.mark.parametrize("name", DOMINANCE_PROFILES)
@FAST
@given(cluster=clusters(), jobs=workloads())
def test_skipping_requests_larger_than_a_failed_one_changes_no_decision(
    name: str, cluster: NodeTable, jobs: list[TraceJob], monkeypatch_module: pytest.MonkeyPatch
) -> None:
    """The walk skips a job that asks for at least as much as one that just failed (a speed-up only)."""
    chosen = load_profiles()[name]
    with_skip, scheduler = run(cluster, jobs, chosen)
    with monkeypatch_module.context() as patch:
        patch.setattr(allocate, "_MAX_FAILED_REQUESTS", 0)
        without_skip, plain = run(cluster, jobs, chosen)
    assert scheduler.binds == plain.binds
    assert_same_columns(with_skip.timeline, without_skip.timeline)


@pytest.fixture(scope="module")
def monkeypatch_module() -> Iterator[pytest.MonkeyPatch]:
    """A monkeypatch usable inside hypothesis examples (the function-scoped one is not)."""
    with pytest.MonkeyPatch.context() as patch:
        yield patch
