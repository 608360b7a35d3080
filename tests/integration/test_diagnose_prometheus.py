"""``loadmaster diagnose --prometheus URL --job ID`` against a real Prometheus.

Half an hour of a job's synthetic telemetry (a severe straggler, a mild one, an XID error) is written
as OpenMetrics with timestamps and backfilled into a Prometheus data folder by ``promtool tsdb
create-blocks-from openmetrics`` (labelled as a scrape would have stored them: loadmaster's ``job``
as ``exported_job``, beside the scrape's ``job`` and ``instance``); Prometheus then serves it and
the CLI reads it with range queries.
"""

from __future__ import annotations

import json
import math
import os
import shutil
import subprocess
import time
from collections.abc import Iterator
from pathlib import Path

import httpx
import numpy as np
import pytest
from live_stack import run_prometheus
from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.telemetry.schema import FIELDS, field_code
from loadmaster.telemetry.synthetic import (
    Fault,
    FaultKind,
    GpuRef,
    NodeSpec,
    PlannedJob,
    SyntheticTelemetry,
    TelemetryPlan,
)

DURATION_S = 1800.0
INTERVAL_S = 5.0


def tool(name: str) -> str:
    found = shutil.which(name)
    if found is None:
        if os.environ.get("CI") == "true":
            pytest.fail(f"{name} is missing; CI installs it with the prometheus package (.ci/run)")
        pytest.skip(f"{name} is not installed")
    return found


def openmetrics(t0: float) -> str:
    """The job's telemetry from ``t0`` (Unix seconds) as OpenMetrics text, grouped by family."""
    nodes = (NodeSpec("node-a", 4), NodeSpec("node-b", 4))
    gpus = tuple(GpuRef(n.hostname, g) for n in nodes for g in range(4))
    faults = (
        Fault(FaultKind.STRAGGLER, 400, 1000, gpus=(GpuRef("node-a", 1),), magnitude=3.0),
        Fault(FaultKind.STRAGGLER, 400, 1000, gpus=(GpuRef("node-b", 3),), magnitude=1.3),
        Fault(FaultKind.XID, 900, 1000, gpus=(GpuRef("node-b", 2),)),
    )
    plan = TelemetryPlan(nodes, (PlannedJob("train-1", "ann", gpus, 0.0, DURATION_S + 60),), faults, seed=4)
    gen = SyntheticTelemetry(plan)
    series = {s.id: s for s in gen.series(DURATION_S / 2)}
    samples = gen.samples(0.0, DURATION_S, INTERVAL_S)
    time_s = samples.column("time_s").to_numpy()
    sid = samples.column("series").to_numpy()
    code = samples.column("field").to_numpy()
    value = samples.column("value").to_numpy(zero_copy_only=False)
    lines = []
    for f in FIELDS:
        wanted = np.flatnonzero(code == field_code(f))
        if wanted.size == 0:
            continue
        lines.append(f"# TYPE {f.name} gauge")
        for s in np.unique(sid[wanted]):
            labels = dict(series[int(s)].labels)
            if "job" in labels:
                labels["exported_job"] = labels.pop("job")
            labels |= {"job": "gpus", "instance": f"{labels.get('Hostname', 'x')}:9400"}
            if "gpu" in labels:  # dcgm-exporter's pod labels: one pod per node of the gang
                labels |= {"namespace": "team-a", "pod": f"train-1-{labels['Hostname']}", "container": "main"}
            text = ",".join(f'{k}="{v}"' for k, v in sorted(labels.items()))
            rows = wanted[sid[wanted] == s]
            for k in rows[np.argsort(time_s[rows], kind="stable")]:
                if math.isfinite(value[k]):
                    lines.append(f"{f.name}{{{text}}} {float(value[k])!r} {t0 + float(time_s[k]):.3f}")
    lines.append("# EOF")
    return "\n".join(lines) + "\n"


@pytest.fixture(scope="module")
def prometheus(tmp_path_factory: pytest.TempPathFactory) -> Iterator[tuple[str, float]]:
    promtool, binary = tool("promtool"), tool("prometheus")
    folder = tmp_path_factory.mktemp("backfill")
    t0 = math.floor(time.time() / 60) * 60 - 3600.0
    (folder / "data.om").write_text(openmetrics(t0))
    backfill = [promtool, "tsdb", "create-blocks-from", "openmetrics", str(folder / "data.om")]
    subprocess.run([*backfill, str(folder / "data")], check=True, capture_output=True)
    (folder / "prometheus.yml").write_text("global: {scrape_interval: 15s}\n")
    process, url = run_prometheus(binary, folder)
    try:
        deadline = time.monotonic() + 90.0
        while time.monotonic() < deadline:
            try:
                query = {
                    "query": "count(count_over_time(DCGM_FI_PROF_SM_ACTIVE[2h]))",
                    "time": t0 + DURATION_S,
                }
                result = httpx.get(f"{url}/api/v1/query", params=query).json()["data"]["result"]
                if result and float(result[0]["value"][1]) == 8:
                    break
            except (
                httpx.HTTPError,
                ValueError,
                KeyError,
            ):  # not up yet: 503 "Service Unavailable" while it starts
                pass
            time.sleep(0.5)
        else:
            pytest.fail("Prometheus did not serve the backfilled telemetry within 90 s")
        yield url, t0
    finally:
        process.terminate()
        process.wait(timeout=20)


def run(args: list[str]) -> str:
    result = CliRunner().invoke(app, ["diagnose", *args])
    assert result.exit_code == 0, f"{result.output}\n{result.exception!r}"
    return result.output


def test_diagnose_reads_the_job_from_prometheus(prometheus: tuple[str, float], tmp_path: Path) -> None:
    url, t0 = prometheus
    output = run(["--prometheus", url, "--job", "train-1", "--start", str(t0), "--end", str(t0 + DURATION_S),
                  "--step", str(INTERVAL_S), "--out", str(tmp_path)])  # fmt: skip
    found = json.loads((tmp_path / "diagnosis.json").read_text())
    by_kind = {(f["kind"], tuple(f["gpus"])) for f in found["findings"]}
    assert ("xid", ("node-b/2",)) in by_kind
    assert ("straggler", ("node-a/1",)) in by_kind  # the severe straggler alone
    assert all(f["kind"] != "missing" for f in found["findings"])
    assert found["gpus"] == 8 and found["note"] is None
    severe = next(f for f in found["findings"] if f["gpus"] == ["node-a/1"])
    assert 0.2 < severe["evidence"]["numbers"]["whatif_step_time_share"] < 0.9
    assert "straggler on node-a/1" in output


def test_a_window_reaching_before_the_telemetry_says_so(
    prometheus: tuple[str, float], tmp_path: Path
) -> None:
    url, t0 = prometheus
    output = run(["--prometheus", url, "--job", "train-1", "--end", str(t0 + 600), "--window", "3600",
                  "--step", "15", "--out", str(tmp_path)])  # fmt: skip
    found = json.loads((tmp_path / "diagnosis.json").read_text())
    assert all(f["kind"] != "missing" for f in found["findings"])
    assert found["note"].startswith("the job's telemetry begins at") and "telemetry begins" in output


def test_too_little_telemetry_is_said(prometheus: tuple[str, float], tmp_path: Path) -> None:
    url, t0 = prometheus
    output = run(["--prometheus", url, "--job", "train-1", "--start", str(t0 - 600), "--end", str(t0 + 60),
                  "--step", "5", "--out", str(tmp_path)])  # fmt: skip
    assert "too little telemetry for a verdict" in output
    assert json.loads((tmp_path / "diagnosis.json").read_text())["findings"] == []


def test_a_kubernetes_job_is_found_by_its_pods(prometheus: tuple[str, float], tmp_path: Path) -> None:
    url, t0 = prometheus
    run(["--prometheus", url, "--job", "team-a/train-1", "--start", str(t0), "--end", str(t0 + DURATION_S),
         "--step", str(INTERVAL_S), "--out", str(tmp_path)])  # fmt: skip
    found = json.loads((tmp_path / "diagnosis.json").read_text())
    assert found["job"] == "team-a/train-1" and found["gpus"] == 8
    assert ("xid", ["node-b/2"]) in [(f["kind"], f["gpus"]) for f in found["findings"]]
    result = CliRunner().invoke(app, ["diagnose", "--prometheus", url, "--job", "team-a/other"])
    assert result.exit_code != 0 and "no GPU series of job 'team-a/other'" in str(result.exception)
