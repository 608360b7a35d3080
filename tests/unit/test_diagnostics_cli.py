"""``loadmaster diagnose`` through typer's CliRunner."""

from __future__ import annotations

import json
from pathlib import Path

import pyarrow.parquet as pq
from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.telemetry.store import series_table
from loadmaster.telemetry.synthetic import (
    Fault,
    FaultKind,
    GpuRef,
    NodeSpec,
    PlannedJob,
    SyntheticTelemetry,
    TelemetryPlan,
)


def test_synthetic_demo_writes_json_and_html(tmp_path: Path) -> None:
    result = CliRunner().invoke(
        app, ["diagnose", "--synthetic", "--duration", "1800", "--out", str(tmp_path)]
    )
    assert result.exit_code == 0, result.output
    data = json.loads((tmp_path / "diagnosis.json").read_text())
    kinds = {f["kind"] for f in data["findings"]}
    assert {"comm", "xid", "ecc", "missing", "idle", "thermal", "memory_leak", "straggler"} <= kinds
    page = (tmp_path / "diagnosis.html").read_text()
    assert "data:image/png;base64" in page and "Findings" in page


def test_files_input(tmp_path: Path) -> None:
    specs = tuple(NodeSpec(f"n{i}", 8) for i in range(3))
    gpus = tuple(GpuRef(n.hostname, g) for n in specs for g in range(8))
    faults = (Fault(FaultKind.XID, 300, 400, gpus=(GpuRef("n1", 2),)),)
    gen = SyntheticTelemetry(TelemetryPlan(specs, (PlannedJob("j", "ann", gpus, 0, 1000),), faults, seed=1))
    pq.write_table(gen.samples(0.0, 900.0), tmp_path / "s.parquet")
    pq.write_table(series_table(gen.series(450.0)), tmp_path / "series.parquet")
    args = [
        "diagnose",
        "--samples",
        str(tmp_path / "s.parquet"),
        "--series",
        str(tmp_path / "series.parquet"),
        "--job",
        "j",
        "--out",
        str(tmp_path / "out"),
    ]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    findings = json.loads((tmp_path / "out" / "diagnosis.json").read_text())["findings"]
    assert [(f["kind"], f["gpus"]) for f in findings] == [("xid", ["n1/2"])]


def test_missing_input_is_a_clear_error() -> None:
    result = CliRunner().invoke(app, ["diagnose"])
    assert result.exit_code != 0
    assert "--synthetic" in str(result.exception)


def test_iterations_command_prints_steps_as_steps_with_units(tmp_path: Path) -> None:
    rows = ["rank,iteration,time_s"]
    for k in range(1, 201):
        for r in range(8):
            t = 2.0 if r == 5 and 80 < k <= 120 else 1.0 + 0.01 * ((k * 7 + r * 3) % 5 - 2)
            rows.append(f"{r},{k},{t}")
    path = tmp_path / "steps.csv"
    path.write_text("\n".join(rows) + "\n")
    result = CliRunner().invoke(
        app, ["diagnose", "iterations", str(path), "--json", str(tmp_path / "f.json")]
    )
    assert result.exit_code == 0, result.output
    text = " ".join(result.output.split())
    assert "8 ranks, 200 iterations (1-200), times in s" in text
    assert "straggler on rank 5 in iterations 81-120" in text
    assert "by 0.995 s (median)" in text and "would take 49% less time" in text
    data = json.loads((tmp_path / "f.json").read_text())
    assert data["unit"] == "s" and data["stragglers"][0]["axis"] == "iteration"


def test_iterations_command_names_the_missing_columns(tmp_path: Path) -> None:
    path = tmp_path / "bad.csv"
    path.write_text("a,b\n1,2\n")
    result = CliRunner().invoke(app, ["diagnose", "iterations", str(path)])
    assert result.exit_code != 0 and "lacks column 'rank'" in str(result.exception)
