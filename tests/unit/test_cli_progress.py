"""Long work shows progress also when the output is redirected: a line per task at least."""

from __future__ import annotations

import subprocess
import sys
import time
from pathlib import Path

import pytest

from loadmaster.cli.output import console, count_progress, working


def test_redirected_simulate_prints_a_line_per_profile_as_it_runs(tmp_path: Path) -> None:
    args = ["simulate", "--profiles", "fifo,sds", "--jobs", "40", "--out", str(tmp_path / "out")]
    done = subprocess.run(
        [sys.executable, "-m", "loadmaster.cli", *args],
        capture_output=True,
        text=True,
        check=True,
        timeout=300,
    )
    lines = done.stdout.splitlines()
    for profile in ("fifo", "sds"):
        assert f"{profile}: started" in lines
        assert any(line.startswith(f"{profile}: done, 40 of 40 after") for line in lines), lines
    # Profiles run in parallel processes, so either may start first; both before the table.
    table = next(i for i, line in enumerate(lines) if "Policies" in line)
    assert lines.index("fifo: started") < table
    assert lines.index("sds: started") < table
    assert any(line.startswith("Writing the report") for line in lines)


def test_lines_every_period_and_where_an_unfinished_task_stopped() -> None:
    with console.capture() as captured, count_progress(every_s=0.0) as progress:
        task = progress.add_task("slurm", total=10)
        progress.advance(task, 3)
        progress.advance(task, 2)
    text = captured.get()
    assert "slurm: started" in text
    assert "slurm: at 5 of 10 after" in text
    assert "slurm: stopped at 5 of 10 after" in text


def test_working_beats_while_a_step_runs(capsys: pytest.CaptureFixture[str]) -> None:
    with working("Building", every_s=0.01):
        time.sleep(0.05)
    text = capsys.readouterr().out
    assert text.startswith("Building ...")
    assert "  Building: 0 s" in text
