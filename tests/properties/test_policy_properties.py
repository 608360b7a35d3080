"""Properties of the scheduling policies over random small clusters and workloads.

(a) quotas bound what every group holds at every cycle; (b) backfill keeps
every promise it makes when run times are exact; (c) the starvation guard
bounds the wait of every job under an order that favours small jobs;
(d) preemption evicts gangs whole. Each run goes through a checking
Scheduler that looks at every snapshot and every cycle's decisions.
"""

from __future__ import annotations

import math
from collections import Counter, defaultdict
from collections.abc import Sequence
from dataclasses import dataclass

import numpy as np
import pytest
from hypothesis import HealthCheck, example, given, settings
from hypothesis import strategies as st

from builders import SHARED_GPU_PROMISE, RecordingScheduler, a_cluster, a_job, a_node, by_id, profile, trace
from fuzzing import examples
from loadmaster.model import MILLI_PER_GPU, ClusterSnapshot, NodeTable, TaskPlacement, TraceJob
from loadmaster.scheduling import CycleResult, Preempt, Profile
from loadmaster.scheduling.plugins.backfill import BackfillArgs
from loadmaster.sim import RunResult, SimOptions, simulate

FAST = settings(
    max_examples=examples(40),
    deadline=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.data_too_large],
)
"""At most 40 examples per test keep the whole file within about a minute on two cores."""

EPSILON_GPUS = 1e-6


def gpus_of(placements: Sequence[TaskPlacement]) -> float:
    return sum(p.gpu_milli * len(p.gpu_indices) for p in placements) / MILLI_PER_GPU


def simulate_with(
    scheduler: RecordingScheduler, cluster: NodeTable, jobs: Sequence[TraceJob], period_s: float | None = None
) -> RunResult:
    return simulate(cluster, scheduler, jobs, SimOptions(seed=0, period_s=period_s))


@st.composite
def clusters(draw: st.DrawFn, max_nodes: int = 4) -> NodeTable:
    """1-``max_nodes`` nodes of 2, 4 or 8 GPUs, over one or two racks."""
    builder = a_cluster()
    for i in range(draw(st.integers(1, max_nodes))):
        gpus = draw(st.sampled_from((2, 4, 8, 8)))
        builder = builder.node(a_node(f"n{i}").gpus(gpus).rack(draw(st.sampled_from(("r0", "r1")))))
    return builder.build()


# (a) Quotas: no group ever holds more than its nominal plus what it may borrow.

GROUPS = ("g0", "g1", "g2")


@dataclass(frozen=True)
class QuotaSetup:
    """One organisation's groups as (nominal, borrowing limit, lending limit), any GPUs it holds
    beyond their nominals (None: no total of its own), and reclaim's minimum run time."""

    groups: dict[str, tuple[int, int | None, int | None]]
    surplus: int | None
    min_runtime_s: float

    def args(self) -> dict[str, object]:
        """The quota plugin's arguments."""
        groups = {
            name: {"nominal": nominal, "borrowing_limit": borrow, "lending_limit": lend}
            for name, (nominal, borrow, lend) in self.groups.items()
        }
        org: dict[str, object] = {"groups": groups}
        if self.surplus is not None:
            org["nominal"] = sum(nominal for nominal, _, _ in self.groups.values()) + self.surplus
        return {"orgs": {"lab": org}, "min_runtime_s": self.min_runtime_s}

    def ceiling(self, name: str) -> float:
        """The most ``name`` may ever hold: its nominal plus the least of its borrowing limit and what
        the rest of the organisation can lend (the surplus and the others' lendable nominal)."""
        nominal, borrow, _ = self.groups[name]
        lendable = (self.surplus or 0) + sum(
            min(other_nominal, math.inf if lend is None else lend)
            for other, (other_nominal, _, lend) in self.groups.items()
            if other != name
        )
        return nominal + min(math.inf if borrow is None else borrow, lendable)


@st.composite
def quota_setups(draw: st.DrawFn) -> QuotaSetup:
    """2-3 groups with random nominal, borrowing and lending limits."""
    limits = st.one_of(st.none(), st.integers(0, 8))
    groups = {
        name: (draw(st.integers(0, 12)), draw(limits), draw(limits))
        for name in GROUPS[: draw(st.integers(2, 3))]
    }
    surplus = draw(st.one_of(st.none(), st.integers(0, 8)))
    return QuotaSetup(groups, surplus, draw(st.sampled_from((0.0, 50.0, 600.0))))


class QuotaChecker(RecordingScheduler):
    """After each cycle, sums per group the GPUs of the snapshot's running jobs (less those the cycle
    evicts), of partly bound pending jobs, and of the cycle's binds; none may exceed its ceiling."""

    def __init__(self, chosen: Profile, setup: QuotaSetup) -> None:
        super().__init__(chosen, max_cycles=20_000)
        self.ceiling = {name: setup.ceiling(name) for name in setup.groups}

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        result = super().cycle(snapshot, now, rng)
        evicted = {d.job_id for d in result.decisions if isinstance(d, Preempt)}
        held: dict[str, float] = defaultdict(float)
        group = {p.job.id: p.job.group for p in snapshot.pending}
        for running in snapshot.running:
            if running.job.id not in evicted:
                held[running.job.group] += gpus_of(running.placements)
        for pending in snapshot.pending:
            held[pending.job.group] += gpus_of(pending.bound)
        for bind in result.binds:
            held[group[bind.job_id]] += gpus_of(bind.placements)
        for name, gpus in held.items():
            assert gpus <= self.ceiling[name] + EPSILON_GPUS, (
                f"t={now}: group {name} holds {gpus:g} GPUs, more than it may ever hold "
                f"({self.ceiling[name]:g}); binds {result.binds}"
            )
        return result


@st.composite
def group_jobs(draw: st.DrawFn, groups: Sequence[str]) -> list[TraceJob]:
    """1-30 jobs of the given groups: 1-3 tasks of 0.5-4 GPUs, some starting with part of the gang."""
    jobs = []
    for i in range(draw(st.integers(1, 30))):
        tasks = draw(st.integers(1, 3))
        builder = (
            a_job(f"j{i}")
            .tasks(tasks)
            .gpus(draw(st.sampled_from((0.5, 1, 1, 2, 4))))
            .user(f"u{i % 4}", draw(st.sampled_from(groups)))
            .submitted(draw(st.integers(0, 300)))
            .min_available(draw(st.integers(1, tasks)))
        )
        jobs.append(trace(builder, draw(st.integers(1, 400))))
    return jobs


QUOTA_PLUGINS = {
    "fifo+gang+binpack+quota (reclaim)": (("fifo", "gang", "binpack", "quota"), None, True),
    "fifo+gang+binpack+quota (no reclaim)": (
        ("fifo", "gang", "binpack", "quota"),
        ("admit", "allocate"),
        True,
    ),
    "drf+gang+first-fit+quota": (("drf", "gang", "first-fit", "quota"), None, True),
    "fifo(lax)+first-fit+quota, no gang": (("fifo", "first-fit", "quota"), None, False),
    "fifo+gang+first-fit+backfill+quota": (("fifo", "gang", "first-fit", "backfill", "quota"), None, True),
}


@pytest.mark.parametrize("name", QUOTA_PLUGINS)
@FAST
@given(cluster=clusters(), setup=quota_setups(), data=st.data())
def test_no_group_ever_holds_more_than_its_quota_allows(
    name: str, cluster: NodeTable, setup: QuotaSetup, data: st.DataObject
) -> None:
    plugins, actions, strict = QUOTA_PLUGINS[name]
    chosen = profile(*plugins, strict=strict, actions=actions, args={"quota": setup.args()})
    jobs = data.draw(group_jobs(list(setup.groups)))
    checker = QuotaChecker(chosen, setup)
    result = simulate_with(checker, cluster, jobs, period_s=100)

    # Every job ran, or says why not (a job larger than its group's ceiling waits with a reason).
    for i, job_id in enumerate(result.jobs.job_id):
        if math.isnan(result.jobs.start_s[i]):
            assert str(result.jobs.reason[i]), f"{job_id} never ran and says nothing"


# (b) Backfill with exact run times: every job that was promised a start starts no later.


@st.composite
def exact_workloads(draw: st.DrawFn) -> list[TraceJob]:
    """1-30 gangs of 1-3 tasks whose time limits equal their durations."""
    jobs = []
    for i in range(draw(st.integers(1, 30))):
        duration = draw(st.integers(1, 300))
        builder = (
            a_job(f"j{i}")
            .tasks(draw(st.integers(1, 3)))
            .gpus(draw(st.sampled_from((0.5, 1, 1, 2, 4, 8))))
            .submitted(draw(st.integers(0, 200)))
            .limit(duration)
        )
        jobs.append(trace(builder, duration))
    return jobs


def exact(job_id: str, gpus: float, submit_s: float, duration_s: float) -> TraceJob:
    return trace(a_job(job_id).gpus(gpus).submitted(submit_s).limit(duration_s), duration_s)


HEAD_STARTS_IN_THE_SAME_CYCLE = [
    # Conservative: H (8 GPUs) is promised t=200, when P ends; P starts at t=100 and H then gets no
    # reservation, so Q takes 2 GPUs until t=1100 and H starts then. See the scenario
    # test_backfill_does_not_let_a_later_job_delay_the_head_when_the_job_ahead_starts.
    exact("r1", 6, 0, 100),
    exact("r2", 2, 0, 100),
    exact("P", 6, 1, 100),
    exact("H", 8, 2, 100),
    exact("Q", 2, 3, 1000),
]
PROMISE_TO_THE_WRONG_JOB = [
    # EASY: A starts at t=124 when Y ends; B, next in line, gets no reservation in that cycle, so C
    # (half a GPU) is promised t=125 instead; at t=125 B reserves GPUs 0-2 from t=126 and C, whose
    # run would overlap, starts only at t=126 beside B.
    exact("X", 2, 0, 125),
    exact("Y", 6, 0, 124),
    exact("A", 6, 1, 2),
    exact("B", 3, 2, 1),
    exact("C", 0.5, 3, 2),
]
SHARED_GPU_PROMISE_JOBS = [
    # See builders.SHARED_GPU_PROMISE and
    # test_conservative_backfill_starts_a_job_on_the_shared_gpus_it_reserved.
    trace(a_job(name).tasks(tasks).gpus(gpus).submitted(submit).limit(run_s), run_s)
    for name, tasks, gpus, submit, run_s in SHARED_GPU_PROMISE
]
ONE_NODE = a_cluster().nodes(1, gpus=8).build()

BACKFILL = {
    "easy": profile("fifo", "gang", "first-fit", "backfill", args={"backfill": {"mode": "easy"}}),
    "conservative": profile(
        "fifo", "gang", "first-fit", "backfill", args={"backfill": {"mode": "conservative"}}
    ),
}


@pytest.mark.parametrize("mode", BACKFILL)
@FAST
@given(cluster=clusters(), jobs=exact_workloads())
@example(cluster=ONE_NODE, jobs=HEAD_STARTS_IN_THE_SAME_CYCLE)
@example(cluster=ONE_NODE, jobs=PROMISE_TO_THE_WRONG_JOB)
@example(cluster=ONE_NODE, jobs=SHARED_GPU_PROMISE_JOBS)
def test_a_reserved_job_starts_no_later_than_first_promised(
    mode: str, cluster: NodeTable, jobs: list[TraceJob]
) -> None:
    result = simulate_with(RecordingScheduler(BACKFILL[mode], max_cycles=10_000), cluster, jobs)

    table = result.jobs
    promised = ~np.isnan(table.estimated_start_s)
    assert np.all(table.ran[promised]), "a job that was promised a start never started"
    late = promised & (table.start_s > table.estimated_start_s)
    assert not late.any(), (
        f"{table.job_id[late]} started at {table.start_s[late]}, after their first estimated "
        f"starts {table.estimated_start_s[late]}"
    )


# (c) The starvation guard: under shortest-job-first, no job waits past the guard plus the
#     longest run time (and a few short run times), however many short jobs keep arriving.

SMALL_LIMIT_S = (5, 20)
SMALL_GAP_S = 6
LARGE_LIMIT_S = (50, 200)
MAX_STARVING = BackfillArgs().max_starving


@dataclass(frozen=True)
class StarvationCase:
    nodes: int
    """Nodes of 8 GPUs."""
    small: list[tuple[float, float]]
    """(submit, duration) of each 1-GPU job, arriving at most ``SMALL_GAP_S`` apart."""
    large: list[tuple[float, float]]
    """(submit, duration) of each job that needs a whole node."""
    starvation_s: float

    def jobs(self) -> list[TraceJob]:
        small = [exact(f"s{i}", 1, t, d) for i, (t, d) in enumerate(self.small)]
        return small + [exact(f"L{i}", 8, t, d) for i, (t, d) in enumerate(self.large)]

    def bound_s(self) -> float:
        """The longest wait the guard allows: see the test's docstring."""
        longest_small = max(d for _, d in self.small)
        return self.starvation_s + max(d for _, d in self.large) + (MAX_STARVING + 2) * longest_small


@st.composite
def starvation_cases(draw: st.DrawFn) -> StarvationCase:
    """A stream of short 1-GPU jobs that keeps the nodes partly busy (about half of one node), and
    1-3 whole-node jobs submitted far enough apart that no two of them starve at the same time."""
    guard = draw(st.sampled_from((100.0, 200.0, 300.0)))
    small, now = [], 0.0
    for _ in range(draw(st.integers(20, 150))):
        now += draw(st.integers(0, SMALL_GAP_S))
        small.append((now, float(draw(st.integers(*SMALL_LIMIT_S)))))
    spacing = guard + 2 * LARGE_LIMIT_S[1] + (MAX_STARVING + 2) * SMALL_LIMIT_S[1]
    large, at = [], float(draw(st.integers(0, 50)))
    for _ in range(draw(st.integers(1, 3))):
        large.append((at, float(draw(st.integers(*LARGE_LIMIT_S)))))
        at += spacing + draw(st.integers(0, 100))
    return StarvationCase(draw(st.integers(1, 2)), small, large, guard)


# 300 short jobs, one every 5 s for 20 s each, keep about 4 of 8 GPUs busy until t=1500, never all
# free at once; L0 needs all 8 from t=7. The bound is 300 + 200 + 10 x 20 = 700 s.
STREAM = StarvationCase(1, [(5.0 * i, 20.0) for i in range(300)], [(7.0, 200.0)], 300.0)


@FAST
@given(case=starvation_cases())
@example(case=STREAM)
def test_starvation_guard_bounds_every_wait_under_sjf(case: StarvationCase) -> None:
    """Bound, were the guard to work as documented: from the first cycle after ``starvation_s`` the
    job holds a reservation that later jobs and cycles respect. That cycle comes within one short
    limit (short jobs arrive at most 6 s apart, and once they stop, the jobs still running end
    within their limits); the jobs running then end within the longest limit; ahead of it are at
    most the EASY head and ``max_starving`` other starving jobs, all short here (large jobs are
    submitted far enough apart not to starve together), each adding at most one short limit."""
    chosen = profile(
        "sjf",
        "gang",
        "first-fit",
        "backfill",
        args={"backfill": {"mode": "easy", "starvation_s": case.starvation_s}},
    )
    cluster = a_cluster().nodes(case.nodes, gpus=8).build()
    result = simulate_with(RecordingScheduler(chosen, max_cycles=20_000), cluster, case.jobs())

    waits = result.jobs.wait_s
    assert result.jobs.ran.all()
    worst = int(np.argmax(waits))
    assert waits[worst] <= case.bound_s(), (
        f"{result.jobs.job_id[worst]} waited {waits[worst]:g} s, more than {case.bound_s():g} s"
    )


# (d) Preemption evicts whole gangs: nothing of an evicted job stays bound, no running job is partial.


class GangChecker(RecordingScheduler):
    """Checks each snapshot against what the decisions so far imply, and each cycle's evictions.

    The snapshot's free GPUs must equal capacity less the running jobs' and partly bound jobs'
    placements (so an evicted job left nothing behind); every running job holds at least its
    ``min_available`` tasks, exactly as bound; a preempted job comes back pending with nothing bound.
    """

    def __init__(self, chosen: Profile) -> None:
        super().__init__(chosen, max_cycles=20_000)
        self.bound: dict[str, list[TaskPlacement]] = defaultdict(list)
        self.evicted: set[str] = set()
        self.lost: dict[str, float] = defaultdict(float)
        self.evictions: Counter[str] = Counter()

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        self._check_snapshot(snapshot)
        result = super().cycle(snapshot, now, rng)
        running = {r.job.id: r for r in snapshot.running}
        preempted = [d.job_id for d in result.decisions if isinstance(d, Preempt)]
        assert len(preempted) == len(set(preempted)), f"t={now}: a job preempted twice: {preempted}"
        for job_id in preempted:
            assert job_id in running, f"t={now}: {job_id} preempted but not running"
            victim = running[job_id]
            self.lost[job_id] += gpus_of(victim.placements) * (now - victim.start_s)
            del self.bound[job_id]
        self.evicted = set(preempted)
        self.evictions.update(preempted)
        after = {j for j in running if j not in self.evicted}
        for bind in result.binds:
            self.bound[bind.job_id].extend(bind.placements)
            if bind.starts:
                after.add(bind.job_id)
        for job_id in after:
            job = (
                running[job_id].job
                if job_id in running
                else next(p.job for p in snapshot.pending if p.job.id == job_id)
            )
            assert len(self.bound[job_id]) >= job.min_available, f"t={now}: {job_id} runs partly"
        return result

    def _check_snapshot(self, snapshot: ClusterSnapshot) -> None:
        nodes = snapshot.nodes
        free = np.where(nodes.gpu_exists(), MILLI_PER_GPU, 0).astype(np.int64)
        for running in snapshot.running:
            assert list(running.placements) == self.bound[running.job.id], f"{running.job.id} changed"
            assert len(running.placements) >= running.job.min_available, f"{running.job.id} runs partly"
            holders = running.placements
            for p in holders:
                free[p.node, list(p.gpu_indices)] -= p.gpu_milli
        pending = {p.job.id: p for p in snapshot.pending}
        for job_id in self.evicted:
            assert job_id in pending, f"{job_id} was evicted but is not pending again"
            assert pending[job_id].bound == (), f"{job_id} was evicted but still holds tasks"
        for item in snapshot.pending:
            for p in item.bound:
                free[p.node, list(p.gpu_indices)] -= p.gpu_milli
        assert np.array_equal(free, snapshot.gpu_free_milli), "free GPUs disagree with what jobs hold"


PRIORITY_CLASSES = ("best-effort", "low", "normal", "high", "critical")


@st.composite
def mixed_priority_jobs(draw: st.DrawFn) -> list[TraceJob]:
    """1-30 jobs of mixed priority classes and groups, some gangs starting with part of their tasks."""
    jobs = []
    for i in range(draw(st.integers(1, 30))):
        tasks = draw(st.integers(1, 4))
        builder = (
            a_job(f"j{i}")
            .tasks(tasks)
            .gpus(draw(st.sampled_from((0.5, 1, 1, 2, 4))))
            .priority(draw(st.sampled_from(PRIORITY_CLASSES)))
            .user(f"u{i % 3}", draw(st.sampled_from(("g0", "g1"))))
            .submitted(draw(st.integers(0, 400)))
            .min_available(draw(st.integers(1, tasks)))
        )
        jobs.append(trace(builder, draw(st.integers(1, 500))))
    return jobs


PREEMPTING = {
    "priority+fifo+gang+binpack+priority-preempt": profile(
        "priority",
        "fifo",
        "gang",
        "binpack",
        "priority-preempt",
        args={"priority-preempt": {"min_runtime_s": 30}},
    ),
    "priority+fifo(lax)+first-fit+priority-preempt, no gang": profile(
        "priority",
        "fifo",
        "first-fit",
        "priority-preempt",
        strict=False,
        args={"priority-preempt": {"min_runtime_s": 0}},
    ),
    "drf+gang+binpack+quota reclaim": profile(
        "drf",
        "gang",
        "binpack",
        "quota",
        args={
            "quota": {
                "min_runtime_s": 30,
                "orgs": {"lab": {"groups": {"g0": {"nominal": 4}, "g1": {"nominal": 4}}}},
            }
        },
    ),
}


@pytest.mark.parametrize("name", PREEMPTING)
@FAST
@given(cluster=clusters(), jobs=mixed_priority_jobs())
def test_preemption_never_leaves_a_gang_partly_evicted(
    name: str, cluster: NodeTable, jobs: list[TraceJob]
) -> None:
    checker = GangChecker(PREEMPTING[name])
    result = simulate_with(checker, cluster, jobs, period_s=50)

    # The job table counts each eviction and the GPU time it threw away.
    preemptions = by_id(result.jobs, "preemptions")
    lost = by_id(result.jobs, "lost_gpu_s")
    for job_id, count in preemptions.items():
        assert count == checker.evictions[job_id]
        assert lost[job_id] == pytest.approx(checker.lost.get(job_id, 0.0))
