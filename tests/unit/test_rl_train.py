"""PPO training: the torch agent matches the numpy policy, GAE by hand, seeded runs repeat, the CLI."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.errors import ConfigError
from loadmaster.rl import EnvConfig, SchedulingEnv
from loadmaster.rl.agent import Agent, Batch, prepare
from loadmaster.rl.ppo import TrainConfig, _Rollout, advantages, teacher_action, train
from loadmaster.scheduling.policy_net import read_policy

TINY_ENV = EnvConfig(jobs=200, window=8, load=3.0, allow_wait=False)
TINY = TrainConfig(
    env=TINY_ENV, loads=(3.0,), updates=2, steps=24, minibatch=8, epochs=2, warm_steps=16, hidden=8
)


def test_torch_agent_and_numpy_policy_score_alike() -> None:
    """The plugin's numpy forward pass is the agent's score network, to float precision."""
    torch.manual_seed(0)
    env = SchedulingEnv(TINY_ENV)
    obs, _ = env.reset(seed=4)
    agent = Agent(TINY_ENV.observation, hidden=8)
    jobs, present, context = prepare(obs)
    batch = Batch(
        torch.from_numpy(jobs[None]),
        torch.from_numpy(present[None]),
        torch.ones((1, len(present) + 1), dtype=torch.bool),
        torch.from_numpy(context[None]),
    )
    with torch.no_grad():
        logits = agent.logits(batch)[0, :-1].numpy()
    numpy_scores = agent.to_policy().scores(obs["jobs"], obs["nodes"], obs["global"])
    np.testing.assert_allclose(numpy_scores, logits, rtol=1e-5, atol=1e-5)


def test_masked_actions_get_no_probability() -> None:
    agent = Agent(TINY_ENV.observation, hidden=8)
    k, c = TINY_ENV.window, len(prepare(SchedulingEnv(TINY_ENV).reset(seed=1)[0])[2])
    mask = torch.zeros((1, k + 1), dtype=torch.bool)
    mask[0, 3] = True
    batch = Batch(torch.rand((1, k, 6)), torch.ones((1, k)), mask, torch.rand((1, c)))
    with torch.no_grad():
        probs = torch.softmax(agent.logits(batch), dim=1)[0]
    assert float(probs[3]) == pytest.approx(1.0)


def test_gae_matches_a_hand_computation() -> None:
    """Two decisions of one runner, the episode ending at the second (gamma 1, lambda 0.5)."""
    rollout = _Rollout(
        reward=[-1.0, -2.0], value=[-2.5, -1.5], done=[False, True], runner=[0, 0], action=[0, 0]
    )
    adv, returns = advantages(rollout, gamma=1.0, lam=0.5)
    # step 1: delta = -2 - (-1.5) = -0.5; step 0: delta = -1 + (-1.5) - (-2.5) = 0, adv = 0 + 0.5 * -0.5
    np.testing.assert_allclose(adv, [-0.25, -0.5])
    np.testing.assert_allclose(returns, [-2.75, -2.0])


def test_bootstrap_value_continues_an_unfinished_episode() -> None:
    rollout = _Rollout(reward=[-1.0], value=[-3.0], done=[False], runner=[0], action=[0], bootstrap={0: -1.5})
    adv, _ = advantages(rollout, gamma=1.0, lam=0.9)
    np.testing.assert_allclose(adv, [-1.0 - 1.5 + 3.0])


def test_sjf_teacher_picks_the_shortest_valid_job() -> None:
    jobs = np.zeros((4, 6), dtype=np.float32)
    jobs[:, 2] = [5.0, 1.0, 0.5, 3.0]
    mask = np.array([True, True, False, True, False])
    assert teacher_action({"jobs": jobs}, mask, "sjf") == 1
    assert teacher_action({"jobs": jobs}, mask, "fifo") == 0


def test_same_seed_gives_the_same_checkpoint() -> None:
    logs: list[float] = []
    first = train(TINY, lambda log, agent: logs.append(log.policy_loss))
    second = train(TINY)
    for (w1, b1), (w2, b2) in zip(first.score_layers(), second.score_layers(), strict=True):
        np.testing.assert_array_equal(w1, w2)
        np.testing.assert_array_equal(b1, b2)
    assert len(logs) == TINY.updates


def test_checkpoint_resumes_every_head() -> None:
    agent = train(TINY)
    buffer = io.BytesIO()
    agent.save(buffer, {"why": "test"})
    again = Agent.load(buffer.getvalue(), "mem")
    for key, value in agent.state_dict().items():
        assert torch.equal(value, again.state_dict()[key])
    policy, _ = read_policy(buffer.getvalue(), "mem")
    assert policy.meta["why"] == "test"
    assert policy.meta["hidden"] == 8


def test_bad_training_settings_are_named() -> None:
    with pytest.raises(ConfigError, match="updates"):
        TrainConfig(updates=0)
    with pytest.raises(ConfigError, match="warm_start"):
        TrainConfig(warm_start="greedy")  # type: ignore[arg-type]
    with pytest.raises(ConfigError, match="loads"):
        TrainConfig(loads=())


def test_cli_train_writes_the_run_and_eval_reads_it(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["rl", "train", "--out", str(out), "--updates", "2", "--steps", "16", "--jobs", "200"]
    result = CliRunner().invoke(app, [*args, "--loads", "3.0", "--every", "1"])
    assert result.exit_code == 0, result.output
    for name in ("policy.npz", "curve.csv", "curve.png", "config.json", "checkpoints/update-0002.npz"):
        assert (out / name).is_file(), name
    assert len((out / "curve.csv").read_text().splitlines()) == 3
    ckpt = str(out / "policy.npz")
    result = CliRunner().invoke(
        app,
        [
            *("rl", "eval", "--checkpoint", ckpt, "--fair-checkpoint", ckpt),
            *("--loads", "1.0", "--seeds", "7", "--jobs", "40", "--out", str(tmp_path / "eval")),
        ],
    )
    assert result.exit_code == 0, result.output
    assert "learned-fair" in result.output and "tetris" in result.output
    assert (tmp_path / "eval" / "eval.csv").is_file()


def test_settings_that_never_offer_a_choice_stop_with_a_clear_error() -> None:
    """24 jobs at load 1.3 never queue: every job starts on arrival, nothing to learn."""
    idle = TrainConfig(env=EnvConfig(jobs=24, window=8, load=1.3, allow_wait=False), loads=(1.3,))
    with pytest.raises(ConfigError, match="no choice between jobs"):
        train(idle)


def test_cli_rejects_bad_loads(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["rl", "eval", "--loads", "fast", "--out", str(tmp_path)])
    assert isinstance(result.exception, ConfigError)
    assert "--loads" in str(result.exception)
