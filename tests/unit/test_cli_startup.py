"""`loadmaster --help` and `loadmaster version` start fast: nothing heavy is imported to list commands."""

from __future__ import annotations

import json
import resource
import subprocess
import sys

import pytest
from typer.testing import CliRunner

from loadmaster.cli import COMMANDS, app, load_command

HEAVY = (
    "numpy",
    "pandas",
    "pyarrow",
    "matplotlib",
    "scipy",
    "fastapi",
    "uvicorn",
    "kubernetes",
    "torch",
    "duckdb",
)
"""Modules that take 0.1-1 s each to import; a command that needs one imports it itself."""

CPU_LIMIT_S = 0.3
"""Issue 20's target for printing --help or the version; CPU time (user + system) of the child,
which a loaded machine does not inflate the way it inflates wall time."""


def _imported_by(args: list[str]) -> set[str]:
    code = (
        "import sys; from loadmaster.cli import app; sys.argv = ['loadmaster', *sys.argv[1:]]\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "import json; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("args", [["--help"], ["version"], []])
def test_listing_commands_imports_nothing_heavy(args: list[str]) -> None:
    loaded = _imported_by(args)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))


@pytest.mark.parametrize("args", [["--help"], ["version"]])
def test_help_and_version_take_under_0_3_s_of_cpu(args: list[str]) -> None:
    """The best of three runs, so that one slow start on a busy machine does not fail it."""
    times = []
    for _ in range(3):
        before = resource.getrusage(resource.RUSAGE_CHILDREN)
        subprocess.run([sys.executable, "-m", "loadmaster.cli", *args], capture_output=True, check=True)
        after = resource.getrusage(resource.RUSAGE_CHILDREN)
        times.append(after.ru_utime - before.ru_utime + after.ru_stime - before.ru_stime)
    assert min(times) < CPU_LIMIT_S, times


@pytest.mark.parametrize("name", list(COMMANDS))
def test_each_listed_help_line_is_the_commands_own(name: str) -> None:
    command = load_command(name)
    assert command.name == name
    assert (command.help or "").strip().splitlines()[0] == COMMANDS[name].help


def test_help_lists_every_command_and_a_typo_gets_a_suggestion() -> None:
    listing = CliRunner().invoke(app, ["--help"])
    assert listing.exit_code == 0
    for name in [*COMMANDS, "version"]:
        assert name in listing.output
    typo = CliRunner().invoke(app, ["simulat"])
    assert typo.exit_code == 2
    assert "Did you mean 'simulate'?" in typo.output


def test_version_prints_the_version() -> None:
    from loadmaster import __version__  # noqa: PLC0415 - compared with what the command prints

    result = CliRunner().invoke(app, ["version"])
    assert result.output.strip() == __version__


def test_comparing_profiles_imports_no_plotting_library() -> None:
    """The scheduler, the simulator and experiment.compare run where matplotlib and plotly are absent."""
    code = (
        "import sys, loadmaster.experiment, loadmaster.scheduling, loadmaster.sim\n"
        "print(sorted(m for m in ('matplotlib', 'plotly') if m in sys.modules))"
    )
    done = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, check=True)
    assert done.stdout.strip() == "[]"
