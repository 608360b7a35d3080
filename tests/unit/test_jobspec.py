"""The job file and the identity file: Slurm's time formats, defaults, and errors that name the field."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadmaster.config.jobspec import duration_s, identity_path, job_from_flags, load_identity
from loadmaster.errors import ConfigError

DURATIONS = {
    "90": 90 * 60,  # minutes, as sbatch --time=90
    "5:30": 5 * 60 + 30,
    "4:00:00": 4 * 3600,
    "2-12": 2 * 86_400 + 12 * 3600,
    "1-02:03": 86_400 + 2 * 3600 + 3 * 60,
    "1-00:00:10": 86_400 + 10,
    "90m": 5400,
    "4h": 14_400,
    "1.5h": 5400,
    "2d": 172_800,
}


@pytest.mark.parametrize(("text", "seconds"), DURATIONS.items())
def test_slurm_time_formats(text: str, seconds: int) -> None:
    assert duration_s(text) == seconds


@pytest.mark.parametrize("text", ["forever", "1:2:3:4", "-5", "4 hours"])
def test_bad_time_limits_say_what_is_allowed(text: str) -> None:
    with pytest.raises(ValueError, match=r"time limit|too many"):
        duration_s(text)


def test_flags_are_validated_and_errors_name_the_flag() -> None:
    spec = job_from_flags({"image": "x", "tasks": 2, "time": "90"})
    assert (spec.tasks, spec.gpus_per_task, spec.queue, spec.time_limit_s) == (2, 1, "default", 5400)
    with pytest.raises(ConfigError, match=r"command line: --gpus-per-task: .*greater than or equal to 0"):
        job_from_flags({"image": "x", "gpus_per_task": -1})
    with pytest.raises(ConfigError, match=r"--cuda: .*not a CUDA version"):
        job_from_flags({"image": "x", "cuda": "twelve"})
    with pytest.raises(ConfigError, match=r"--image: required field is missing"):
        job_from_flags({"tasks": 1})
    with pytest.raises(ConfigError, match=r"--env: .*not an environment variable name"):
        job_from_flags({"image": "x", "env": {"1BAD": "v"}})


def test_identity_from_file_then_environment(tmp_path: Path) -> None:
    path = tmp_path / "config.yaml"
    path.write_text("user: alice\ngroup: team-a\n")
    env = {"LOADMASTER_CONFIG": str(path)}
    who = load_identity(env)
    assert (who.user, who.group, who.home, who.operator) == ("alice", "team-a", "team-a", False)
    who = load_identity({**env, "LOADMASTER_USER": "bob", "LOADMASTER_NAMESPACE": "shared"})
    assert (who.user, who.home) == ("bob", "shared")
    assert identity_path({"XDG_CONFIG_HOME": str(tmp_path)}) == tmp_path / "loadmaster" / "config.yaml"


def test_identity_errors(tmp_path: Path) -> None:
    missing = {"LOADMASTER_CONFIG": str(tmp_path / "none.yaml")}
    with pytest.raises(ConfigError, match="who you are is not configured"):
        load_identity(missing)
    assert load_identity({**missing, "LOADMASTER_USER": "a", "LOADMASTER_GROUP": "g"}).user == "a"
    path = tmp_path / "config.yaml"
    path.write_text("user: Alice Smith\ngroup: team-a\n")
    with pytest.raises(ConfigError, match=rf"{path}:1: user: String should match pattern"):
        load_identity({"LOADMASTER_CONFIG": str(path)})
    path.write_text("user: alice\ngroup: team-a\nrole: admin\n")
    with pytest.raises(ConfigError, match=rf"{path}:3: role: unknown field; allowed: user, group, namespace"):
        load_identity({"LOADMASTER_CONFIG": str(path)})
