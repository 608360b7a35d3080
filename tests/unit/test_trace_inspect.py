"""Inspecting a trace: the summary's numbers, absent columns, clocks, plots and the CLI command."""

from __future__ import annotations

from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from builders import a_trace, a_trace_row
from conftest import reference_data
from loadmaster.cli import app
from loadmaster.report.trace_plots import CHARTS, write_trace_plots
from loadmaster.traces import Trace
from loadmaster.traces.inspect import (
    arrivals_by_hour,
    arrivals_by_weekday,
    duration_cdf,
    requested_vs_actual,
    summarize_trace,
    top_user_share,
    user_share_curve,
)

PNG = b"\x89PNG\r\n\x1a\n"


LAB = a_trace(
    [
        a_trace_row("a", user="u1", group="g", submit_s=0.0, duration_s=3600.0, time_limit_s=7200.0, tasks=2),
        a_trace_row("b", user="u1", group="g", submit_s=100.0, duration_s=1800.0, time_limit_s=3600.0),
        a_trace_row("c", user="u2", group="h", submit_s=200.0, duration_s=360.0, gpu_milli_per_task=500),
        a_trace_row(
            "d", user="u3", group="h", submit_s=86_400.0, duration_s=None, status="cancelled", tasks=8
        ),
        a_trace_row(
            "e", user="u4", group="h", submit_s=90_000.0, duration_s=7200.0, tasks=4, gpu_milli_per_task=8000
        ),
    ]
)


@pytest.mark.parametrize(
    ("field", "expected"),
    [
        ("jobs", 5),
        ("users", 4),
        ("groups", 2),
        ("span_s", 90_000.0),
        ("gpu_hours", 2.0 + 0.5 + 0.05 + 64.0),
        ("jobs_with_duration", 4),
        ("statuses", (("completed", 4), ("cancelled", 1))),
        ("time_limit_fraction", 0.4),
        ("median_overestimate", 2.0),
        ("top_user_share", 64.0 / 66.55),
        ("origin_epoch_s", None),
    ],
)
def test_summary_numbers(field: str, expected: object) -> None:
    value = getattr(summarize_trace(LAB), field)
    if isinstance(expected, float):
        assert value == pytest.approx(expected)
    else:
        assert value == expected


def test_size_classes_count_jobs_and_gpu_hours() -> None:
    classes = {c.label: (c.jobs, c.gpu_hours) for c in summarize_trace(LAB).size_classes}
    assert classes == {
        "<1": (1, pytest.approx(0.05)),
        "1": (1, pytest.approx(0.5)),
        "2": (1, pytest.approx(2.0)),
        "8": (1, 0.0),
        "16-32": (1, pytest.approx(64.0)),
    }


def test_duration_percentiles_and_cdf() -> None:
    summary = summarize_trace(LAB)
    assert summary.duration_percentiles_s is not None
    assert dict(summary.duration_percentiles_s)[50] == pytest.approx(
        np.percentile([360, 1800, 3600, 7200], 50)
    )
    values, fraction = duration_cdf(LAB)
    assert values.tolist() == [360.0, 1800.0, 3600.0, 7200.0]
    assert fraction.tolist() == [0.25, 0.5, 0.75, 1.0]


def test_absent_columns_give_none_not_zeros() -> None:
    bare = a_trace([a_trace_row("a", submit_s=0.0), a_trace_row("b", submit_s=10.0)])
    summary = summarize_trace(bare)
    assert summary.users == 0
    assert summary.top_user_share is None
    assert summary.duration_percentiles_s is None
    assert summary.mean_duration_s is None
    assert summary.median_overestimate is None
    assert summary.gpu_hours == 0.0
    assert user_share_curve(bare)[0].size == 0
    assert requested_vs_actual(bare)[0].size == 0


@pytest.mark.parametrize(
    ("fraction", "expected"),
    [(0.1, 0.7), (0.25, 0.7), (0.5, 0.9), (1.0, 1.0)],
)
def test_top_user_share_takes_at_least_one_user(fraction: float, expected: float) -> None:
    rows = [
        a_trace_row(str(i), user=f"u{i}", duration_s=3600.0 * hours) for i, hours in enumerate((7, 2, 1, 0))
    ]
    assert top_user_share(a_trace(rows), fraction) == pytest.approx(expected)


def test_user_share_curve_runs_from_zero_to_one_heaviest_first() -> None:
    x, y = user_share_curve(LAB)
    assert x[0] == 0.0 and y[0] == 0.0
    assert x[-1] == 1.0 and y[-1] == pytest.approx(1.0)
    assert np.all(np.diff(y) >= 0)
    assert np.all(np.diff(np.diff(y)) <= 1e-12)  # heaviest first: the curve is concave


@pytest.mark.parametrize(
    ("meta", "submit_s", "hour", "weekday"),
    [
        ({}, 5 * 3600.0 + 86_400.0 * 9, 5, 2),  # relative: day 9 from the origin is day 2 mod 7
        ({"origin_epoch_s": "0"}, 5 * 3600.0, 5, 3),  # 1970-01-01 was a Thursday
        ({"origin_epoch_s": "3600"}, 23 * 3600.0, 0, 4),  # past midnight UTC: Friday, hour 0
        ({"UnixStartTime": "345600"}, 0.0, 0, 0),  # 1970-01-05 was a Monday
        ({}, -3600.0, 23, 6),  # before the origin: the previous day's last hour
    ],
)
def test_arrival_bins_on_wall_and_relative_clocks(
    meta: dict[str, str], submit_s: float, hour: int, weekday: int
) -> None:
    trace = a_trace([a_trace_row("a", submit_s=submit_s)], **meta)
    assert np.flatnonzero(arrivals_by_hour(trace)).tolist() == [hour]
    assert np.flatnonzero(arrivals_by_weekday(trace)).tolist() == [weekday]
    assert summarize_trace(trace).clock == ("relative clock" if not meta else "UTC")


@pytest.mark.parametrize(
    "trace", [LAB, a_trace([a_trace_row("a")]), a_trace([])], ids=["full", "bare", "empty"]
)
def test_plots_are_written_whatever_the_trace_lacks(trace: Trace, tmp_path: Path) -> None:
    paths = write_trace_plots(trace, tmp_path / "plots")
    assert [p.name for p in paths] == [name for name, _ in CHARTS] + ["overview.png"]
    for path in paths:
        assert path.read_bytes()[:8] == PNG


def test_inspect_command_on_an_swf_log(tmp_path: Path) -> None:
    path = reference_data("swf/lublin_256.swf")
    out = tmp_path / "inspect"
    result = CliRunner().invoke(app, ["trace", "inspect", str(path), "--out", str(out)])
    assert result.exit_code == 0, result.output
    for text in ("10,000 jobs read as swf", "GPU demand by job size", "relative clock", "not in this trace"):
        assert text in result.output
    assert (out / "overview.png").read_bytes()[:8] == PNG
    assert (out / "requested_vs_actual.png").exists()


def test_inspect_default_folder_is_named_after_the_trace(
    tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    path = reference_data("swf/lublin_256.swf")
    monkeypatch.chdir(tmp_path)
    result = CliRunner().invoke(app, ["trace", "inspect", str(path)])
    assert result.exit_code == 0, result.output
    assert (tmp_path / "out" / "inspect-lublin_256" / "gpu_demand.png").exists()


def test_inspect_tiresias(tmp_path: Path) -> None:
    path = reference_data("tiresias/60_job.csv")
    args = ["trace", "inspect", str(path), "--format", "tiresias", "--out", str(tmp_path)]
    result = CliRunner().invoke(app, args)
    assert result.exit_code == 0, result.output
    assert "jobs read as tiresias" in result.output
    assert (tmp_path / "overview.png").exists()
