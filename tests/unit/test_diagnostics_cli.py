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
    JobSpec,
    NodeSpec,
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
    gen = SyntheticTelemetry(TelemetryPlan(specs, (JobSpec("j", "ann", gpus, 0, 1000),), faults, seed=1))
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
