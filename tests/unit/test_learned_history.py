"""The learned policy's user-history inputs: the rows they come from, their values on a hand-made
snapshot, and that checkpoints without ``meta.job_inputs`` read and score exactly as before."""

from __future__ import annotations

import dataclasses
import io
from pathlib import Path

import numpy as np
import pytest

from builders import a_cluster, a_job, a_snapshot
from loadmaster.config import load_cluster, load_workload
from loadmaster.errors import ConfigError
from loadmaster.model import ClusterSnapshot, Job, RunningJob
from loadmaster.scheduling import PluginSpec, Scheduler, build_profile
from loadmaster.scheduling.observe import (
    HISTORY_SEEN,
    ObservationSpec,
    global_features,
    history_features,
    job_features,
    node_features,
)
from loadmaster.scheduling.policy_net import (
    BUILTIN,
    JOB_INPUTS,
    WITH_HISTORY,
    context_inputs,
    context_size,
    job_inputs,
    load_policy,
    read_policy,
    save_policy,
)
from loadmaster.sim import SimOptions, simulate
from loadmaster.sim.cluster import SimCluster

SPEC = ObservationSpec()


def _snapshot_with_history() -> tuple[list[Job], ClusterSnapshot]:
    """Three pending jobs: alice (three finished jobs, run/limit 0.5, 0.25, 0.1), bob (none), and
    carol (one job that ran past its limit's clock, clipped to 1)."""
    cluster = a_cluster().nodes(1, gpus=8).build()
    jobs = [
        a_job("a").user("alice").limit(4 * 3600).submitted(0).build(),
        a_job("b").user("bob").limit(2 * 3600).submitted(0).build(),
        a_job("c").user("carol").limit(3600).submitted(0).build(),
    ]
    snapshot = dataclasses.replace(
        a_snapshot(cluster).pending(*jobs).build(),
        recent_runtimes_s={"alice": (1800.0, 900.0, 360.0), "carol": (7200.0,)},
        recent_limits_s={"alice": (3600.0, 3600.0, 3600.0), "carol": (3600.0,)},
    )
    return jobs, snapshot


def test_history_rows_are_the_median_ratio_and_how_much_is_known() -> None:
    jobs, snapshot = _snapshot_with_history()
    rows = history_features(jobs, snapshot)
    expected = [[0.25, 3 / HISTORY_SEEN], [1.0, 0.0], [1.0, 1 / HISTORY_SEEN]]
    assert np.allclose(rows, np.array(expected))


def test_the_history_inputs_on_a_hand_made_snapshot() -> None:
    """alice: ratio 0.25 of a 4 h limit predicts 1 h; bob has no history and reads the neutral
    (1, log of his limit, 0)."""
    jobs, snapshot = _snapshot_with_history()
    rows = job_features(jobs, snapshot, 0.0, SPEC)
    x = job_inputs(rows, history_features(jobs, snapshot), WITH_HISTORY)
    at = {name: WITH_HISTORY.index(name) for name in WITH_HISTORY}
    assert x.shape == (3, len(WITH_HISTORY))
    assert x[:, at["user_run_over_limit"]].tolist() == pytest.approx([0.25, 1.0, 1.0])
    assert x[:, at["log_predicted_h"]].tolist() == pytest.approx([np.log(2.0), np.log(3.0), np.log(2.0)])
    assert x[:, at["user_history"]].tolist() == pytest.approx([0.6, 0.0, 0.2])
    assert np.array_equal(x[:, : len(JOB_INPUTS)], job_inputs(rows))
    neutral = job_inputs(rows, None, WITH_HISTORY)
    assert neutral[:, at["user_run_over_limit"]].tolist() == [1.0, 1.0, 1.0]


def test_a_driver_without_limits_gives_the_neutral_row() -> None:
    jobs, snapshot = _snapshot_with_history()
    bare = dataclasses.replace(snapshot, recent_limits_s={})
    assert history_features(jobs, bare).tolist() == [[1.0, 0.0]] * 3


def test_the_simulator_keeps_limits_beside_run_times() -> None:
    """Finished runs add their run time and their limit, aligned; a preempted run adds neither."""
    cluster = a_cluster().nodes(1, gpus=8).build()
    state = SimCluster(cluster, history_jobs=2)
    for i, (limit, ends, finished) in enumerate(
        [(3600, 600, True), (7200, 900, False), (1800, 300, True), (900, 90, True)]
    ):
        job = a_job(f"j{i}").user("alice").limit(limit).build()
        state.account(RunningJob(job, (), 0.0), float(ends), finished)
    snapshot = state.snapshot(1000.0)
    assert snapshot.recent_runtimes_s["alice"] == (300.0, 90.0)
    assert snapshot.recent_limits_s["alice"] == (1800.0, 900.0)


def _sjf_with_history(path: Path, names: tuple[str, ...]) -> str:
    weight = np.zeros((len(names) + context_size(SPEC), 1), dtype=np.float32)
    weight[names.index("log_limit_h"), 0] = -1.0
    with path.open("wb") as fh:
        save_policy(fh, [(weight, np.zeros(1, dtype=np.float32))], SPEC, {"job_inputs": list(names)})
    return str(path)


def test_a_checkpoint_with_history_inputs_loads_and_serves(tmp_path: Path) -> None:
    """The inputs are recorded in meta; a network reading them runs in the simulator (here one
    that ignores them, so it must order exactly as sjf)."""
    path = _sjf_with_history(tmp_path / "h.npz", WITH_HISTORY)
    policy = load_policy(path)
    assert policy.job_input_names == WITH_HISTORY and policy.uses_history
    cluster = load_cluster("lab")
    jobs = load_workload("lab-habits", cluster, jobs=200, load=1.1, seed=5).jobs
    runs = []
    for order in (PluginSpec("sjf", {}), PluginSpec("learned", {"checkpoint": path})):
        plugins = [order, PluginSpec("gang", {}), PluginSpec("binpack", {})]
        result = simulate(
            cluster.nodes, Scheduler(build_profile("t", ["allocate"], plugins)), jobs, SimOptions(seed=1)
        )
        runs.append(result.jobs)
    assert np.array_equal(runs[0].start_s, runs[1].start_s, equal_nan=True)


@pytest.mark.parametrize("name", [n for n in BUILTIN if n != "lab-habits"])
def test_older_checkpoints_read_the_original_inputs(name: str) -> None:
    """Checkpoints written before the history inputs have no ``meta.job_inputs``: they read the
    six original inputs, and scoring them never asks for the history."""
    policy = load_policy(name)
    assert "job_inputs" not in policy.meta
    assert policy.job_input_names == JOB_INPUTS and not policy.uses_history
    assert policy.layers[0][0].shape[0] == len(JOB_INPUTS) + context_size(policy.spec)
    jobs, snapshot = _snapshot_with_history()
    rows = job_features(jobs, snapshot, 600.0, policy.spec)
    nodes, glob = node_features(snapshot, 600.0, policy.spec), global_features(snapshot, 600.0, policy.spec)
    ctx = context_inputs(nodes, glob)
    expected = np.concatenate([job_inputs(rows), np.broadcast_to(ctx, (3, len(ctx)))], axis=1)
    assert np.array_equal(policy.inputs(rows, nodes, glob), expected)
    assert np.array_equal(policy.inputs(rows, nodes, glob, history_features(jobs, snapshot)), expected)


@pytest.mark.parametrize(
    ("names", "message"),
    [(["gpus", "no_such_input"], "distinct names"), (["gpus", "gpus"], "distinct names"), ("gpus", "a list")],
)
def test_bad_job_inputs_in_meta_name_the_field(names: object, message: str) -> None:
    buffer = io.BytesIO()
    weight = np.zeros((2 + context_size(SPEC), 1), dtype=np.float32)
    save_policy(buffer, [(weight, np.zeros(1, dtype=np.float32))], SPEC, {"job_inputs": names})
    with pytest.raises(ConfigError, match=message) as err:
        read_policy(buffer.getvalue(), "h.npz")
    assert "meta.job_inputs" in str(err.value)


def test_rank_training_with_history_records_and_serves_its_inputs(tmp_path: Path) -> None:
    """A short run on lab-habits with the history inputs: the checkpoint names them, the plugin
    serves it, and the rank trainer refuses an input it does not know."""
    from loadmaster.rl.rank.config import RankConfig  # noqa: PLC0415 (torch is optional)
    from loadmaster.rl.rank.episodes import LabEpisodes  # noqa: PLC0415
    from loadmaster.rl.run import rank_to  # noqa: PLC0415

    config = RankConfig(
        updates=1, sequences=1, samples=2, validation=1, workers=1, seed=3, job_inputs=WITH_HISTORY
    )
    final = rank_to(config, LabEpisodes(jobs=128, loads=(1.1,), workload="lab-habits"), tmp_path / "run")
    policy = load_policy(str(final))
    assert policy.job_input_names == WITH_HISTORY
    assert policy.layers[0][0].shape[0] == len(WITH_HISTORY) + context_size(policy.spec)
    plugins = [PluginSpec("learned", {"checkpoint": str(final)}), PluginSpec("gang", {})]
    assert build_profile("t", ["allocate"], plugins).order[0].policy.uses_history  # type: ignore[attr-defined]
    with pytest.raises(ConfigError, match="job_inputs"):
        RankConfig(job_inputs=("gpus", "no_such_input", "log_limit_h"))


def test_the_shipped_lab_habits_checkpoint_reads_the_history() -> None:
    policy = load_policy("lab-habits")
    assert policy.job_input_names == WITH_HISTORY and policy.uses_history
    assert policy.meta["command"].startswith("loadmaster rl rank-train --setup lab-habits --history")


def test_cli_refuses_history_where_rows_are_not_jobs(tmp_path: Path) -> None:
    from typer.testing import CliRunner  # noqa: PLC0415

    from conftest import reference_data  # noqa: PLC0415
    from loadmaster.cli import app  # noqa: PLC0415

    trace = reference_data("cloudsimpy/jobs.csv")
    args = ["rl", "rank-train", "--setup", "deepjs", "--trace", str(trace), "--history"]
    result = CliRunner().invoke(app, [*args, "--out", str(tmp_path / "run")])
    assert isinstance(result.exception, ConfigError) and "--history" in str(result.exception)
    bad = CliRunner().invoke(app, ["rl", "rank-train", "--setup", "nope", "--out", str(tmp_path / "r")])
    assert isinstance(bad.exception, ConfigError) and "lab-habits" in str(bad.exception)
