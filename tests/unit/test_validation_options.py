"""The RLScheduler validation runs on any SWF trace, reference entry and machine size, and prints the
reference beside each of our cells (benchmarks/validate_rlscheduler.py, loadmaster rl eval-rlscheduler)."""

from __future__ import annotations

import json
import os
import subprocess
import sys
from pathlib import Path

import pytest
from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.errors import ConfigError
from loadmaster.validation.rlscheduler import POLICIES, read_reference, reproduce

ROOT = Path(__file__).resolve().parents[2]
MODES = ("nobackfill", "backfill")


def small_trace(tmp_path: Path) -> Path:
    """40 jobs of 1-4 processors, one every 10 s, on an 8-processor machine."""
    lines = ["; MaxProcs: 8"]
    for i in range(40):
        procs = i % 4 + 1
        lines.append(f"{i + 1} {i * 10} -1 {50 + 7 * i} {procs} -1 -1 {procs} -1 -1 1 1 1 -1 1 -1 -1 -1")
    path = tmp_path / "small.swf"
    path.write_text("\n".join(lines) + "\n")
    return path


def reference_for(tmp_path: Path, trace: Path, shift: float) -> Path:
    """A reference entry for ``trace`` holding our own values plus ``shift`` (one sequence from job 0)."""
    ours = reproduce(trace, starts=(0,), procs=8)
    entry: dict[str, object] = {"MaxProcs": 8}
    for backfill, mode in zip((False, True), MODES, strict=True):
        for metric, values in (("bsld", "bsld"), ("util", "utilisation")):
            per = {
                ("UNI" if p == "UNICEP" else p): [getattr(ours[p, backfill], values)[0] + shift]
                for p in POLICIES
            }
            entry[f"{metric}_{mode}"] = {
                "starts": [0],
                "mean": {k: v[0] for k, v in per.items()},
                "per_sequence": per,
            }
    path = tmp_path / "reference.json"
    path.write_text(json.dumps({"results": {"small-entry": entry}}))
    return path


def test_the_benchmark_takes_trace_entry_and_machine_size_and_prints_the_reference(tmp_path: Path) -> None:
    trace = small_trace(tmp_path)
    reference = reference_for(tmp_path, trace, shift=0.0)
    out = tmp_path / "result.json"
    command = [sys.executable, str(ROOT / "benchmarks" / "validate_rlscheduler.py"), "--trace", str(trace)]
    command += ["--reference", str(reference), "--entry", "small-entry", "--out", str(out), "--workers", "1"]
    env = {**os.environ, "PYTHONPATH": str(ROOT / "src")}
    done = subprocess.run(command, capture_output=True, text=True, env=env, timeout=300, check=False)

    assert done.returncode == 0, done.stderr
    result = json.loads(out.read_text())
    assert result["pass"] and result["cells_passed"] == 20
    assert "8 processors" in result["setup"]
    sjf = result["cells"]["SJF backfill bsld"]
    assert f"{sjf['ours']:.2f} / {sjf['published']:.2f}" in done.stdout


def test_an_unknown_reference_entry_names_the_entries(tmp_path: Path) -> None:
    reference = tmp_path / "reference.json"
    reference.write_text(json.dumps({"results": {"lublin_256.swf": {}}}))
    with pytest.raises(ConfigError, match=r"results\.other\.swf: no such entry; entries: lublin_256\.swf"):
        read_reference(reference, "other.swf")


def test_eval_rlscheduler_runs_any_heuristics_on_a_machine_size_with_the_reference_beside(
    tmp_path: Path,
) -> None:
    trace = small_trace(tmp_path)
    reference = reference_for(tmp_path, trace, shift=1.0)
    published = read_reference(reference, "small-entry")
    args = ["rl", "eval-rlscheduler", "--trace", str(trace), "--reference", str(reference)]
    args += ["--entry", "small-entry", "--procs", "8", "--sequences", "1", "--policies", "FCFS,WFP3"]
    result = CliRunner().invoke(app, args)

    assert result.exit_code == 0, result.output
    fcfs = published.cells["FCFS", True].bsld[0]
    assert f"{fcfs - 1.0:.2f} / {fcfs:.2f}" in result.output
    assert "WFP3" in result.output and "SJF" not in result.output


def test_eval_rlscheduler_refuses_an_unknown_heuristic(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["rl", "eval-rlscheduler", "--trace", str(small_trace(tmp_path)), "--policies", "LJF"]
    )
    assert isinstance(result.exception, ConfigError)
    assert "--policies" in str(result.exception)
