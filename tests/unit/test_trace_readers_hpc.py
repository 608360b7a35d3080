"""HPC trace readers (SWF, Slurm sacct) and the generic CSV: sample rows, bad rows, convert, round trip.

The samples under tests/fixtures/traces follow each format's public
documentation (the Parallel Workloads Archive's SWF definition, Slurm's
sacct manual page); the expected rows are worked out by hand from them.
"""

from __future__ import annotations

from pathlib import Path

import pytest
from typer.testing import CliRunner

from conftest import reference_data
from loadmaster.cli import app
from loadmaster.traces import SCHEMA, Trace, TraceError, read_parquet, read_trace, write_parquet
from loadmaster.traces.sacct import gang, state, time_limit_s, tres

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
SACCT_HEADER = "JobID|User|Account|Partition|Submit|Start|End|Timelimit|NNodes|AllocTRES|State"
CSV_HEADER = "job_id,submit_s,tasks,gpu_milli_per_task"
SWF_GOOD = "1 0 10 3600 32 3500 1024 32 7200 -1 1 7 2 1 1 -1 -1 -1"
SACCT_GOOD = (
    "9|ann|lab|gpu|2024-03-01T12:00:00|2024-03-01T12:00:10|2024-03-01T13:00:10"
    "|60|1|cpu=2,gres/gpu=1|COMPLETED"
)


def rows_by_id(trace: Trace) -> dict[str, dict[str, object]]:
    return {row["job_id"]: row for row in trace.table.to_pylist()}


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


# --- sacct -------------------------------------------------------------------------------------------

SACCT_EXPECTED = [
    # job_id, submit_s, start_s, end_s, time_limit_s, tasks, gpu_milli, cpu_milli, memory_mib, model, status
    ("1001", 0.0, 5.0, 7205.0, 86400.0, 1, 4000, 8000, 65536, "a100", "completed"),
    ("1002", -1800.0, 600.0, 4200.0, 14400.0, 2, 8000, 16000, 256000, None, "failed"),
    ("1003_7", 300.0, 360.0, 2160.0, 1800.0, 1, 1000, 4000, 16000, None, "cancelled"),
    ("1004+0", 600.0, 630.0, None, None, 3, 1000, 4000, 524288, None, "running"),
    ("1005", 1200.0, None, None, None, 1, 2000, 2000, 8192, None, "unknown"),
    ("1006", 1800.0, 1800.0, 2700.0, 900.0, 1, 0, 1000, 4096, None, "timeout"),
    ("1007", 2400.0, 2460.0, 3060.0, 216000.0, 3, 1000, 2000, 8192, None, "failed"),
]


@pytest.mark.parametrize("expected", SACCT_EXPECTED, ids=[e[0] for e in SACCT_EXPECTED])
def test_sacct_sample_rows(expected: tuple[object, ...]) -> None:
    rows = rows_by_id(read_trace(FIXTURES / "sacct_sample.txt", "sacct"))
    job_id, submit, start, end, limit, tasks, gpu, cpu, memory, model, status = expected
    row = rows[str(job_id)]
    got = (row["submit_s"], row["start_s"], row["end_s"], row["time_limit_s"], row["tasks"])
    assert got == (submit, start, end, limit, tasks)
    got = (row["gpu_milli_per_task"], row["cpu_milli_per_task"], row["memory_mib_per_task"])
    assert got == (gpu, cpu, memory)
    assert (row["gpu_model"], row["status"]) == (model, status)
    if start is not None and end is not None:
        assert row["duration_s"] == end - start


def test_sacct_skips_steps_keeps_arrays_and_het_jobs_and_records_origin() -> None:
    trace = read_trace(FIXTURES / "sacct_sample.txt", "sacct")
    assert [r["job_id"] for r in trace.table.to_pylist()] == [e[0] for e in SACCT_EXPECTED]
    assert trace.report.skipped == 0
    assert trace.meta["origin_epoch_s"] == "1709294400"  # 2024-03-01T12:00:00 read as UTC
    first = trace.table.to_pylist()[0]
    assert (first["user"], first["group"], first["queue"]) == ("alice", "vision", "gpu")


def test_sacct_columns_in_any_order_and_plain_parsable(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "jobs.sacct",
        "State|AllocTRES|Submit|Extra|JobID|",
        "FAILED|gres/gpu=2,node=1|2024-01-01T00:00:00|x|5|",
        "COMPLETED|gres/gpu=1|2024-01-01T00:01:00|y|6|",
    )
    rows = read_trace(path).table.to_pylist()
    assert [(r["job_id"], r["submit_s"], r["tasks"], r["gpu_milli_per_task"], r["status"]) for r in rows] == [
        ("5", 0.0, 1, 2000, "failed"),
        ("6", 60.0, 1, 1000, "completed"),
    ]
    assert rows[0]["start_s"] is None
    assert rows[0]["user"] == ""


@pytest.mark.parametrize(
    ("text", "seconds"),
    [
        ("30", 1800.0),
        ("30:15", 1815.0),
        ("02:00:00", 7200.0),
        ("1-00:00:00", 86400.0),
        ("2-12", 216000.0),
        ("1-02:30", 95400.0),
        ("UNLIMITED", None),
        ("Partition_Limit", None),
        ("", None),
    ],
)
def test_sacct_time_limits(text: str, seconds: float | None) -> None:
    assert time_limit_s(text) == seconds


@pytest.mark.parametrize(
    ("text", "status"),
    [
        ("COMPLETED", "completed"),
        ("CANCELLED by 1000", "cancelled"),
        ("CANCELLED+", "cancelled"),
        ("FAILED", "failed"),
        ("OUT_OF_MEMORY", "failed"),
        ("NODE_FAIL", "failed"),
        ("TIMEOUT", "timeout"),
        ("PREEMPTED", "cancelled"),
        ("RUNNING", "running"),
        ("PENDING", "unknown"),
        ("SOMETHING_NEW", "unknown"),
    ],
)
def test_sacct_states(text: str, status: str) -> None:
    assert state(text) == status


@pytest.mark.parametrize(
    ("gpus", "nodes", "gang_shape"),
    [
        (0, None, (1, 0)),
        (0, 4, (4, 0)),
        (4, None, (1, 4000)),
        (8, None, (1, 8000)),
        (16, None, (16, 1000)),
        (16, 2, (2, 8000)),
        (3, 2, (3, 1000)),
        (4, 1, (1, 4000)),
    ],
)
def test_sacct_gpus_to_gang(gpus: int, nodes: int | None, gang_shape: tuple[int, int]) -> None:
    assert gang(gpus, nodes) == gang_shape


@pytest.mark.parametrize(
    ("text", "gpus", "model", "cpus", "memory_mib", "nodes"),
    [
        ("billing=8,cpu=8,gres/gpu:a100=4,gres/gpu=4,mem=64G,node=1", 4, "a100", 8, 65536.0, 1),
        ("cpu=4,gres/gpu:v100=2", 2, "v100", 4, None, None),
        ("cpu=1,mem=512M", 0, None, 1, 512.0, None),
        ("mem=2048K,gres/gpu=1", 1, None, None, 2.0, None),
        ("mem=1.5T,gres/gpu=3,node=3", 3, None, None, 1.5 * 1024 * 1024, 3),
    ],
)
def test_sacct_tres(
    text: str, gpus: int, model: str | None, cpus: int | None, memory_mib: float | None, nodes: int | None
) -> None:
    got = tres(text, "AllocTRES")
    assert (got.gpus, got.gpu_model, got.cpus, got.memory_mib, got.nodes) == (
        gpus,
        model,
        cpus,
        memory_mib,
        nodes,
    )


SACCT_BAD = [
    # the bad line (replacing fields of SACCT_GOOD), and the field the error must name
    (SACCT_GOOD.replace("2024-03-01T12:00:00", "03/01/24 12:00"), "Submit"),
    (SACCT_GOOD.replace("2024-03-01T12:00:00", "Unknown"), "Submit"),
    (SACCT_GOOD.replace("13:00:10", "11:00:10"), "End"),
    (SACCT_GOOD.replace("|60|", "|1:2:3:4|"), "Timelimit"),
    (SACCT_GOOD.replace("|60|", "|ten|"), "Timelimit"),
    (SACCT_GOOD.replace("gres/gpu=1", "gres/gpu=one"), "AllocTRES"),
    (SACCT_GOOD.replace("cpu=2,gres/gpu=1", "cpu=2,mem=lots"), "AllocTRES"),
    (SACCT_GOOD.replace("cpu=2,gres/gpu=1", "cpu2"), "AllocTRES"),
    (SACCT_GOOD.replace("cpu=2,gres/gpu=1", ""), "AllocTRES"),
    (SACCT_GOOD.replace("|1|", "|two|"), "NNodes"),
    (SACCT_GOOD + "|extra", "fields"),
]


@pytest.mark.parametrize(("line", "field"), SACCT_BAD, ids=[f"{f}-{i}" for i, (_, f) in enumerate(SACCT_BAD)])
def test_sacct_bad_row_stops_naming_file_line_and_field(tmp_path: Path, line: str, field: str) -> None:
    path = write(tmp_path, "bad.sacct", SACCT_HEADER, SACCT_GOOD, line)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert (caught.value.line, caught.value.field) == (3, field)
    assert str(caught.value).startswith(f"{path}:3: {field}: ")


@pytest.mark.parametrize(("line", "field"), SACCT_BAD, ids=[f"{f}-{i}" for i, (_, f) in enumerate(SACCT_BAD)])
def test_sacct_bad_row_skipped_and_counted(tmp_path: Path, line: str, field: str) -> None:
    path = write(tmp_path, "bad.sacct", SACCT_HEADER, SACCT_GOOD, line, SACCT_GOOD.replace("9|", "10|", 1))
    trace = read_trace(path, on_error="skip")
    assert [r["job_id"] for r in trace.table.to_pylist()] == ["9", "10"]
    assert trace.report.skipped == 1
    assert (trace.report.examples[0].line, trace.report.examples[0].field) == (3, field)


@pytest.mark.parametrize(
    ("header", "field"),
    [
        ("JobID|User|Submit", "AllocTRES"),
        ("User|Submit|AllocTRES", "JobID"),
        ("9|ann|lab", "JobID"),  # --noheader output
    ],
)
def test_sacct_header_missing_a_column_is_an_error_whatever_the_policy(
    tmp_path: Path, header: str, field: str
) -> None:
    path = write(tmp_path, "nohead.sacct", header, "1|2|3")
    with pytest.raises(TraceError) as caught:
        read_trace(path, on_error="skip")
    assert (caught.value.line, caught.value.field) == (1, field)
    assert "nohead.sacct" in str(caught.value)


# --- generic CSV ---------------------------------------------------------------------------------------


def test_csv_sample_with_defaults_and_nulls() -> None:
    rows = rows_by_id(read_trace(FIXTURES / "generic_sample.csv"))
    assert (rows["j1"]["user"], rows["j1"]["gpu_model"], rows["j1"]["duration_s"]) == (
        "alice",
        "V100",
        3600.0,
    )
    assert (rows["j2"]["user"], rows["j2"]["group"], rows["j2"]["queue"]) == ("", "", None)
    assert (rows["j2"]["submit_s"], rows["j2"]["tasks"], rows["j2"]["gpu_milli_per_task"]) == (10.5, 4, 500)
    assert rows["j2"]["status"] == "failed"
    assert (rows["j3"]["gpu_milli_per_task"], rows["j3"]["status"]) == (2000, "unknown")
    assert rows["j3"]["start_s"] is None


CSV_BAD = [
    ("j9,abc,1,1000", "submit_s"),
    ("j9,,1,1000", "submit_s"),
    (",0,1,1000", "job_id"),
    ("j9,0,1.5,1000", "tasks"),
    ("j9,0,0,1000", "tasks"),
    ("j9,0,1,1500", "gpu_milli_per_task"),
    ("j9,0,1", "fields"),
]


@pytest.mark.parametrize(("line", "field"), CSV_BAD, ids=[f"{f}-{i}" for i, (_, f) in enumerate(CSV_BAD)])
def test_csv_bad_row_stops_or_is_skipped(tmp_path: Path, line: str, field: str) -> None:
    path = write(tmp_path, "jobs.csv", CSV_HEADER, "j1,0,1,1000", line, "j2,5,2,1000")
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert (caught.value.line, caught.value.field) == (3, field)
    assert str(caught.value).startswith(f"{path}:3: {field}: ")
    trace = read_trace(path, on_error="skip")
    assert [r["job_id"] for r in trace.table.to_pylist()] == ["j1", "j2"]
    assert trace.report.skipped == 1


@pytest.mark.parametrize(
    ("header", "field", "says"),
    [
        ("job_id,submit_s,tasks,gpu_milli_per_task,gpus", "gpus", "allowed: job_id, user, group"),
        ("job_id,submit_s,tasks", "gpu_milli_per_task", "required"),
        ("job_id,submit_s,tasks,gpu_milli_per_task,tasks", "tasks", "twice"),
    ],
)
def test_csv_header_errors_name_the_column(tmp_path: Path, header: str, field: str, says: str) -> None:
    path = write(tmp_path, "jobs.csv", header, "j1,0,1,1000")
    with pytest.raises(TraceError) as caught:
        read_trace(path, on_error="skip")
    assert (caught.value.line, caught.value.field) == (1, field)
    assert says in str(caught.value)


# --- SWF -----------------------------------------------------------------------------------------------


def test_swf_sample_rows_and_header() -> None:
    trace = read_trace(FIXTURES / "swf_sample.swf")
    assert trace.meta["MaxProcs"] == "128"
    rows = rows_by_id(trace)
    assert (rows["1"]["start_s"], rows["1"]["end_s"], rows["1"]["tasks"], rows["1"]["status"]) == (
        10.0,
        3610.0,
        32,
        "completed",
    )
    assert (rows["2"]["start_s"], rows["2"]["tasks"], rows["2"]["status"]) == (None, 16, "cancelled")
    assert (rows["3"]["group"], rows["3"]["queue"], rows["3"]["status"]) == ("", None, "failed")
    assert (rows["4"]["tasks"], rows["4"]["time_limit_s"], rows["4"]["status"]) == (8, None, "completed")


SWF_BAD = [
    ("1 0 10 3600 32", "fields"),
    (SWF_GOOD.replace(" 3600 ", " abc ", 1), "run_time"),
    (SWF_GOOD.replace("1 0 ", "1 nan ", 1), "submit_time"),
    (SWF_GOOD.replace(" 32 3500 1024 32 ", " -1 3500 1024 -1 ", 1), "allocated_processors"),
]


@pytest.mark.parametrize(("line", "field"), SWF_BAD, ids=[f"{f}-{i}" for i, (_, f) in enumerate(SWF_BAD)])
def test_swf_bad_row_stops_or_is_skipped(tmp_path: Path, line: str, field: str) -> None:
    path = write(tmp_path, "jobs.swf", "; MaxProcs: 64", SWF_GOOD, line)
    with pytest.raises(TraceError) as caught:
        read_trace(path)
    assert (caught.value.line, caught.value.field) == (3, field)
    trace = read_trace(path, on_error="skip")
    assert (len(trace), trace.report.skipped, trace.report.examples[0].line) == (1, 1, 3)


def test_swf_lublin_reference_log() -> None:
    trace = read_trace(reference_data("swf/lublin_256.swf"))
    assert len(trace) == 10_000
    assert trace.report.skipped == 0
    assert trace.meta["MaxNodes"] == "256"
    assert max(trace.column("tasks")) <= 256
    assert list(trace.table.column("submit_s").to_pylist()) == sorted(
        trace.table.column("submit_s").to_pylist()
    )


# --- convert and round trip ----------------------------------------------------------------------------


@pytest.mark.parametrize(
    ("name", "args", "jobs"),
    [
        ("sacct_sample.txt", ["--format", "sacct"], 7),
        ("generic_sample.csv", [], 3),
        ("swf_sample.swf", [], 4),
    ],
)
def test_trace_convert_cli_and_parquet_round_trip(
    tmp_path: Path, name: str, args: list[str], jobs: int
) -> None:
    out = tmp_path / "jobs.parquet"
    result = CliRunner().invoke(app, ["trace", "convert", str(FIXTURES / name), "-o", str(out), *args])
    assert result.exit_code == 0, result.output
    assert f"Wrote {jobs} jobs" in result.output
    again = read_parquet(out)
    original = read_trace(FIXTURES / name, args[1] if args else None)
    assert again.table.schema.remove_metadata() == SCHEMA.remove_metadata()
    assert again.table.to_pylist() == original.table.to_pylist()
    assert again.meta == original.meta


def test_convert_skip_reports_bad_rows(tmp_path: Path) -> None:
    path = write(tmp_path, "jobs.sacct", SACCT_HEADER, SACCT_GOOD, SACCT_GOOD.replace("|60|", "|ten|"))
    out = tmp_path / "jobs.parquet"
    result = CliRunner().invoke(app, ["trace", "convert", str(path), "-o", str(out), "--on-error", "skip"])
    assert result.exit_code == 0, result.output
    assert "1 bad rows skipped" in result.output
    assert "Timelimit" in result.output
    assert len(read_parquet(out)) == 1


def test_write_then_read_parquet_keeps_sacct_origin(tmp_path: Path) -> None:
    trace = read_trace(FIXTURES / "sacct_sample.txt", "sacct")
    write_parquet(trace, tmp_path / "t.parquet")
    assert read_parquet(tmp_path / "t.parquet").meta["origin_epoch_s"] == "1709294400"
