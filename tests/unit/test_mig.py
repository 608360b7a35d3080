"""MIG: profile tables, layouts, the planner, fit and placement, config, reboots and re-planning."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import numpy as np
import pytest

from builders import profile
from loadmaster.config import load_cluster
from loadmaster.errors import ConfigError, ModelError
from loadmaster.model import (
    ClusterSnapshot,
    Job,
    MigPoolConfig,
    Node,
    NodeTable,
    ResourceType,
    TaskRequest,
    TraceJob,
)
from loadmaster.model.mig import (
    MIG_MODELS,
    SMALLEST_FIT,
    MigInstance,
    layout_problem,
    layout_text,
    mig_model_for,
    parse_layout,
    smallest_fitting,
)
from loadmaster.scheduling import Scheduler
from loadmaster.scheduling.mig_plan import plan_layouts, with_interactive_default
from loadmaster.scheduling.state import WorkingState
from loadmaster.sim import SimOptions, simulate
from loadmaster.sim.mig import MigSimOptions, Reboot

A100 = MIG_MODELS["A100-80GB"]
FIXTURES = Path(__file__).parent.parent / "fixtures" / "mig"


@pytest.mark.parametrize(
    ("layout", "problem"),
    [
        ("7g.80gb", None),
        ("1g.10gb x7", None),
        ("3g.40gb + 2g.20gb + 1g.10gb x2", None),
        ("4g.40gb + 3g.40gb", None),
        ("3g.40gb x2", None),
        ("1g.20gb x4", None),
        ("4g.40gb + 4g.40gb", "do not fit"),
        ("1g.10gb x8", "do not fit"),
        ("1g.10gb+me x2", "do not fit"),
        ("7g.80gb + 1g.10gb", "do not fit"),
        ("1g.5gb", "does not exist"),
    ],
)
def test_layouts_follow_nvidias_placement_table(layout: str, problem: str | None) -> None:
    if problem is None:
        assert layout_problem(A100, parse_layout(A100, layout)) is None
    else:
        with pytest.raises(ModelError, match=problem):
            parse_layout(A100, layout)


def test_starts_must_be_allowed_for_the_profile() -> None:
    assert "cannot start" in (layout_problem(A100, [MigInstance("2g.20gb", 1)]) or "")
    assert "cannot start" in (layout_problem(A100, [MigInstance("1g.10gb", 7)]) or "")
    assert "overlaps" in (layout_problem(A100, [MigInstance("3g.40gb", 4), MigInstance("1g.10gb", 5)]) or "")


@pytest.mark.parametrize(
    ("gpu_model", "name", "smallest"),
    [
        ("A100-SXM4-40GB", "A100-40GB", "1g.5gb"),
        ("A100-SXM4-80GB", "A100-80GB", "1g.10gb"),
        ("H100-SXM5-80GB", "H100-80GB", "1g.10gb"),
        ("H200-141GB", "H200-141GB", "1g.18gb"),
    ],
)
def test_gpu_models_map_to_their_mig_tables(gpu_model: str, name: str, smallest: str) -> None:
    model = mig_model_for(gpu_model)
    assert model is not None and model.name == name
    assert model.profiles[0].name == smallest
    assert model.profile(f"{smallest}+me").max_per_gpu == 1


def test_a_task_gets_one_mig_device_and_nothing_else() -> None:
    assert TaskRequest(0, mig_profile="nvidia.com/mig-1g.10gb").mig_profile == "1g.10gb"
    with pytest.raises(ModelError, match="exactly one MIG device"):
        TaskRequest(1000, mig_profile="1g.10gb")
    with pytest.raises(ModelError, match="not a profile name"):
        TaskRequest(0, mig_profile="half-a-gpu")


def test_the_planner_follows_the_demand_mix() -> None:
    plan = plan_layouts(A100, 2, {"3g.40gb": 2, "1g.10gb": 4}, current=[parse_layout(A100, "7g.80gb")] * 2)
    assert plan.served_slices == pytest.approx(10)
    assert plan.current_served_slices == 0
    assert plan.gain_slices == pytest.approx(10)
    assert all(layout_problem(A100, layout) is None for layout in plan.layouts)


def nodes(gpus: int = 1, count: int = 1) -> NodeTable:
    rtype = ResourceType("a100", "A100-SXM4-80GB", 81_920, 0, 0)
    table = [Node(f"n{i}", "p", "z", "r", "a100", gpus, 8000, 64_000) for i in range(count)]
    return NodeTable.build(table, {"a100": rtype})


def mig_jobs(
    profile_name: str, count: int, duration_s: float = 100.0, submit_s: float = 0.0
) -> list[TraceJob]:
    request = TaskRequest(0, mig_profile=profile_name)
    return [
        TraceJob(Job(f"{profile_name}-{i}", "u", "g", submit_s, 1, request, 10_000.0), duration_s)
        for i in range(count)
    ]


def run(jobs: list[TraceJob], mig: MigSimOptions, gpus: int = 1):  # type: ignore[no-untyped-def]
    return simulate(nodes(gpus), Scheduler(profile("fifo", "first-fit")), jobs, SimOptions(mig=mig))


def test_a_profile_the_layout_lacks_waits_with_a_reason() -> None:
    result = run(mig_jobs("3g.40gb", 1), MigSimOptions((MigPoolConfig("p", "1g.10gb x7"),)))
    assert np.isnan(result.jobs.start_s).all()


def test_a_mig_pool_hides_its_gpus_from_whole_gpu_jobs() -> None:
    whole = TraceJob(Job("w", "u", "g", 0.0, 1, TaskRequest(1000), 1000.0), 10.0)
    result = run([whole], MigSimOptions((MigPoolConfig("p", "7g.80gb"),)))
    assert np.isnan(result.jobs.start_s).all()


def test_replanning_reconfigures_an_empty_gpu_and_reports_the_cost() -> None:
    mig = MigSimOptions((MigPoolConfig("p", "1g.10gb x7"),), reconfigure_s=60.0, replan_period_s=50.0)
    result = run(mig_jobs("3g.40gb", 2), mig)
    assert result.mig is not None
    assert result.mig.reconfigurations == 1
    assert result.mig.reconfigure_gpu_s == 60.0
    assert result.mig.jobs_delayed == 2
    assert list(result.jobs.start_s) == [110.0, 110.0]  # the re-plan at 50 s plus 60 s of reconfiguration
    assert result.mig.layouts == {"3g.40gb x2": 1}


def test_a_reboot_requeues_jobs_and_reapplies_the_layout() -> None:
    reboot = Reboot("n0", at_s=10.0, down_s=100.0)
    mig = MigSimOptions((MigPoolConfig("p", "1g.10gb x7"),), reconfigure_s=30.0, reboots=(reboot,))
    result = run(mig_jobs("1g.10gb", 3), mig)
    assert result.mig is not None and result.mig.reboots == 1 and result.mig.jobs_preempted == 3
    assert list(result.jobs.start_s) == [140.0] * 3  # back at 110 s, layout ready 30 s later
    assert list(result.jobs.preemptions) == [1, 1, 1]
    assert result.mig.layouts == {"1g.10gb x7": 1}


def test_the_timeline_counts_a_mig_gpu_as_allocated_only_as_far_as_its_instances_in_use() -> None:
    mig = MigSimOptions((MigPoolConfig("p", "3g.40gb + 2g.20gb + 1g.10gb x2"),))
    jobs = [*mig_jobs("3g.40gb", 1, duration_s=100.0), *mig_jobs("1g.10gb", 1, duration_s=50.0)]
    timeline = run(jobs, mig, gpus=2).timeline
    allocated = dict(zip(timeline.time_s.tolist(), timeline.allocated_gpus[:, 0].tolist(), strict=True))
    assert allocated[0.0] == pytest.approx(4 / 7)  # 3 + 1 of 7 slices of one GPU; the other GPU idle
    assert allocated[50.0] == pytest.approx(3 / 7)
    assert allocated[100.0] == pytest.approx(0.0)
    assert timeline.free_gpus[0] == pytest.approx(2 - 4 / 7)


def test_a_mig_gang_spreads_without_topology_preference() -> None:
    jobs = [TraceJob(Job("g", "u", "g", 0.0, 9, TaskRequest(0, mig_profile="1g.10gb"), 1000.0), 10.0)]
    mig = MigSimOptions((MigPoolConfig("p", "1g.10gb x7"),))
    result = simulate(nodes(1, 2), Scheduler(profile("fifo", "first-fit")), jobs, SimOptions(mig=mig))
    assert result.jobs.start_s[0] == 0.0 and result.jobs.nodes_used[0] == 2


def test_interactive_jobs_default_to_the_pools_profile() -> None:
    small = TraceJob(Job("s", "u", "g", 0.0, 1, TaskRequest(500), 100.0, pool="p"), 10.0)
    big = TraceJob(Job("b", "u", "g", 0.0, 1, TaskRequest(2000), 100.0, pool="p"), 10.0)
    config = MigPoolConfig("p", "1g.10gb x7", None, "1g.10gb")
    out = with_interactive_default([small, big], [config], nodes())
    assert out[0].job.request.mig_profile == "1g.10gb" and out[0].job.request.gpu_milli == 0
    assert out[1] == big


def small_job(request: TaskRequest, pool: str = "p", tasks: int = 1) -> TraceJob:
    return TraceJob(Job("j", "u", "g", 0.0, tasks, request, 100.0, pool=pool), 10.0)


@pytest.mark.parametrize(
    ("request_", "pool", "tasks", "expected"),
    [
        (TaskRequest(1000, gpu_memory_mib=8_000), "p", 1, "1g.10gb"),
        (
            TaskRequest(1000, gpu_memory_mib=10_240),
            "p",
            1,
            "1g.10gb",
        ),  # "10 GB or less" (docs/design-principles.md)
        (TaskRequest(1000, gpu_memory_mib=10_241), "p", 1, "2g.20gb"),
        (TaskRequest(1000, gpu_memory_mib=30_000), "p", 1, "3g.40gb"),
        (TaskRequest(1000, gpu_memory_mib=50_000), "p", 1, None),  # no profile of the layout holds it
        (TaskRequest(100), "p", 1, "1g.10gb"),  # no memory recorded: a tenth of 80 GiB
        (TaskRequest(250), "p", 1, "2g.20gb"),  # a quarter: 20 GiB
        (TaskRequest(1000), "p", 1, None),  # a whole 80 GiB GPU
        (TaskRequest(2000, gpu_memory_mib=1_000), "p", 1, None),  # two GPUs
        (TaskRequest(1000, gpu_memory_mib=1_000), "p", 2, None),  # two tasks
        (TaskRequest(1000, gpu_memory_mib=1_000), "other", 1, None),  # not the MIG pool
        (TaskRequest(0, gpu_memory_mib=1_000, mig_profile="3g.40gb"), "p", 1, "3g.40gb"),  # its own
    ],
)
def test_smallest_fit_gives_the_smallest_profile_of_the_layout_that_holds_the_job(
    request_: TaskRequest, pool: str, tasks: int, expected: str | None
) -> None:
    config = MigPoolConfig("p", "3g.40gb + 2g.20gb + 1g.10gb x2", None, SMALLEST_FIT)
    job = small_job(request_, pool, tasks)
    out = with_interactive_default([job], [config], nodes())[0]
    if expected is None:
        assert out == job
    else:
        assert out.job.request.mig_profile == expected and out.job.request.gpu_milli == 0
        assert out.duration_s == job.duration_s and out.job.request.gpu_memory_mib == request_.gpu_memory_mib


def test_smallest_fit_leaves_media_engine_profiles_to_the_jobs_that_name_them() -> None:
    layout = parse_layout(A100, "1g.10gb+me + 3g.40gb")
    assert smallest_fitting(A100, layout, 5_000) == "3g.40gb"
    assert smallest_fitting(A100, layout, 50_000) is None


def test_cluster_config_reads_and_checks_the_mig_section(tmp_path: Path) -> None:
    cluster = load_cluster(str(FIXTURES / "cluster.yaml"))
    assert cluster.mig == (MigPoolConfig("interactive", "3g.40gb + 2g.20gb + 1g.10gb x2", None, "1g.10gb"),)
    text = (FIXTURES / "cluster.yaml").read_text().replace("1g.10gb x2", "1g.10gb x3")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+: pools.interactive.mig.layout: .*do not fit"):
        load_cluster(str(bad))


@pytest.mark.parametrize(
    ("value", "loaded"),
    [("smallest-fit", SMALLEST_FIT), ("nvidia.com/mig-2g.20gb", "2g.20gb"), ("1g.10gb", "1g.10gb")],
)
def test_cluster_config_reads_the_interactive_default(tmp_path: Path, value: str, loaded: str) -> None:
    path = tmp_path / "c.yaml"
    path.write_text((FIXTURES / "cluster.yaml").read_text().replace("1g.10gb\n", f"{value}\n"))
    assert load_cluster(str(path)).mig[0].interactive_default == loaded


@pytest.mark.parametrize("value", ["smalest-fit", "1g.99gb", "1g.6gb"])
def test_a_bad_interactive_default_names_the_file_line_field_and_what_is_allowed(
    tmp_path: Path, value: str
) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text((FIXTURES / "cluster.yaml").read_text().replace("1g.10gb\n", f"{value}\n"))
    pattern = (
        rf"bad.yaml:13: pools.interactive.mig.interactive_default: '{value}' is neither smallest-fit "
        r"nor a MIG profile of A100-80GB; allowed: smallest-fit, 1g.10gb, 1g.10gb\+me, 1g.20gb, "
    )
    with pytest.raises(ConfigError, match=pattern):
        load_cluster(str(path))


def test_an_interactive_default_that_is_not_text_says_what_is_allowed(tmp_path: Path) -> None:
    path = tmp_path / "bad.yaml"
    path.write_text((FIXTURES / "cluster.yaml").read_text().replace("1g.10gb\n", "true\n"))
    pattern = (
        r"bad.yaml:13: pools.interactive.mig.interactive_default: .*must be smallest-fit or a MIG profile"
    )
    with pytest.raises(ConfigError, match=pattern):
        load_cluster(str(path))


def test_layout_text_round_trips() -> None:
    text = "3g.40gb + 2g.20gb + 1g.10gb x2"
    assert layout_text(parse_layout(A100, text)) == text


@pytest.mark.parametrize("cpu_milli", [0, 3000], ids=["instances only", "cpu too"])
def test_a_reservation_holds_its_mig_instances_against_later_jobs(cpu_milli: int) -> None:
    """EASY backfill: a later MIG job that would outlast the reservation may not take an instance
    the reserved gang needs (it would delay the gang to its own end); one that ends before may.
    With CPU asked too, the reservation is planned on releases summed at once, which must give
    their instances back as well."""
    mig = MigSimOptions((MigPoolConfig("p", "3g.40gb x2"),))

    def job(name: str, submit_s: float, tasks: int, run_s: float, cpu: int = cpu_milli) -> TraceJob:
        request = TaskRequest(0, cpu, mig_profile="3g.40gb")
        return TraceJob(Job(name, "u", "g", submit_s, tasks, request, run_s), run_s)

    jobs = [
        job("running", 0.0, 1, 100.0, 2 * cpu_milli),
        job("gang", 1.0, 2, 50.0),
        job("late", 2.0, 1, 500.0, 0),
    ]
    jobs.append(job("short", 3.0, 1, 40.0, 0))
    easy = profile("fifo", "gang", "first-fit", "backfill", args={"backfill": {"mode": "easy"}})
    result = simulate(nodes(), Scheduler(easy), jobs, SimOptions(mig=mig))
    start = dict(zip(result.jobs.job_id.tolist(), result.jobs.start_s.tolist(), strict=True))
    assert start["gang"] == 100.0  # reserved from the running job's end, and held
    assert start["short"] == 3.0  # ends at 43, before the reservation: backfilled on the free instance
    assert start["late"] == 150.0  # after the gang, not on an instance the gang needed


class _CountsOnly:
    """A MIG view that answers the snapshot's questions but is no pool the scheduler can work on."""

    def free_count(self, profile: str) -> np.ndarray:
        return np.zeros(1, dtype=np.int64)

    def idle_gpus(self) -> np.ndarray:
        return np.zeros(1)

    def node_gpus(self, node: int) -> tuple[int, ...]:
        return ()


def test_the_working_state_refuses_a_mig_view_that_is_not_a_pool() -> None:
    snapshot = dataclasses.replace(ClusterSnapshot.empty(nodes()), mig=_CountsOnly())
    with pytest.raises(ModelError, match=r"mig_pool\.MigPool, got _CountsOnly"):
        WorkingState.from_snapshot(snapshot)


def test_a_failed_mig_request_does_not_fail_a_request_of_another_profile_as_smaller() -> None:
    # The dominance check (allocate.dominated) compares request sizes, and a MIG request's
    # milli-GPU is 0 whatever its profile: a 3g.40gb that the layout lacks once made a 1g.10gb
    # behind it "fail as for a smaller request" in a non-strict walk, which never started it.
    jobs = mig_jobs("3g.40gb", 1) + mig_jobs("1g.10gb", 1, submit_s=1.0)
    mig = MigSimOptions((MigPoolConfig("p", "1g.10gb x7"),))
    result = simulate(
        nodes(1), Scheduler(profile("fifo", "first-fit", strict=False)), jobs, SimOptions(mig=mig)
    )
    assert np.isnan(result.jobs.start_s[0])
    assert result.jobs.start_s[1] == 1.0
