"""Training by ranking on a family: seeded episodes, each its own draw, validation windows from
the family's validation stream (the ones ``rl train --family`` selects on), never near a held-out
test workload, in the profile of the lab episodes (EASY backfill)."""

from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.errors import ConfigError
from loadmaster.rl import EnvConfig, SchedulingEnv
from loadmaster.rl.family import FamilyPoint, excluded, validation_seed
from loadmaster.rl.rank.config import VALIDATION_STREAM, WARM_STREAM
from loadmaster.rl.rank.episodes import FamilyEpisodes, LabEpisodes
from loadmaster.scheduling.plugins.backfill import Backfill
from loadmaster.scheduling.plugins.learned import Learned

TRAINING_STREAMS = (0, 1, 7, WARM_STREAM)
"""Seeds a run may train with, and the warm start's stream."""


def _points(stream: int, n: int) -> list[FamilyPoint]:
    episodes = FamilyEpisodes()
    return [episodes.draw(stream, index)[0] for index in range(n)]


def _fingerprint(jobs: object) -> list[tuple[str, float, float, int]]:
    return [(t.job.id, t.job.submit_s, t.duration_s, t.job.request.gpu_milli) for t in jobs]  # type: ignore[attr-defined]


def test_an_episode_is_the_same_for_the_same_stream_and_index() -> None:
    episodes = FamilyEpisodes(jobs=64)
    first, again = episodes.episode(0, 3), episodes.episode(0, 3)
    assert _fingerprint(first[1]) == _fingerprint(again[1]) and first[2] == again[2]
    assert len(first[1]) == 64
    assert _fingerprint(episodes.episode(0, 4)[1]) != _fingerprint(first[1])
    assert _fingerprint(episodes.episode(1, 3)[1]) != _fingerprint(first[1])


def test_every_episode_draws_its_own_point() -> None:
    points = _points(0, 50)
    assert len(set(points)) == 50
    loads = [p.load for p in points]
    assert min(loads) < 0.9 and max(loads) > 1.1
    assert not set(points) & set(_points(1, 50))


def test_validation_draws_are_the_family_validation_windows_and_never_training_draws() -> None:
    validation = _points(VALIDATION_STREAM, 16)
    assert len(set(validation)) == 16
    training = {p for stream in TRAINING_STREAMS for p in _points(stream, 200)}
    assert not training & set(validation)
    # The same windows as ``rl train --family`` validates on: the same point and the same jobs.
    episodes = FamilyEpisodes(jobs=64)
    for index in range(2):
        env = SchedulingEnv(EnvConfig(jobs=64, family="lab"))
        env.reset(seed=validation_seed(index))
        assert env.point == validation[index]
        assert _fingerprint(env.traces) == _fingerprint(episodes.episode(VALIDATION_STREAM, index)[1])


def test_no_draw_comes_near_a_held_out_workload() -> None:
    points = [p for stream in (*TRAINING_STREAMS, VALIDATION_STREAM) for p in _points(stream, 500)]
    assert not [p for p in points if excluded(p)]


def test_the_profile_is_the_lab_episodes_one_with_easy_backfill() -> None:
    profile = FamilyEpisodes().profile("lab", 0.3)
    learned = profile.order[0]
    assert isinstance(learned, Learned)
    assert learned.settings.explore == pytest.approx(0.3) and learned.strict
    lab = LabEpisodes().profile("lab", 0.3)
    assert profile.actions == lab.actions == ("allocate", "backfill")
    assert [type(p) for p in profile.plugins] == [type(p) for p in lab.plugins]
    assert [p.settings.mode for p in profile.of(Backfill)] == ["easy"]
    assert not FamilyEpisodes().commits


def test_bad_settings_are_refused() -> None:
    with pytest.raises(ConfigError, match="unknown family"):
        FamilyEpisodes("nope")
    with pytest.raises(ConfigError, match="jobs"):
        FamilyEpisodes(jobs=0)


def test_cli_rank_train_on_the_family(tmp_path: Path) -> None:
    out = tmp_path / "run"
    args = ["rl", "rank-train", "--setup", "lab", "--family", "lab", "--jobs", "64", "--updates", "1"]
    args += ["--sequences", "1", "--samples", "2", "--workers", "1", "--init", "lab-family"]
    result = CliRunner().invoke(app, [*args, "--out", str(out)])
    assert result.exit_code == 0, result.output
    record = json.loads((out / "config.json").read_text())
    assert record["episodes"].startswith("FamilyEpisodes(family='lab', jobs=64")
    assert record["init"] == "lab-family"
    assert np.isfinite(float((out / "curve.csv").read_text().splitlines()[1].split(",")[3]))


def test_cli_family_applies_to_the_lab_setup_only(tmp_path: Path) -> None:
    args = ["rl", "rank-train", "--setup", "lublin", "--family", "lab", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, ConfigError)
    assert "lab setup only" in str(result.exception)
    args = ["rl", "rank-train", "--setup", "lab", "--family", "nope", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, ConfigError)
    assert "unknown family" in str(result.exception)
