"""PPO over rankings: the Plackett-Luce log-probability, the leave-one-out advantage, and a
short seeded training run whose checkpoint the learned plugin serves."""

from __future__ import annotations

import dataclasses
import itertools
import math
from pathlib import Path

import numpy as np
import pytest
import torch
from typer.testing import CliRunner

from conftest import reference_data
from loadmaster.cli import app
from loadmaster.errors import ConfigError
from loadmaster.rl.rank.config import RankConfig
from loadmaster.rl.rank.episodes import LabEpisodes, to_go
from loadmaster.rl.rank.loss import advantages, prefix_log_prob
from loadmaster.rl.rank.train import train_ranking
from loadmaster.rl.rank.workers import PlayedEpisode
from loadmaster.rl.run import rank_to
from loadmaster.scheduling.policy_net import load_policy


def test_full_orders_are_a_distribution() -> None:
    """Summed over every permutation, the Plackett-Luce probabilities of full orders are 1."""
    scores = torch.tensor([0.3, -1.2, 2.0, 0.0])
    total = 0.0
    for perm in itertools.permutations(range(4)):
        ordered = scores[list(perm)].unsqueeze(0)
        logp = prefix_log_prob(ordered, torch.ones(1, 4, dtype=torch.bool), torch.tensor([4]))
        total += math.exp(float(logp))
    assert total == pytest.approx(1.0, abs=1e-5)


def test_a_one_position_prefix_is_the_softmax_and_padding_is_ignored() -> None:
    scores = torch.tensor([[1.0, 0.5, -0.5, 99.0]])
    valid = torch.tensor([[True, True, True, False]])
    logp = prefix_log_prob(scores, valid, torch.tensor([1]))
    assert float(logp) == pytest.approx(float(torch.log_softmax(scores[0, :3], 0)[0]), abs=1e-6)


def _played(end: list[float], times: list[float]) -> PlayedEpisode:
    """Two jobs submitted at 0 that run 100 s each; ``end`` says when each finished."""
    played = PlayedEpisode(0.0, np.zeros(2), np.array(end), np.full(2, 1 / 100))
    played.times.extend(times)
    return played


def test_slowdown_to_go_counts_only_what_accrues_after_the_moment() -> None:
    played = _played([100.0, 300.0], [])
    assert to_go(played, np.array([0.0]))[0] == pytest.approx((1.0 + 3.0) / 2)
    assert to_go(played, np.array([200.0]))[0] == pytest.approx((0.0 + 1.0) / 2)
    assert to_go(played, np.array([400.0]))[0] == 0.0


def test_the_advantage_compares_samples_of_the_same_workload_from_the_same_moment() -> None:
    """A sample whose jobs finish sooner than the others' after a decision gets a positive
    advantage there; identical futures give zero."""
    fast, slow = _played([100.0, 200.0], [50.0, 150.0]), _played([100.0, 400.0], [50.0])
    adv = advantages([fast, slow], samples=2)
    assert len(adv) == 3
    assert adv[0] > 0 and adv[2] < 0
    same = advantages([_played([100.0, 200.0], [10.0]), _played([100.0, 200.0], [10.0])], samples=2)
    assert np.all(same == 0.0)


def test_bad_settings_name_the_field() -> None:
    with pytest.raises(ConfigError, match="samples"):
        RankConfig(samples=1)
    with pytest.raises(ConfigError, match="explore"):
        RankConfig(explore=0.0)


def test_training_is_seeded_and_the_result_serves(tmp_path: Path) -> None:
    config = RankConfig(updates=2, sequences=2, samples=2, validation=1, workers=1, seed=3)
    episodes = LabEpisodes(jobs=256, loads=(1.1,))
    a = train_ranking(config, episodes)
    b = train_ranking(config, episodes)
    for (wa, ba), (wb, bb) in zip(a.score_layers(), b.score_layers(), strict=True):
        assert np.array_equal(wa, wb) and np.array_equal(ba, bb)
    final = rank_to(config, episodes, tmp_path / "run")
    assert (tmp_path / "run" / "curve.png").stat().st_size > 0
    assert len((tmp_path / "run" / "curve.csv").read_text().splitlines()) == 1 + config.updates
    policy = load_policy(str(final))
    assert policy.meta["trainer"] == "rank"
    assert len(policy.layers) == 3


def test_cli_rank_train_on_lublin_windows_writes_the_run(tmp_path: Path) -> None:
    out = tmp_path / "run"
    trace = reference_data("swf/lublin_256.swf")
    args = ["rl", "rank-train", "--setup", "lublin", "--trace", str(trace), "--before", "1981"]
    small = ["--jobs", "128", "--updates", "1", "--sequences", "1", "--samples", "2"]
    result = CliRunner().invoke(app, [*args, *small, "--out", str(out)])
    assert result.exit_code == 0, result.output
    for name in ("policy.npz", "curve.csv", "curve.png", "config.json", "checkpoints/update-0001.npz"):
        assert (out / name).is_file(), name
    meta = load_policy(str(out / "policy.npz")).meta
    assert meta["trainer"] == "rank" and meta["command"].startswith("loadmaster rl")


def test_cli_rank_train_names_a_missing_trace(tmp_path: Path) -> None:
    result = CliRunner().invoke(app, ["rl", "rank-train", "--out", str(tmp_path), "--trace", "nope.swf"])
    assert isinstance(result.exception, ConfigError)
    assert "nope.swf" in str(result.exception)


def test_cli_eval_rlscheduler_prints_learned_sjf_and_f1() -> None:
    trace = reference_data("swf/lublin_256.swf")
    result = CliRunner().invoke(app, ["rl", "eval-rlscheduler", "--trace", str(trace), "--sequences", "1"])
    assert result.exit_code == 0, result.output
    assert "no backfill" in result.output and "F1" in result.output
    assert "204.26" in result.output  # SJF on the first sequence, as published


def test_training_can_start_from_a_shipped_checkpoint(tmp_path: Path) -> None:
    """With a zero learning rate nothing moves, so the result is the shipped network itself, and
    the run records that it kept the starting network (update 0)."""
    config = RankConfig(
        updates=1, sequences=1, samples=2, validation=1, workers=1, seed=3, init="lab", lr=0.0
    )
    agent = train_ranking(config, LabEpisodes(jobs=128, loads=(1.1,)))
    for (wa, ba), (wb, bb) in zip(agent.score_layers(), load_policy("lab").layers, strict=True):
        assert np.allclose(wa, wb) and np.allclose(ba, bb)
    final = rank_to(config, LabEpisodes(jobs=128, loads=(1.1,)), tmp_path / "run")
    assert load_policy(str(final)).meta["update"] == 0
    with pytest.raises(ConfigError, match="do not fit"):
        train_ranking(dataclasses.replace(config, hidden=8), LabEpisodes(jobs=128, loads=(1.1,)))
