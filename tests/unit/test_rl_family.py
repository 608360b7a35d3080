"""Training families: seeded draws, never near a held-out test workload, validation apart from
training, and a family run that selects its best-validated update."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
import yaml
from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.config import load_cluster, load_workload
from loadmaster.errors import ConfigError
from loadmaster.rl import EnvConfig, SchedulingEnv
from loadmaster.rl.family import (
    EXCLUDED,
    FAMILIES,
    LAB_MIX,
    FamilyPoint,
    excluded,
    family,
    mix_distance,
    size_mix,
    validation_seed,
)
from loadmaster.rl.ppo import TrainConfig, training_envs
from loadmaster.rl.run import train_to
from loadmaster.scheduling.policy_net import load_policy
from loadmaster.workload import LabWorkloadParams

ROOT = Path(__file__).resolve().parents[2]
HELD_OUT = ("wide", "narrow", "honest", "overask", "spread", "crowd")


def _draws(seed: int, n: int) -> list[FamilyPoint]:
    rng = np.random.default_rng(seed)
    return [FAMILIES["lab"].draw(rng) for _ in range(n)]


def test_draws_are_deterministic_for_a_seed() -> None:
    assert _draws(3, 50) == _draws(3, 50)
    assert _draws(3, 50) != _draws(4, 50)


def test_many_draws_never_land_near_a_held_out_workload() -> None:
    """20,000 draws: none within the radius of a held-out value in any parameter it changes."""
    points = _draws(0, 20_000)
    assert not [p for p in points if excluded(p)]
    # The draws do cover their ranges (the family is not one point).
    loads = [p.load for p in points]
    assert min(loads) < 0.81 and max(loads) > 1.19
    assert {p.groups for p in points} == {2, 3, 4, 5, 6}
    assert min(p.users for p in points) == 20 and max(p.users for p in points) == 100


def test_every_parameter_a_held_out_workload_changes_is_excluded() -> None:
    """Each held-out spec's parameters that differ from ``lab`` have a neighbourhood around the
    spec's own value (the list cannot drift from the files)."""
    base = LabWorkloadParams()
    for name in HELD_OUT:
        doc = yaml.safe_load((ROOT / "benchmarks" / "workloads" / f"heldout-{name}.yaml").read_text())
        changed = {k: v for k, v in doc["params"].items() if _value(v) != _value(getattr(base, k))}
        assert changed, name
        for key, value in changed.items():
            found = [n for n in EXCLUDED if n.test == f"heldout-{name}" and n.parameter == key]
            assert len(found) == 1, (name, key)
            assert _value(found[0].value) == _value(value), (name, key)
    habits = yaml.safe_load((ROOT / "src/loadmaster/data/workloads/lab-habits.yaml").read_text())
    assert habits["params"]["user_habits"] is True
    assert [n.parameter for n in EXCLUDED if n.test == "lab-habits"] == ["user_habits"]


def _value(value: object) -> object:
    """Lists from YAML as the tuples of the dataclass."""
    if isinstance(value, list | tuple):
        return tuple(_value(v) for v in value)
    return value


def test_a_point_near_a_held_out_workload_is_named() -> None:
    point = _draws(0, 1)[0]
    near = FamilyPoint(**{**_fields(point), "limit_factor_median": 4.5})
    assert [n.test for n in excluded(near)] == ["heldout-overask"]
    narrow = FamilyPoint(**{**_fields(point), "gpu_weights": size_mix(0.74, 0.0)})
    assert "heldout-narrow" in [n.test for n in excluded(narrow)]


def _fields(point: FamilyPoint) -> dict[str, object]:
    return {name: getattr(point, name) for name in point.__dataclass_fields__}


def test_size_mix_keeps_lab_proportions() -> None:
    assert mix_distance(size_mix(0.60, 0.05), LAB_MIX) < 1e-5
    mix = dict(size_mix(0.5, 0.08))
    assert sum(mix.values()) == pytest.approx(1.0, abs=1e-5)
    assert mix[16] / mix[32] == pytest.approx(2.0, rel=1e-4)


def test_validation_windows_are_not_training_episodes() -> None:
    """Validation windows come from their own seeds: none of their draws is a training draw."""
    config = TrainConfig(env=EnvConfig(jobs=50), family="lab")
    rng = np.random.default_rng(config.seed)
    training = set()
    for env_config in training_envs(config):
        env = SchedulingEnv(env_config)
        env.reset(seed=int(rng.integers(2**31 - 1)))
        for _ in range(20):
            training.add(env.point)
            env.reset()
    validation = set()
    for index in range(8):
        env = SchedulingEnv(EnvConfig(jobs=50, family="lab"))
        env.reset(seed=validation_seed(index))
        validation.add(env.point)
    assert None not in training and len(validation) == 8
    assert not training & validation
    again = SchedulingEnv(EnvConfig(jobs=50, family="lab"))
    again.reset(seed=validation_seed(0))
    assert again.point in validation


def test_a_family_episode_uses_its_draw() -> None:
    env = SchedulingEnv(EnvConfig(jobs=300, family="lab"))
    env.reset(seed=5)
    assert env.point is not None and env.load == env.point.load
    sample = load_workload(
        "lab", load_cluster("lab"), jobs=300, load=env.load, seed=0, params=env.point.params()
    )
    assert len(sample.jobs) == len(env.traces) == 300


def test_params_override_is_checked() -> None:
    with pytest.raises(ConfigError, match="unknown parameter"):
        load_workload("lab", load_cluster("lab"), jobs=10, params={"no_such_knob": 1})
    with pytest.raises(ConfigError, match="family"):
        family("nope")
    with pytest.raises(ConfigError, match="family"):
        TrainConfig(family="nope")
    with pytest.raises(ConfigError, match="validation"):
        TrainConfig(validation=-1)


def test_a_family_run_keeps_its_best_validated_update(tmp_path: Path) -> None:
    config = TrainConfig(
        env=EnvConfig(jobs=300, window=8, allow_wait=False),
        family="lab",
        validation=1,
        validate_every=2,
        updates=3,
        steps=16,
        minibatch=8,
        epochs=1,
        warm_steps=16,
        hidden=8,
    )
    final = train_to(config, tmp_path / "run", command="test")
    rows = (tmp_path / "run" / "curve.csv").read_text().splitlines()
    assert rows[0].endswith("validation_bsld") and len(rows) == 4
    checked = [r.split(",")[-1] for r in rows[1:]]
    assert checked[0] == "nan" and checked[1] != "nan" and checked[2] != "nan"
    meta = load_policy(str(final)).meta
    assert meta["update"] in (0, 2, 3) and meta["train_cpu_seconds"] > 0
    assert meta["train"]["family"] == "lab"


def test_cli_family_excludes_loads(tmp_path: Path) -> None:
    args = ["rl", "train", "--out", str(tmp_path / "run"), "--family", "lab", "--loads", "0.9"]
    result = CliRunner().invoke(app, args)
    assert isinstance(result.exception, ConfigError)
    assert "drop --loads" in str(result.exception)
