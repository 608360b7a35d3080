"""Diagnostics over a DuckDB telemetry file: ``loadmaster diagnose --store`` and ``reclaim_report``
on a DuckDBStore give what the in-memory paths give."""

from __future__ import annotations

import json
from pathlib import Path

from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.diagnostics import detect, frame_from_tables, reclaim_report
from loadmaster.telemetry.duck import DuckDBStore
from loadmaster.telemetry.memory import MemoryStore
from loadmaster.telemetry.store import TelemetryStore
from loadmaster.telemetry.synthetic import (
    Fault,
    FaultKind,
    GpuRef,
    NodeSpec,
    PlannedJob,
    SyntheticTelemetry,
    TelemetryPlan,
    Workload,
)


def _xid_job() -> SyntheticTelemetry:
    specs = tuple(NodeSpec(f"n{i}", 8) for i in range(3))
    gpus = tuple(GpuRef(n.hostname, g) for n in specs for g in range(8))
    faults = (Fault(FaultKind.XID, 300, 400, gpus=(GpuRef("n1", 2),)),)
    return SyntheticTelemetry(TelemetryPlan(specs, (PlannedJob("j", "ann", gpus, 0, 1000),), faults, seed=1))


def _fill(store: TelemetryStore, gen: SyntheticTelemetry, end_s: float, interval_s: float) -> None:
    store.register(gen.series(end_s / 2))
    for table in gen.chunks(0.0, end_s, interval_s=interval_s, chunk_s=min(end_s, 3600.0)):
        store.append(table)


def test_diagnose_store_reads_a_duckdb_file(tmp_path: Path) -> None:
    gen = _xid_job()
    path = tmp_path / "telemetry.duckdb"
    store = DuckDBStore(str(path))
    _fill(store, gen, 900.0, 1.0)
    store.close()
    out = tmp_path / "out"
    args = ["diagnose", "--store", str(path), "--job", "j", "--start", "0", "--end", "900", "--out", str(out)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    findings = json.loads((out / "diagnosis.json").read_text())["findings"]
    assert [(f["kind"], f["gpus"]) for f in findings] == [("xid", ["n1/2"])]
    assert abs(findings[0]["start_s"] - 300) <= 2 and abs(findings[0]["end_s"] - 400) <= 2
    in_memory = detect(frame_from_tables(gen.series(450.0), [gen.samples(0.0, 900.0)], "j", 1.0, 0.0, 900.0))
    assert [f.to_dict()["summary"] for f in in_memory] == [f["summary"] for f in findings]
    assert "data:image/png;base64" in (out / "diagnosis.html").read_text()


def test_diagnose_store_names_a_missing_file(tmp_path: Path) -> None:
    args = ["diagnose", "--store", str(tmp_path / "nope.duckdb"), "--job", "j", "--start", "0", "--end", "9"]
    result = CliRunner().invoke(app, args)
    assert result.exit_code != 0 and "no such store file" in str(result.exception)


def _idle_cluster() -> SyntheticTelemetry:
    specs = (NodeSpec("a", 8), NodeSpec("b", 8))
    jobs = (
        PlannedJob("train", "ann", tuple(GpuRef("a", g) for g in range(8)), 0, 9000),
        PlannedJob(
            "notebook", "bo", tuple(GpuRef("b", g) for g in range(2)), 0, 9000, workload=Workload.IDLE
        ),
        PlannedJob("half", "cy", tuple(GpuRef("b", g) for g in range(2, 6)), 0, 9000),
    )
    faults = (Fault(FaultKind.IDLE, 0, 9000, gpus=(GpuRef("b", 4), GpuRef("b", 5))),)
    return SyntheticTelemetry(TelemetryPlan(specs, jobs, faults, seed=2))


def test_reclaim_report_on_a_duckdb_store_equals_the_memory_store(tmp_path: Path) -> None:
    gen = _idle_cluster()
    duck, memory = DuckDBStore(str(tmp_path / "t.duckdb")), MemoryStore()
    for store in (duck, memory):
        _fill(store, gen, 7200.0, 30.0)
    from_duck = reclaim_report(duck, 7200.0).to_dict()
    assert from_duck == reclaim_report(memory, 7200.0).to_dict()
    by_job = {row["job"]: row for row in from_duck["jobs"]}
    assert by_job["notebook"]["idle"] == ["b/0", "b/1"] and "preempt" in by_job["notebook"]["action"]
    assert by_job["half"]["idle"] == ["b/4", "b/5"] and "shrink" in by_job["half"]["action"]
    duck.close()


def test_reclaim_command_on_a_duckdb_file_writes_json(tmp_path: Path) -> None:
    path = tmp_path / "t.duckdb"
    store = DuckDBStore(str(path))
    _fill(store, _idle_cluster(), 7200.0, 30.0)
    store.close()
    report_path = tmp_path / "r.json"
    result = CliRunner().invoke(
        app, ["diagnose", "reclaim", "--store", str(path), "--json", str(report_path)]
    )
    assert result.exit_code == 0, result.output
    assert "notebook" in result.output and "half" in result.output
    report = json.loads(report_path.read_text())
    assert report["at_s"] == 7200.0 and report["idle_gpus"] == 4
