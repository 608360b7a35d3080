"""The simulate command end to end on the built-in cluster with a small workload."""

from __future__ import annotations

import json
import subprocess
import sys
from pathlib import Path

import pyarrow.parquet as pq
from typer.testing import CliRunner

from loadmaster.cli import app


def test_simulate_writes_report_metrics_tables_and_plots(tmp_path: Path) -> None:
    out = tmp_path / "out"
    result = CliRunner().invoke(
        app, ["simulate", "--jobs", "300", "--profiles", "fifo,binpack-skip,kube-default", "--out", str(out)]
    )
    assert result.exit_code == 0, result.output
    assert "Policies compared" in result.output
    metrics = json.loads((out / "metrics.json").read_text())
    assert list(metrics["profiles"]) == ["fifo", "binpack-skip", "kube-default"]
    fifo = metrics["profiles"]["fifo"]
    assert fifo["jobs"] == 300
    assert fifo["jobs_ran"] + fifo["jobs_rejected"] + fifo["jobs_unfinished"] >= 300
    assert pq.read_table(out / "jobs.fifo.parquet").num_rows == 300
    assert (out / "jobs.fifo.csv").exists()
    for png in ("wait_cdf.png", "bsld_by_size.png", "allocation.png", "queue_length.png"):
        assert (out / png).read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    html = (out / "report.html").read_text()
    assert "binpack-skip" in html
    assert "kube-default" in html


def test_same_seed_same_metrics(tmp_path: Path) -> None:
    outputs = []
    for name in ("a", "b"):
        out = tmp_path / name
        args = ["simulate", "--jobs", "200", "--profiles", "random", "--seed", "3", "--out", str(out)]
        assert CliRunner().invoke(app, args).exit_code == 0
        metrics = json.loads((out / "metrics.json").read_text())["profiles"]["random"]
        metrics.pop("wall_s")
        outputs.append(metrics)
    assert outputs[0] == outputs[1]


def test_bad_input_is_one_clear_line_and_exit_code_2(tmp_path: Path) -> None:
    bad = tmp_path / "cluster.yaml"
    bad.write_text("name: x\nresource_types: {}\npools: {}\n")
    done = subprocess.run(
        [sys.executable, "-c", "from loadmaster.cli import main; main()", "simulate", "--cluster", str(bad)],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert f"{bad}:2: resource_types:" in done.stderr
    assert "Traceback" not in done.stderr


def test_unknown_profile_lists_available() -> None:
    done = subprocess.run(
        [
            sys.executable,
            "-c",
            "from loadmaster.cli import main; main()",
            "simulate",
            "--profiles",
            "fifo,nope",
        ],
        capture_output=True,
        text=True,
        check=False,
    )
    assert done.returncode == 2
    assert "unknown profile 'nope'; available: kube-default, fifo, sds" in done.stderr
