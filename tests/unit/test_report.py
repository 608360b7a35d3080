"""Report writers: tables, PNG charts and the self-contained HTML report."""

from __future__ import annotations

import re
from pathlib import Path

import numpy as np
import pyarrow.csv as pa_csv
import pyarrow.parquet as pq
import pytest
from test_metrics import EMPTY_TIMELINE, a_job, big_table, make_table, make_timeline

from loadmaster.metrics import summarize
from loadmaster.model import JobTable, Timeline
from loadmaster.report import write_html_report, write_job_table, write_plots, write_timeline
from loadmaster.report.charts import MAX_POINTS, downsample_step, wait_cdf

PNG_MAGIC = b"\x89PNG\r\n\x1a\n"
PLOT_NAMES = ["wait_cdf.png", "bsld_by_size.png", "allocation.png", "queue_length.png"]


def small_run(delay_s: float) -> tuple[JobTable, Timeline]:
    """A four-job run on a 2-pool cluster; ``delay_s`` stretches every wait."""
    table = make_table(
        a_job("a").using(1).by("alice", "vision").ran(0, 10 + delay_s, 3600),
        a_job("b").using(8).by("bob", "nlp").ran(60, 600 + delay_s, 7200),
        a_job("c").using(0.5).by("carol", "nlp").ran(120, 120, 5),
        a_job("d").using(64).by("dave", "vision").pending(200),
        a_job("e").using(2).by("erin", "nlp").rejected(300),
    )
    timeline = make_timeline(
        [0.0, 600.0, 4000.0, 8000.0],
        [[1, 0], [1, 8], [0, 8], [0, 0]],
        pool_gpus=(8, 8),
        queue=[[1, 1], [0, 1], [0, 1], [0, 1]],
        fragmented=[[0, 0], [2, 0], [0, 0], [0, 0]],
    )
    return table, timeline


RUNS = {"fifo": small_run(0.0), "backfill+gang": small_run(500.0)}


def assert_png(path: Path) -> None:
    data = path.read_bytes()
    assert data[:8] == PNG_MAGIC, f"{path.name} is not a PNG"
    assert len(data) > 5_000, f"{path.name} is suspiciously small ({len(data)} bytes)"


def test_job_table_round_trips_through_parquet_and_csv(tmp_path: Path) -> None:
    table, _ = RUNS["fifo"]
    paths = write_job_table(table, tmp_path / "out" / "jobs.fifo")
    assert [p.name for p in paths] == ["jobs.fifo.parquet", "jobs.fifo.csv"]
    back = pq.read_table(paths[0])
    assert back.num_rows == len(table)
    assert back.column_names[:2] == ["job_id", "user"]
    assert back.column_names[-3:] == ["wait_s", "jct_s", "bounded_slowdown"]
    assert back.column("wait_s").to_pylist()[:2] == [10.0, 540.0]
    assert pa_csv.read_csv(paths[1]).num_rows == len(table)


def test_timeline_columns_per_pool(tmp_path: Path) -> None:
    _, timeline = RUNS["fifo"]
    parquet, csv = write_timeline(timeline, tmp_path / "timeline")
    back = pq.read_table(parquet)
    assert back.num_rows == 4
    assert back.column_names == [
        "time_s",
        "allocated_gpus.p0",
        "allocated_gpus.p1",
        "queue_length.p0",
        "queue_length.p1",
        "fragmented_gpus.p0",
        "fragmented_gpus.p1",
        "free_gpus.p0",
        "free_gpus.p1",
    ]
    assert back.column("allocated_gpus.p1").to_pylist() == [0, 8, 8, 0]
    assert csv.exists()


@pytest.mark.parametrize(
    "runs",
    [
        pytest.param(RUNS, id="two-policies"),
        pytest.param({"only": (make_table(), EMPTY_TIMELINE)}, id="empty-run"),
        pytest.param({}, id="no-runs"),
        pytest.param(
            {"p": (make_table(a_job("a").ran(0, 0, 100)), make_timeline([0.0], [[1]]))},
            id="no-slowdown-single-sample",
        ),
    ],
)
def test_write_plots_makes_four_valid_pngs(
    tmp_path: Path, runs: dict[str, tuple[JobTable, Timeline]]
) -> None:
    paths = write_plots(runs, tmp_path / "plots")
    assert [p.name for p in paths] == PLOT_NAMES
    for path in paths:
        assert_png(path)


def test_downsampling_keeps_spikes_and_the_mean() -> None:
    t = np.arange(100_000, dtype=np.float64)
    v = np.zeros_like(t)
    v[54_321] = 500.0  # a one-second spike, far narrower than a bin
    series = downsample_step(t, v)
    assert series.time_s.size <= MAX_POINTS
    assert series.peak.max() == 500.0
    # The binned mean keeps the step function's integral.
    assert np.sum(series.mean[:-1] * np.diff(series.time_s)) == pytest.approx(500.0)


def test_short_series_are_drawn_as_is() -> None:
    series = downsample_step([0.0, 1.0, 5.0], [1.0, 3.0, 2.0])
    np.testing.assert_array_equal(series.mean, [1.0, 3.0, 2.0])
    np.testing.assert_array_equal(series.peak, series.mean)


def test_wait_cdf_ends_below_one_when_jobs_never_started() -> None:
    table, _ = RUNS["fifo"]
    hours, fraction = wait_cdf(table)
    assert fraction[-1] == pytest.approx(3 / 5)
    assert hours[0] == pytest.approx(1 / 3600)  # a zero wait drawn at 1 s
    assert np.all(np.diff(hours) >= 0)


def test_wait_cdf_is_downsampled_for_big_runs() -> None:
    hours, fraction = wait_cdf(big_table(20_000))
    assert hours.size <= MAX_POINTS
    assert fraction[-1] == pytest.approx(np.mean(~np.isnan(big_table(20_000).start_s)))


def write_report(tmp_path: Path, runs: dict[str, tuple[JobTable, Timeline]]) -> str:
    with_summaries = {
        policy: (table, timeline, summarize(table, timeline)) for policy, (table, timeline) in runs.items()
    }
    path = write_html_report(
        with_summaries,
        tmp_path / "report" / "index.html",
        title="FIFO vs backfill <test>",
        context={"cluster": "lab-64", "workload": "philly-like", "seed": "7"},
    )
    assert path.exists()
    return path.read_text(encoding="utf-8")


def test_html_report_is_self_contained_and_compares_policies(tmp_path: Path) -> None:
    text = write_report(tmp_path, RUNS)
    for policy in RUNS:
        assert policy in text
    assert '<table class="metrics">' in text
    assert "Mean bounded slowdown" in text
    assert "lower" in text and "higher" in text
    assert "lab-64" in text and "philly-like" in text
    assert "FIFO vs backfill &lt;test&gt;" in text
    script_srcs = re.findall(r"<script[^>]*\bsrc\s*=", text, flags=re.IGNORECASE)
    assert script_srcs == []
    assert "https://cdn" not in " ".join(re.findall(r"<script[^>]*>", text))
    assert text.count("plotly.js v") == 1, "plotly.js must be inlined exactly once"
    assert text.count("Plotly.newPlot") == 4
    assert '<table class="breakdown">' in text
    assert "vision" in text and "64+" in text


def test_html_report_highlights_the_best_policy(tmp_path: Path) -> None:
    text = write_report(tmp_path, RUNS)
    row = re.search(r"<tr><th>Mean wait \(h\)</th>.*?</tr>", text)
    assert row is not None
    cells = re.findall(r'<td class="(num(?: best)?)">', row.group(0))
    # fifo waits less, so its column (the first) is best.
    assert cells == ["num best", "num"]


def test_html_report_of_an_empty_run(tmp_path: Path) -> None:
    text = write_report(tmp_path, {"only": (make_table(), EMPTY_TIMELINE)})
    assert "only" in text
    assert "–" in text  # undefined metrics shown as a dash
