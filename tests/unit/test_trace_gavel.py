"""The Gavel ``.trace`` reader (10 tab-separated fields, no header; Gavel's ``parse_trace``)."""

from __future__ import annotations

from pathlib import Path

import pytest

from loadmaster.traces import TraceError, read_trace
from loadmaster.traces.formats import detect

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SMALL = FIXTURES / "gavel_small_test.trace"
"""stanford-futuredata/gavel scheduler/traces/physical_cluster/small_test.trace at c4fa400 (MIT)."""

GOOD = "\t".join(
    (
        "ResNet-50 (batch size 64)",
        "python3 main.py",
        "image_classification/imagenet",
        "--num_minibatches",
        "1",
        "2931",
        "4",
        "1",
        "-1.000000",
        "12.5",
    )
)


def test_reads_gavel_shipped_trace() -> None:
    trace = read_trace(SMALL)  # detected from .trace
    assert detect(SMALL) == "gavel"
    ids = list(trace.column("job_id"))
    assert ids == [str(i) for i in range(len(ids))] and len(ids) == trace.report.rows
    # First line: Transformer (batch size 128), scale_factor 2, arrival 0.
    assert trace.column("tasks")[0] == 2 and trace.column("submit_s")[0] == 0.0
    assert set(trace.column("status")) == {"unknown"}
    assert all(v is None or v != v for v in trace.column("duration_s"))  # null: Gavel gives steps, not time


def test_reads_one_line(tmp_path: Path) -> None:
    path = tmp_path / "one.trace"
    path.write_text(GOOD + "\n\n")
    trace = read_trace(path, "gavel")
    assert (list(trace.column("job_id")), trace.column("tasks")[0], trace.column("submit_s")[0]) == (
        ["0"],
        4,
        12.5,
    )


def _swap(index: int, value: str) -> str:
    fields = GOOD.split("\t")
    fields[index] = value
    return "\t".join(fields)


@pytest.mark.parametrize(
    ("line", "field", "message"),
    [
        ("\t".join(GOOD.split("\t")[:7]), "fields", "10 tab-separated fields"),
        (GOOD.replace("\t", " ", 1), "fields", "this one has 9"),
        (_swap(4, "yes"), "needs_data_dir", "0 or 1"),
        (_swap(5, "0"), "total_steps", "whole number > 0"),
        (_swap(5, "2.5"), "total_steps", "whole number > 0"),
        (_swap(6, "0"), "scale_factor", ">= 1"),
        (_swap(7, "x"), "priority_weight", "must be a number"),
        (_swap(8, "inf"), "SLO", "finite"),
        (_swap(9, "-3"), "arrival_time", ">= 0"),
        (_swap(0, " "), "job_type", "name the job type"),
    ],
)
def test_malformed_line_names_file_line_field(tmp_path: Path, line: str, field: str, message: str) -> None:
    path = tmp_path / "bad.trace"
    path.write_text(f"{GOOD}\n{line}\n")
    with pytest.raises(TraceError, match=message) as caught:
        read_trace(path)
    assert (caught.value.source, caught.value.line, caught.value.field) == (str(path), 2, field)
    skipped = read_trace(path, on_error="skip").report
    assert (skipped.rows, skipped.skipped) == (1, 1)
