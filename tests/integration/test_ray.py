"""On Ray: a sweep gives the same table as in-process, the trainers the same weights as locally, and a
sweep spreads over a two-node Ray cluster started on this machine (``ray start --head`` and a second
``ray start --address`` with its own resources, on 127.0.0.1).

Ray is the optional ``ray`` extra: without it these tests skip, except under CI=true, where they fail.
"""

from __future__ import annotations

import contextlib
import csv
import importlib.util
import json
import os
import signal
import socket
import subprocess
import sys
import time
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import numpy as np
import pytest

from loadmaster.parallel import InProcess, RayPool, connect_ray
from loadmaster.rl import EnvConfig
from loadmaster.rl.ppo import TrainConfig, train
from loadmaster.rl.rank.config import RankConfig
from loadmaster.rl.rank.episodes import LabEpisodes
from loadmaster.rl.rank.train import train_ranking
from loadmaster.sweep import Store, load_sweep, run_sweep
from loadmaster.sweep.report import results_table

SRC = Path(__file__).resolve().parents[2] / "src"

SWEEP = """\
name: on-ray
jobs: 60
loads: [0.9, 1.3]
profiles: [fifo, kube-default]
seeds: [0, 1]
retry_backoff_s: 0
"""


def _need_ray() -> None:
    if importlib.util.find_spec("ray") is None:
        message = "Ray is not installed: pip install 'loadmaster[ray]'"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)


@pytest.fixture(scope="module")
def local_ray() -> Iterator[Any]:
    """A private local Ray instance shared by the module's tests (starting one takes seconds)."""
    _need_ray()

    ray = connect_ray("local")
    yield ray
    ray.shutdown()


def test_a_sweep_on_ray_gives_the_same_table(tmp_path: Path, local_ray: Any) -> None:

    spec = tmp_path / "sweep.yaml"
    spec.write_text(SWEEP)
    sweep = load_sweep(spec)
    run_sweep(sweep, Store(tmp_path / "serial"), InProcess(), poll_s=0)
    with RayPool("local") as pool:
        outcome = run_sweep(sweep, Store(tmp_path / "ray"), pool, poll_s=0.05)
    assert outcome.ran == 8 and not outcome.failed
    expected = results_table(sweep, Store(tmp_path / "serial"))
    assert results_table(sweep, Store(tmp_path / "ray")).equals(expected)


def test_rank_training_on_ray_matches_local_processes(local_ray: Any) -> None:

    config = RankConfig(updates=1, sequences=2, samples=2, validation=1, workers=2, seed=3)
    episodes = LabEpisodes(jobs=256, loads=(1.1,))
    local = train_ranking(config, episodes)
    remote = train_ranking(config, episodes, ray="local")
    for (wa, ba), (wb, bb) in zip(local.score_layers(), remote.score_layers(), strict=True):
        assert np.array_equal(wa, wb) and np.array_equal(ba, bb)


def test_ppo_training_on_ray_matches_in_process(local_ray: Any) -> None:

    env = EnvConfig(jobs=200, window=8, load=3.0, allow_wait=False)
    config = TrainConfig(
        env=env, loads=(3.0, 2.0), updates=2, steps=24, minibatch=8, epochs=2, warm_steps=16, hidden=8
    )
    local, remote = train(config), train(config, ray="local")
    for name, value in local.state_dict().items():
        assert np.array_equal(value.numpy(), remote.state_dict()[name].numpy()), name


def _free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port: int = s.getsockname()[1]
        return port


def _ok(command: list[str], env: dict[str, str]) -> str:
    """The command's output when it succeeds, else the empty string."""
    done = subprocess.run(command, env=env, capture_output=True, text=True, check=False)
    return done.stdout if done.returncode == 0 else ""


def _wait_for(check: Any, what: str, timeout_s: float = 120.0) -> None:
    deadline = time.monotonic() + timeout_s
    while not check():
        if time.monotonic() > deadline:
            raise AssertionError(f"timed out waiting for {what}")
        time.sleep(1.0)


@pytest.mark.slow
def test_a_sweep_spreads_over_a_two_node_ray_cluster(tmp_path: Path) -> None:
    """Two Ray nodes on this machine, one CPU each (the second with a custom resource ``node2``):
    a sweep driven through ``--ray ADDRESS`` runs cells on both, and its table is whole."""
    _need_ray()
    import ray  # noqa: PLC0415 (present: checked just above)

    if ray.is_initialized():
        ray.shutdown()  # the module's private instance, if another test started it
    binary = str(Path(sys.executable).parent / "ray")
    port = _free_port()
    address = f"127.0.0.1:{port}"
    # Token authentication (Ray's default for ``ray start``) for every process: nodes, status, driver.
    env = {**os.environ, "PYTHONPATH": str(SRC), "RAY_AUTH_MODE": "token"}
    env.pop("RAY_ADDRESS", None)
    common = ["--block", "--num-cpus", "1", "--node-ip-address", "127.0.0.1", "--disable-usage-stats"]
    head = subprocess.Popen(
        [binary, "start", "--head", "--port", str(port), "--include-dashboard", "false", *common],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    nodes = [head]
    try:
        status = [binary, "status", "--address", address]
        _wait_for(lambda: _ok(status, env), "the head")
        second = [binary, "start", "--address", address, "--resources", json.dumps({"node2": 1}), *common]
        nodes.append(
            subprocess.Popen(
                second, env=env, stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL, start_new_session=True
            )
        )
        _wait_for(
            lambda: "node2" in _ok(status, env),
            "the second node",
        )
        spec = tmp_path / "sweep.yaml"
        spec.write_text(SWEEP)
        out = tmp_path / "out"
        command = [sys.executable, "-c", "from loadmaster.cli import main; main()", "sweep", str(spec)]
        done = subprocess.run(
            [*command, "--out", str(out), "--ray", address],
            env=env,
            capture_output=True,
            text=True,
            timeout=300,
            check=False,
        )
        assert done.returncode == 0, done.stdout + done.stderr
        assert "8/8 done" in done.stdout
        with (out / "timing.csv").open() as fh:
            ran_on = {row["node"] for row in csv.DictReader(fh)}
        assert len(ran_on) == 2, ran_on
    finally:
        for node in reversed(nodes):
            node.send_signal(signal.SIGTERM)  # ``ray start --block`` stops its node's processes
            with contextlib.suppress(subprocess.TimeoutExpired):
                node.wait(timeout=60)
            with contextlib.suppress(ProcessLookupError):
                os.killpg(node.pid, signal.SIGKILL)  # whatever of that node is left


def test_cli_rank_train_takes_ray(tmp_path: Path, local_ray: Any) -> None:
    from typer.testing import CliRunner  # noqa: PLC0415

    from loadmaster.cli import app  # noqa: PLC0415

    args = ["rl", "rank-train", "--setup", "lab", "--jobs", "256", "--updates", "1", "--sequences", "2"]
    result = CliRunner().invoke(
        app, [*args, "--samples", "2", "--seed", "3", "--ray", "local", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    assert (tmp_path / "policy.npz").stat().st_size > 0
