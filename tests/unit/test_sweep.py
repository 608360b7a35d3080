"""Sweeps: the file is validated with lines, the same inputs give the same table, a killed driver
resumes, a failing cell is retried then reported while the rest goes on, the statistics are exact."""

from __future__ import annotations

import os
import signal
import subprocess
import sys
import time
from pathlib import Path

import pyarrow as pa
import pyarrow.parquet as pq
import pytest
from typer.testing import CliRunner

from loadmaster.cli import app
from loadmaster.errors import ConfigError
from loadmaster.parallel import InProcess, LocalPool
from loadmaster.sweep import Store, load_sweep, run_sweep, write_report
from loadmaster.sweep.report import results_table
from loadmaster.sweep.stats import bootstrap_mean, paired, wilcoxon_exact

SRC = Path(__file__).resolve().parents[2] / "src"
TRACES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"

SMALL = """\
name: small
jobs: 80
loads: [0.8, 1.4]
profiles: [fifo, kube-default]
seeds: {first: 0, count: 3}
retry_backoff_s: 0
"""


def _write(folder: Path, text: str, name: str = "sweep.yaml") -> Path:
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / name
    path.write_text(text)
    return path


@pytest.fixture(scope="module")
def reference(tmp_path_factory: pytest.TempPathFactory) -> tuple[Path, pa.Table]:
    """The small sweep run serially in this process: the table every other way must reproduce."""
    folder = tmp_path_factory.mktemp("reference")
    spec = _write(folder, SMALL)
    sweep = load_sweep(spec)
    outcome = run_sweep(sweep, Store(folder / "out"), InProcess(), poll_s=0)
    assert outcome.ran == 12 and not outcome.failed
    return spec, results_table(sweep, Store(folder / "out"))


def test_grid_has_every_combination_and_keys_cover_the_inputs(tmp_path: Path) -> None:
    sweep = load_sweep(_write(tmp_path, SMALL))
    assert len(sweep.cells) == 2 * 2 * 3
    assert len({c.key for c in sweep.cells}) == 12
    assert sweep.compare == (("fifo", "kube-default"),)
    other = load_sweep(_write(tmp_path, SMALL.replace("jobs: 80", "jobs: 81"), "other.yaml"))
    assert not {c.key for c in sweep.cells} & {c.key for c in other.cells}


def test_same_inputs_same_table_on_a_process_pool(tmp_path: Path, reference: tuple[Path, pa.Table]) -> None:
    spec, expected = reference
    sweep = load_sweep(spec)
    with LocalPool(2) as pool:
        outcome = run_sweep(sweep, Store(tmp_path), pool, poll_s=0.05)
    assert outcome.ran == 12
    table = results_table(sweep, Store(tmp_path))
    assert table.equals(expected)
    assert set(table.column("status").to_pylist()) == {"done"}
    again = run_sweep(sweep, Store(tmp_path), InProcess())
    assert (again.ran, again.skipped) == (0, 12)


def test_a_killed_driver_resumes_where_it_stopped(tmp_path: Path, reference: tuple[Path, pa.Table]) -> None:
    """``kill -9`` of the driver mid-sweep: every stored cell is whole, and a rerun runs only the rest."""
    spec, expected = reference
    out = tmp_path / "out"
    env = {**os.environ, "PYTHONPATH": str(SRC)}
    command = [sys.executable, "-c", "from loadmaster.cli import main; main()", "sweep", str(spec)]
    driver = subprocess.Popen(
        [*command, "--out", str(out), "--workers", "1"],
        env=env,
        stdout=subprocess.DEVNULL,
        stderr=subprocess.DEVNULL,
        start_new_session=True,
    )
    deadline = time.monotonic() + 120
    while len(list((out / "cells").glob("*.json"))) < 2 and time.monotonic() < deadline:
        time.sleep(0.02)
    os.kill(driver.pid, signal.SIGKILL)
    driver.wait()
    os.killpg(driver.pid, signal.SIGKILL)  # the orphaned pool worker
    stored = len(list((out / "cells").glob("*.json")))
    assert 2 <= stored < 12, "the driver must be killed mid-sweep"
    sweep = load_sweep(spec)
    outcome = run_sweep(sweep, Store(out), InProcess(), poll_s=0)
    assert (outcome.skipped, outcome.ran) == (stored, 12 - stored)
    assert results_table(sweep, Store(out)).equals(expected)


def test_a_failing_cell_is_retried_then_reported_and_the_rest_goes_on(tmp_path: Path) -> None:
    (tmp_path / "bad.csv").write_text("job_id,user,submit_time\nx,y,notanumber\n")
    text = f"""\
traces: [{TRACES / "generic_sample.csv"}, bad.csv]
profiles: [fifo, sds]
seeds: [0, 1]
retries: 2
retry_backoff_s: 0
"""
    sweep = load_sweep(_write(tmp_path, text))
    store = Store(tmp_path / "out")
    with LocalPool(2) as pool:
        outcome = run_sweep(sweep, store, pool, poll_s=0.05)
    assert outcome.ran == 4 and len(outcome.failed) == 4
    failures = store.failures()
    assert {f["attempts"] for f in failures.values()} == {3}
    assert all("submit_time" in f["error"] for f in failures.values())
    paths = write_report(sweep, store, tmp_path / "out")
    statuses = pq.read_table(paths["table"]).column("status").to_pylist()
    assert statuses.count("done") == 4 and statuses.count("failed") == 4
    assert "submit_time" in paths["report"].read_text()


def test_partial_or_foreign_files_are_never_read_as_results(tmp_path: Path) -> None:
    store = Store(tmp_path)
    store.put("a" * 32, {"key": "a" * 32, "metrics": {}})
    (store.cells / ".x.json.123.tmp").write_text('{"key": "half')
    (store.cells / f"{'b' * 32}.json").write_text('{"key": "b')  # truncated by hand
    (store.cells / f"{'c' * 32}.json").write_text('{"key": "other"}')
    assert list(store.done()) == ["a" * 32]


@pytest.mark.parametrize(
    ("text", "where", "message"),
    [
        ("profiles: [fifo, nope]\n", ":1", "unknown profile 'nope'; available: kube-default"),
        ("loads: [0.8]\nseedz: [1]\n", ":2", "unknown field; allowed: name, description, clusters"),
        ("clusters: [lab, missing.yaml]\n", ":1", "clusters[1]: no such file"),
        ("plugin_args: {x: {fifo: {strict: 3}}}\n", ":1", "plugin_args.x: profile"),
        ("plugin_args: {x: {warp: {}}}\n", ":1", "unknown plugin; allowed:"),
        ("metrics: [mean_wait_s, speed]\n", ":1", "metrics[1]: unknown metric 'speed'"),
        ("loads: [0.8, 1.0]\ncells:\n  - {profile: fifo}\n", ":3", "load is missing and the sweep has 2"),
        ("compare: [[fifo, nope]]\n", ":1", "compare[0][1]: unknown profile 'nope'"),
    ],
)
def test_bad_sweep_files_name_the_line_and_what_is_allowed(
    tmp_path: Path, text: str, where: str, message: str
) -> None:
    spec = _write(tmp_path, text)
    with pytest.raises(ConfigError) as caught:
        load_sweep(spec)
    assert f"{spec}{where}" in str(caught.value)
    assert message in str(caught.value)


def test_an_explicit_list_of_cells(tmp_path: Path) -> None:
    text = (
        SMALL + "cells:\n  - {load: 0.8, profile: fifo, seed: 2}\n  - {load: 1.4, profile: fifo, seed: 0}\n"
    )
    sweep = load_sweep(_write(tmp_path, text))
    assert [(c.load, c.profile.label, c.seed) for c in sweep.cells] == [(0.8, "fifo", 2), (1.4, "fifo", 0)]


def test_a_variant_changes_the_key_only_where_it_changes_the_profile(tmp_path: Path) -> None:
    text = SMALL + "plugin_args:\n  default: {}\n  loose: {fifo: {strict: false}}\n"
    sweep = load_sweep(_write(tmp_path, text))
    keys = {(c.profile.label, c.variant, c.load, c.seed): c.key for c in sweep.cells}
    assert keys[("fifo", "default", 0.8, 0)] != keys[("fifo", "loose", 0.8, 0)]
    # kube-default already has fifo strict: false, so the variant is the same simulation
    assert keys[("kube-default", "default", 0.8, 0)] == keys[("kube-default", "loose", 0.8, 0)]


def test_wilcoxon_exact_matches_hand_counts() -> None:
    assert wilcoxon_exact([1.0, 2.0, 3.0, 4.0, 5.0]) == pytest.approx(2 / 32)
    # W+ = 13; patterns as extreme: W+ in {13, 14, 15} or {0, 1, 2}, three each
    assert wilcoxon_exact([1.0, -2.0, 3.0, 4.0, 5.0]) == pytest.approx(6 / 32)
    assert wilcoxon_exact([0.0, 0.0]) == 1.0
    assert wilcoxon_exact([1.0, -1.0]) == 1.0


def test_bootstrap_is_seeded_and_paired_says_where_it_differs() -> None:
    values = [3.0, 5.0, 4.0, 6.0, 5.5]
    assert bootstrap_mean(values, resamples=500, alpha=0.05, seed=1) == bootstrap_mean(
        values, resamples=500, alpha=0.05, seed=1
    )
    low, high = bootstrap_mean(values, resamples=2000, alpha=0.05, seed=1)
    assert low < 4.7 < high
    better = paired([10.0] * 8, [9.0, 8.5, 9.2, 8.8, 9.1, 8.7, 9.4, 8.9], resamples=1000, alpha=0.05, seed=0)
    assert better.significant and better.diff < 0 and better.p_value == pytest.approx(2 / 256)
    noise = paired(
        [1.0, 2.0, 3.0, 4.0, 5.0, 6.0], [1.1, 1.9, 3.1, 3.9, 5.1, 5.9], resamples=1000, alpha=0.05, seed=0
    )
    assert not noise.significant


def test_cli_runs_a_sweep_and_writes_the_report(tmp_path: Path, reference: tuple[Path, pa.Table]) -> None:
    spec, expected = reference
    out = tmp_path / "out"
    result = CliRunner().invoke(app, ["sweep", str(spec), "--out", str(out), "--workers", "2"])
    assert result.exit_code == 0, result.output
    assert "12/12 done" in result.output
    assert pq.read_table(out / "results.parquet").equals(expected)
    comparison = pq.read_table(out / "comparison.parquet").to_pylist()
    assert {row["metric"] for row in comparison} >= {"mean_wait_s", "jain_fairness"}
    assert len(comparison) == 2 * 8  # two loads x eight metrics, one pair
    for name in ("report.html", "plots/mean_wait_s.png", "timing.csv", "sweep.log"):
        assert (out / name).stat().st_size > 0, name
