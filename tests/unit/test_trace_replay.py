"""Replaying a trace: conversion defaults, jobs too big for the cluster, load and cluster-size scaling,
``kind: trace`` workload specs and ``simulate --trace``."""

from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import pytest
from typer.testing import CliRunner

from builders import a_trace, a_trace_row
from conftest import reference_data
from loadmaster.cli import app
from loadmaster.config import load_cluster, load_workload
from loadmaster.errors import ConfigError
from loadmaster.model import Node, NodeTable, ResourceType
from loadmaster.scheduling.mig_plan import with_interactive_default
from loadmaster.traces import Trace, read_trace
from loadmaster.traces.replay import ReplayError, ReplayOptions, replay, trace_capacity_gpus
from loadmaster.workload import offered_load

GPU = ResourceType("gpu", "A100", 81920, 8000, 65536)


def cluster(*gpus: int) -> NodeTable:
    """Nodes with the given GPU counts, each with the type's CPU and memory per GPU."""
    nodes = [
        Node(f"n{i}", "p", "z", "r", "gpu", g, g * GPU.cpu_milli_per_gpu, g * GPU.memory_mib_per_gpu)
        for i, g in enumerate(gpus)
    ]
    return NodeTable.build(nodes, {"gpu": GPU})


def row(job_id: str, **fields: Any) -> dict[str, Any]:
    """A canonical row of one 1-GPU task of 100 s submitted at 0 by nobody; ``fields`` override."""
    return a_trace_row(job_id, **({"duration_s": 100.0} | fields))


def steady(n: int, gap_s: float = 60.0, **fields: Any) -> Trace:
    """``n`` jobs ``gap_s`` apart, by four users."""
    return a_trace([row(f"j{i}", submit_s=i * gap_s, user=f"u{i % 4}", **fields) for i in range(n)])


SMALL = cluster(4, 4)


@pytest.mark.parametrize(
    ("fields", "reason"),
    [
        ({"duration_s": None}, "no run time"),
        ({"duration_s": 0.0}, "run time 0"),
        ({"gpu_milli_per_task": 0}, "no GPU asked for"),
        ({"gpu_milli_per_task": 8000}, "a task wants more GPUs than the widest node has (4)"),
        ({"tasks": 9}, "more GPUs than the cluster has (8)"),
        ({"tasks": 3, "gpu_milli_per_task": 4000}, "more GPUs than the cluster has (8)"),
    ],
)
def test_rows_that_cannot_replay_are_dropped_and_counted(fields: dict[str, Any], reason: str) -> None:
    trace = a_trace([row("ok"), row("bad", submit_s=10.0, **fields), row("ok2", submit_s=20.0)])
    done = replay(trace, SMALL)
    assert [t.job.id for t in done.jobs] == ["ok", "ok2"]
    assert dict(done.report.dropped) == {reason: 1}
    assert done.report.first_dropped[reason] == "bad"
    assert any(reason in line for line in done.report.lines())


@pytest.mark.parametrize(
    "fields",
    [{"gpu_milli_per_task": 8000}, {"tasks": 9}],
)
def test_too_big_stop_names_the_job(fields: dict[str, Any]) -> None:
    trace = a_trace([row("ok"), row("huge", submit_s=5.0, **fields)])
    with pytest.raises(ReplayError) as caught:
        replay(trace, SMALL, ReplayOptions(too_big="stop"))
    assert caught.value.field == "too_big"
    assert "job huge" in str(caught.value)


def test_fractional_and_multi_gpu_tasks_that_fit_are_kept() -> None:
    trace = a_trace(
        [row("half", gpu_milli_per_task=500), row("two", submit_s=1.0, tasks=2, gpu_milli_per_task=4000)]
    )
    jobs = replay(trace, SMALL).jobs
    assert [(t.job.tasks, t.job.request.gpu_milli) for t in jobs] == [(1, 500), (2, 4000)]


@pytest.mark.parametrize(
    ("limit", "options", "expected"),
    [
        (300.0, ReplayOptions(), 300.0),  # the trace's limit
        (None, ReplayOptions(), 100.0),  # none: a perfect estimate
        (0.0, ReplayOptions(), 100.0),  # 0 means none
        (None, ReplayOptions(time_limit_factor=3.0), 300.0),
        (50.0, ReplayOptions(), 50.0),  # ran past its limit: kept as recorded
        (300.0, ReplayOptions(ignore_time_limits=True, time_limit_factor=2.0), 200.0),
    ],
)
def test_time_limit_policy(limit: float | None, options: ReplayOptions, expected: float) -> None:
    job = replay(a_trace([row("a", time_limit_s=limit)]), SMALL, options).jobs[0]
    assert job.job.time_limit_s == expected
    assert job.duration_s == 100.0


@pytest.mark.parametrize(
    ("options", "queue", "amounts"),
    [
        (ReplayOptions(), "default", (1000, 0, 0, 0)),
        (ReplayOptions(queues="trace"), "batch", (1000, 0, 0, 0)),
        (ReplayOptions(requests="trace"), "default", (1000, 2000, 1024, 40960)),
    ],
)
def test_queue_and_request_mapping(options: ReplayOptions, queue: str, amounts: tuple[int, ...]) -> None:
    fields = {
        "queue": "batch",
        "cpu_milli_per_task": 2000,
        "memory_mib_per_task": 1024,
        "gpu_memory_mib": 40960,
    }
    job = replay(a_trace([row("a", user="ann", group="lab", **fields)]), SMALL, options).jobs[0].job
    assert (job.user, job.group, job.queue, job.pool, job.resource_type) == ("ann", "lab", queue, None, None)
    r = job.request
    assert (r.gpu_milli, r.cpu_milli, r.memory_mib, r.gpu_memory_mib) == amounts


def test_unknown_users_and_repeated_ids() -> None:
    trace = a_trace([row("7"), row("7", submit_s=1.0), row("7", submit_s=2.0)])
    jobs = replay(trace, SMALL).jobs
    assert [t.job.id for t in jobs] == ["7", "7~2", "7~3"]
    assert {t.job.user for t in jobs} == {"unknown"}


def test_jobs_are_sorted_and_start_at_zero() -> None:
    trace = a_trace([row("late", submit_s=500.0), row("early", submit_s=200.0), row("mid", submit_s=300.0)])
    jobs = replay(trace, SMALL).jobs
    assert [(t.job.id, t.job.submit_s) for t in jobs] == [("early", 0.0), ("mid", 100.0), ("late", 300.0)]


def test_max_jobs_keeps_the_first_replayable_ones() -> None:
    trace = a_trace(
        [row("a"), row("none", submit_s=1.0, duration_s=None), row("b", submit_s=2.0), row("c", submit_s=3.0)]
    )
    assert [t.job.id for t in replay(trace, SMALL, ReplayOptions(max_jobs=2)).jobs] == ["a", "b"]


@pytest.mark.parametrize("target", [0.2, 0.75, 1.0, 2.5])
def test_load_scaling_hits_the_target_on_a_small_trace(target: float) -> None:
    trace = a_trace(
        [
            row(f"j{i}", submit_s=i * 37.0 + (i % 3) * 11.0, duration_s=50.0 + i, tasks=1 + i % 4)
            for i in range(40)
        ]
    )
    done = replay(trace, SMALL, ReplayOptions(load=target))
    assert offered_load(done.jobs, SMALL.total_gpus) == pytest.approx(target, rel=0.01)
    assert done.report.offered_load == pytest.approx(target, rel=0.01)


@pytest.mark.parametrize(
    ("cluster_name", "target"), [("lab", 0.5), ("lab", 0.9), ("large", 0.85), ("large", 1.2)]
)
def test_load_scaling_on_the_lublin_log(cluster_name: str, target: float) -> None:
    trace = read_trace(reference_data("swf/lublin_256.swf"))
    nodes = load_cluster(cluster_name).nodes
    done = replay(trace, nodes, ReplayOptions(load=target))
    achieved = offered_load(done.jobs, nodes.total_gpus)
    assert abs(achieved - target) <= 0.01 * target
    assert done.report.jobs + sum(done.report.dropped.values()) == len(trace)


def test_rate_scaling_keeps_the_trace_load_on_a_bigger_cluster() -> None:
    trace = steady(50, tasks=2)
    recorded = replay(trace, cluster(4, 4), ReplayOptions(trace_gpus=8))
    bigger = replay(trace, cluster(4, 4, 4, 4), ReplayOptions(trace_gpus=8))
    assert recorded.report.time_factor == 1.0
    assert bigger.report.time_factor == 0.5
    assert len(bigger.jobs) == 50
    assert offered_load(bigger.jobs, 16) == pytest.approx(offered_load(recorded.jobs, 8))


def test_rate_scaling_without_the_trace_size_keeps_recorded_times() -> None:
    done = replay(steady(10), cluster(4, 4, 4, 4))
    assert done.report.time_factor == 1.0
    assert done.report.trace_gpus is None
    assert "cluster size unknown" in done.report.lines()[0]


def test_trace_size_comes_from_the_metadata() -> None:
    assert trace_capacity_gpus(a_trace([], MaxProcs="128", MaxNodes="64")) == 128
    assert trace_capacity_gpus(a_trace([], MaxNodes="256")) == 256
    assert trace_capacity_gpus(a_trace([])) is None


@pytest.mark.parametrize(("gpus", "expected_jobs"), [((4, 4, 4, 4), 400), ((4,), 100), ((4, 4), 200)])
def test_sample_scaling_draws_jobs_in_proportion_to_the_cluster(
    gpus: tuple[int, ...], expected_jobs: int
) -> None:
    trace = steady(200, gap_s=60.0, duration_s=120.0)
    nodes = cluster(*gpus)
    done = replay(trace, nodes, ReplayOptions(scale="sample", trace_gpus=8, seed=3))
    assert len(done.jobs) == expected_jobs
    assert len({t.job.id for t in done.jobs}) == expected_jobs
    assert done.report.sampled_from == 200
    submits = [t.job.submit_s for t in done.jobs]
    assert submits == sorted(submits)
    assert max(submits) == pytest.approx(200 * 60.0, rel=0.05)  # the span is kept
    # Same mix at the same span on proportionally more GPUs: about the trace's own load.
    assert offered_load(done.jobs, nodes.total_gpus) == pytest.approx(
        offered_load(replay(trace, cluster(4, 4)).jobs, 8), rel=0.1
    )


def test_sample_scaling_is_deterministic_and_reaches_a_load() -> None:
    trace = steady(100, duration_s=90.0)
    options = ReplayOptions(scale="sample", trace_gpus=4, seed=11, load=0.7)
    first = replay(trace, SMALL, options)
    second = replay(trace, SMALL, options)
    assert [(t.job.id, t.job.submit_s) for t in first.jobs] == [
        (t.job.id, t.job.submit_s) for t in second.jobs
    ]
    assert offered_load(first.jobs, SMALL.total_gpus) == pytest.approx(0.7, rel=0.01)


def test_sample_scaling_needs_the_trace_size() -> None:
    with pytest.raises(ReplayError) as caught:
        replay(steady(10), SMALL, ReplayOptions(scale="sample"))
    assert caught.value.field == "scale"
    assert "trace_gpus" in str(caught.value)


@pytest.mark.parametrize(
    ("options", "field"),
    [
        ({"load": 0.0}, "load"),
        ({"time_limit_factor": -1.0}, "time_limit_factor"),
        ({"trace_gpus": 0}, "trace_gpus"),
        ({"max_jobs": 0}, "max_jobs"),
    ],
)
def test_bad_options_name_the_field(options: dict[str, Any], field: str) -> None:
    with pytest.raises(ReplayError) as caught:
        ReplayOptions(**options)
    assert caught.value.field == field


def test_a_load_needs_two_distinct_submit_times() -> None:
    with pytest.raises(ReplayError, match="two or more distinct times"):
        replay(a_trace([row("a"), row("b")]), SMALL, ReplayOptions(load=0.5))


# --- kind: trace workload specs ----------------------------------------------------------------


def write_spec(folder: Path, text: str) -> str:
    path = folder / "replay.yaml"
    path.write_text(text)
    return str(path)


def test_trace_spec_replays_a_path_relative_to_the_spec(tmp_path: Path) -> None:
    swf = reference_data("swf/lublin_256.swf")
    (tmp_path / "traces").mkdir()
    (tmp_path / "traces" / "log.swf").write_bytes(swf.read_bytes())
    spec = write_spec(tmp_path, "kind: trace\npath: traces/log.swf\nload: 0.8\njobs: 500\n")
    lab = load_cluster("lab")
    workload = load_workload(spec, lab)
    assert len(workload.jobs) == 500
    assert offered_load(workload.jobs, lab.nodes.total_gpus) == pytest.approx(0.8, rel=0.01)
    assert workload.replay is not None
    assert workload.load_text == "0.80 (replayed)"
    overridden = load_workload(spec, lab, jobs=100, load=0.5)
    assert len(overridden.jobs) == 100
    assert offered_load(overridden.jobs, lab.nodes.total_gpus) == pytest.approx(0.5, rel=0.01)


@pytest.mark.parametrize(
    ("text", "field", "message"),
    [
        ("kind: trace\n", "path", "required field is missing"),
        ("kind: trace\npath: nope.swf\n", "path", "no such file"),
        ("kind: trace\npath: {swf}\nscale: up\n", "scale", "Input should be 'rate' or 'sample'"),
        ("kind: trace\npath: {swf}\ntrace_gpus: 0\n", "trace_gpus", "greater than or equal to 1"),
        (
            "kind: trace\npath: {swf}\ntoo_big: stop\n",
            "too_big",
            "job 29: more GPUs than the cluster has (160)",
        ),
        ("kind: trace\npath: {swf}\nformat: nope\n", "format", "unknown format 'nope'"),
        ("kind: trace\npath: {swf}\npools: {{training: {{}}}}\n", "pools", "unknown field; allowed: kind"),
        ("kind: swf\njobs: 3\n", "kind", "Input should be 'lab' or 'trace'"),
    ],
)
def test_bad_trace_specs_name_the_file_and_field(tmp_path: Path, text: str, field: str, message: str) -> None:
    swf = reference_data("swf/lublin_256.swf")
    spec = write_spec(tmp_path, text.format(swf=swf))
    with pytest.raises(ConfigError) as caught:
        load_workload(spec, load_cluster("lab"))
    assert str(caught.value).startswith(f"{spec}:")
    assert f": {field}: " in str(caught.value)
    assert message in str(caught.value)


def test_simulate_replays_a_spec_and_a_trace_file(tmp_path: Path) -> None:
    swf = reference_data("swf/lublin_256.swf")
    spec = write_spec(tmp_path, f"kind: trace\npath: {swf}\nload: 0.7\n")
    runs = {
        "spec": ["--workload", spec, "--jobs", "150"],
        "trace": ["--trace", str(swf), "--jobs", "150", "--load", "0.7"],
    }
    for name, args in runs.items():
        out = tmp_path / name
        result = CliRunner().invoke(app, ["simulate", *args, "--profiles", "fifo", "--out", str(out)])
        assert result.exit_code == 0, result.output
        assert "replay: 150 jobs from 10,000 rows on 160 GPUs, offered load 0.700" in result.output
        assert "dropped 240: more GPUs than the cluster has (160)" in result.output
        assert json.loads((out / "metrics.json").read_text())["profiles"]["fifo"]["jobs"] == 150


TWO_POOLS = NodeTable.build(
    [
        Node("a0", "a", "z", "r", "gpu", 4, 4 * GPU.cpu_milli_per_gpu, 4 * GPU.memory_mib_per_gpu),
        Node("b0", "b", "z", "r", "gpu", 8, 8 * GPU.cpu_milli_per_gpu, 8 * GPU.memory_mib_per_gpu),
    ],
    {"gpu": GPU},
)


def test_a_pool_takes_every_job_and_is_what_the_replay_is_sized_on() -> None:
    trace = a_trace([*(row(f"j{i}", submit_s=60.0 * i) for i in range(5)), row("wide", tasks=6)])
    replayed = replay(trace, TWO_POOLS, ReplayOptions(pool="a"))
    assert {t.job.pool for t in replayed.jobs} == {"a"}
    assert replayed.report.cluster_gpus == 4
    assert replayed.report.dropped["more GPUs than the cluster has (4)"] == 1
    assert {t.job.pool for t in replay(trace, TWO_POOLS).jobs} == {None}


def test_an_unknown_pool_names_the_pools() -> None:
    with pytest.raises(ReplayError, match="no pool 'c'; pools: a, b") as caught:
        replay(steady(3), TWO_POOLS, ReplayOptions(pool="c"))
    assert caught.value.field == "pool"


def test_a_trace_replayed_into_a_mig_pool_gets_its_interactive_default(tmp_path: Path) -> None:
    """The gap this option closes: replayed notebooks land on the pool's MIG slices."""
    swf = reference_data("swf/lublin_256.swf")
    cluster_spec = load_cluster(str(Path(__file__).parents[1] / "fixtures" / "mig" / "cluster.yaml"))
    spec = write_spec(tmp_path, f"kind: trace\npath: {swf}\npool: interactive\njobs: 400\n")
    jobs = load_workload(spec, cluster_spec).jobs
    converted = with_interactive_default(jobs, cluster_spec.mig, cluster_spec.nodes)
    small = [t for t in jobs if t.job.tasks == 1 and t.job.request.gpu_milli <= 1000]
    assert small, "Lublin-1 has one-processor jobs"
    assert sum(t.job.request.mig_profile == "1g.10gb" for t in converted) == len(small)
    with pytest.raises(ConfigError, match=": pool: the cluster has no pool 'nope'"):
        load_workload(write_spec(tmp_path, f"kind: trace\npath: {swf}\npool: nope\n"), cluster_spec)


def test_a_snapshot_trace_runs_jobs_without_a_run_time_for_their_limit() -> None:
    rows = [
        row("known", duration_s=600.0, time_limit_s=3600.0),
        row("unknown", duration_s=None, time_limit_s=7200.0, submit_s=10.0),
        row("no-limit", duration_s=None, time_limit_s=None, submit_s=20.0),
    ]
    made = replay(a_trace(rows, unknown_run_time="time_limit"), cluster(8))
    assert {j.job.id: j.duration_s for j in made.jobs} == {"known": 600.0, "unknown": 7200.0}
    assert made.report.run_time_from_limit == 1 and made.report.dropped == {"no run time": 1}
    assert "1 without a run time run for their time limit" in made.report.lines()[0]
    plain = replay(a_trace(rows), cluster(8))  # any other trace: dropped, as before
    assert [j.job.id for j in plain.jobs] == ["known"] and plain.report.dropped == {"no run time": 2}
