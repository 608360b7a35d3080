"""Commands write under out/ unless told otherwise, and git ignores out/."""

from __future__ import annotations

import subprocess
from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import REFERENCE_DATA, reference_data
from loadmaster.cli import app


def test_workload_fit_writes_its_model_and_report_under_out(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    trace = reference_data("tiresias/60_job.csv")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["workload", "fit", str(trace), "--format", "tiresias"])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "60_job.yaml").is_file()
    assert (tmp_path / "out" / "60_job-report" / "fit_report.md").is_file()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["out"]


def test_git_ignores_out() -> None:
    root = REFERENCE_DATA.parents[1]
    done = subprocess.run(
        ["git", "check-ignore", "-q", "out/demo/report.html"], cwd=root, capture_output=True, check=False
    )
    assert done.returncode == 0
