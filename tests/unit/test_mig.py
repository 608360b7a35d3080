"""MIG: profile tables, layouts, the planner, fit and placement, config, reboots and re-planning."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest

from builders import profile
from loadmaster.config import load_cluster
from loadmaster.errors import ConfigError, ModelError
from loadmaster.model import Job, MigPoolConfig, Node, NodeTable, ResourceType, TaskRequest, TraceJob
from loadmaster.model.mig import (
    MIG_MODELS,
    MigInstance,
    layout_problem,
    layout_text,
    mig_model_for,
    parse_layout,
)
from loadmaster.scheduling import Scheduler
from loadmaster.scheduling.mig_plan import plan_layouts, with_interactive_default
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


def test_a_mig_gang_spreads_without_topology_preference() -> None:
    jobs = [TraceJob(Job("g", "u", "g", 0.0, 9, TaskRequest(0, mig_profile="1g.10gb"), 1000.0), 10.0)]
    mig = MigSimOptions((MigPoolConfig("p", "1g.10gb x7"),))
    result = simulate(nodes(1, 2), Scheduler(profile("fifo", "first-fit")), jobs, SimOptions(mig=mig))
    assert result.jobs.start_s[0] == 0.0 and result.jobs.nodes_used[0] == 2


def test_interactive_jobs_default_to_the_pools_profile() -> None:
    small = TraceJob(Job("s", "u", "g", 0.0, 1, TaskRequest(500), 100.0, pool="p"), 10.0)
    big = TraceJob(Job("b", "u", "g", 0.0, 1, TaskRequest(2000), 100.0, pool="p"), 10.0)
    out = with_interactive_default([small, big], [MigPoolConfig("p", "1g.10gb x7", None, "1g.10gb")])
    assert out[0].job.request.mig_profile == "1g.10gb" and out[0].job.request.gpu_milli == 0
    assert out[1] == big


def test_cluster_config_reads_and_checks_the_mig_section(tmp_path: Path) -> None:
    cluster = load_cluster(str(FIXTURES / "cluster.yaml"))
    assert cluster.mig == (MigPoolConfig("interactive", "3g.40gb + 2g.20gb + 1g.10gb x2", None, "1g.10gb"),)
    text = (FIXTURES / "cluster.yaml").read_text().replace("1g.10gb x2", "1g.10gb x3")
    bad = tmp_path / "bad.yaml"
    bad.write_text(text)
    with pytest.raises(ConfigError, match=r"bad.yaml:\d+: pools.interactive.mig.layout: .*do not fit"):
        load_cluster(str(bad))


def test_layout_text_round_trips() -> None:
    text = "3g.40gb + 2g.20gb + 1g.10gb x2"
    assert layout_text(parse_layout(A100, text)) == text
