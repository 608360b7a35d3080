"""GPU-cluster trace readers (openb, PAI, Philly, Helios, Tiresias): sample rows, bad rows, real files.

The samples under tests/fixtures/traces follow each format's public
documentation (alibaba/clusterdata's READMEs for cluster-trace-gpu-v2020,
msr-fiddle/philly-traces, S-Lab-System-Group/HeliosData); the values are made
up and the expected rows are worked out by hand from the documented rules.
"""

from __future__ import annotations

import json
from collections import Counter
from pathlib import Path

import pytest

from conftest import reference_data
from loadmaster.traces import FORMATS, Trace, TraceError, read_trace
from loadmaster.traces.openb import pod_gpu_milli, read_openb_nodes
from loadmaster.traces.pai import job_table_beside, pai_gpu_milli, pai_reader, read_pai, read_pai_jobs
from loadmaster.traces.philly import host_gang
from loadmaster.traces.rows import RowError
from loadmaster.traces.source import Lines
from loadmaster.traces.trace import Format, read_lines

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "traces"
OPENB_HEADER = (
    "name,cpu_milli,memory_mib,num_gpu,gpu_milli,gpu_spec,qos,pod_phase,"
    "creation_time,deletion_time,scheduled_time"
)
HELIOS_HEADER = (
    "job_id,user,vc,jobname,gpu_num,cpu_num,node_num,state,submit_time,start_time,end_time,duration,queue"
)
TIRESIAS_HEADER = "job_id,num_gpu,submit_time,iterations,model_name,duration,interval"


def rows_by_id(trace: Trace) -> dict[str, dict[str, object]]:
    return {str(row["job_id"]): row for row in trace.table.to_pylist()}


def write(tmp_path: Path, name: str, *lines: str) -> Path:
    path = tmp_path / name
    path.write_text("\n".join(lines) + "\n", encoding="utf-8")
    return path


def pick(row: dict[str, object], *names: str) -> tuple[object, ...]:
    return tuple(row[name] for name in names)


# --- openb -------------------------------------------------------------------------------------------

OPENB_CASES = [
    # pod line, (tasks, gpu_milli, start_s, end_s, duration_s, queue, gpu_model, status)
    ("p0,8000,16384,1,460,,LS,Running,10,110,12", (1, 460, 12.0, 110.0, 98.0, "LS", None, "running")),
    ("p1,4000,8192,0,0,,BE,Succeeded,0,50,0", (1, 0, 0.0, 50.0, 50.0, "BE", None, "completed")),
    ("p2,32000,65536,8,1000,V100M32,LS,Failed,5,20,6", (1, 8000, 6.0, 20.0, 14.0, "LS", "V100M32", "failed")),
    (
        "p3,1000,1024,1,1000,V100M16|V100M32,BE,Pending,7,9,",
        (1, 1000, None, 9.0, None, "BE", "V100M16|V100M32", "cancelled"),
    ),
    ("p4,1000,1024,0,500,,LS,Unknown,7,9,8", (1, 0, 8.0, 9.0, 1.0, "LS", None, "unknown")),
]


@pytest.mark.parametrize(("line", "expected"), OPENB_CASES, ids=[c[0][:2] for c in OPENB_CASES])
def test_openb_pod_rows(tmp_path: Path, line: str, expected: tuple[object, ...]) -> None:
    row = read_trace(write(tmp_path, "pods.csv", OPENB_HEADER, line), "openb").table.to_pylist()[0]
    names = ("tasks", "gpu_milli_per_task", "start_s", "end_s", "duration_s", "queue", "gpu_model", "status")
    assert pick(row, *names) == expected


@pytest.mark.parametrize(
    ("num_gpu", "gpu_milli", "expected"),
    [(0, 300, 0), (1, 250, 250), (1, 1000, 1000), (2, 1000, 2000), (8, 1000, 8000)],
)
def test_openb_gpu_share(num_gpu: int, gpu_milli: int, expected: int) -> None:
    assert pod_gpu_milli(num_gpu, gpu_milli) == expected


def test_openb_pod_list_without_creation_times_is_read(tmp_path: Path) -> None:
    # The multigpu lists of the FGD artifact (openb_pod_list_multigpu*.csv) have five columns only.
    path = write(tmp_path, "pods.csv", "name,cpu_milli,memory_mib,num_gpu,gpu_milli", "p0,12000,16384,2,1000")
    trace = read_trace(path, "openb")
    row = trace.table.to_pylist()[0]
    assert pick(row, "job_id", "submit_s", "gpu_milli_per_task", "start_s", "status") == (
        "p0",
        0.0,
        2000,
        None,
        "unknown",
    )
    assert trace.meta["submit_s"].startswith("no creation_time column")


def test_openb_real_pod_list_reads_every_pod() -> None:
    trace = read_trace(reference_data("openb/openb_pod_list_default.csv"), "openb")
    assert len(trace) == 8152
    assert trace.report.skipped == 0
    statuses = Counter(trace.table.column("status").to_pylist())
    assert statuses == {"running": 5193, "failed": 1870, "cancelled": 897, "completed": 192}
    milli = Counter(trace.table.column("gpu_milli_per_task").to_pylist())
    assert milli[0] == 1088 and milli[8000] == 44 and milli[4000] == 15 and milli[2000] == 16


def test_openb_real_node_list() -> None:
    nodes = read_openb_nodes(reference_data("openb/openb_node_list_gpu_node.csv"))
    assert len(nodes) == 1213
    assert sum(node.gpus for node in nodes) == 6212
    assert nodes[0].name == "openb-node-0000" and nodes[0].gpu_model == "P100"
    assert {node.gpu_model for node in nodes} >= {"V100M16", "V100M32", "T4", "A10"}


def test_openb_node_list_bad_line_names_file_line_and_field(tmp_path: Path) -> None:
    path = write(
        tmp_path, "nodes.csv", "sn,cpu_milli,memory_mib,gpu,model", "n0,64000,262144,8,V100", "n1,x,1,1,T4"
    )
    with pytest.raises(TraceError) as caught:
        read_openb_nodes(path)
    assert (caught.value.source, caught.value.line, caught.value.field) == (str(path), 3, "cpu_milli")


# --- PAI ---------------------------------------------------------------------------------------------

PAI_EXPECTED = [
    # job_id, user, submit_s, start_s, tasks, gpu_milli, cpu_milli, memory_mib, gpu_model, status
    ("j0001/tensorflow", "user_a", 1739100.0, 1739162.0, 1, 500, 6000, 30000, "MISC", "completed"),
    ("j0002/ps", "user_b", 1739900.0, 1740000.0, 1, 0, 12000, 40960, None, "completed"),
    ("j0002/worker", "user_b", 1739900.0, 1740010.0, 4, 1000, 8000, 20480, "V100", "completed"),
    ("j0003/worker", "user_a", 1749990.0, 1750000.0, 2, 8000, 4000, 10240, "V100M32", "failed"),
    ("j0004/PyTorchWorker", "", 1760000.0, 1760000.0, 1, 250, 6000, 30720, "T4", "running"),
    ("j0005/tensorflow", "user_c", 1770000.0, None, 1, 2000, 2000, 5120, "P100", "unknown"),
]
PAI_COLUMNS = (
    "user",
    "submit_s",
    "start_s",
    "tasks",
    "gpu_milli_per_task",
    "cpu_milli_per_task",
    "memory_mib_per_task",
    "gpu_model",
    "status",
)


def read_pai_with_job_table(task_table: Path, job_table: Path | None) -> Trace:
    fmt = Format("pai", "PAI with an explicit job table", (), pai_reader(job_table))
    return read_lines(task_table, fmt, "skip")


@pytest.mark.parametrize("expected", PAI_EXPECTED, ids=[e[0] for e in PAI_EXPECTED])
def test_pai_sample_rows_with_job_table(expected: tuple[object, ...]) -> None:
    trace = read_pai_with_job_table(FIXTURES / "pai_task_table.csv", FIXTURES / "pai_job_table.csv")
    assert trace.report.skipped == 0
    assert pick(rows_by_id(trace)[str(expected[0])], *PAI_COLUMNS) == expected[1:]


def test_pai_without_job_table_uses_launch_as_submit_and_skips_unlaunched() -> None:
    trace = read_pai_with_job_table(FIXTURES / "pai_task_table.csv", None)
    rows = rows_by_id(trace)
    assert rows["j0001/tensorflow"]["submit_s"] == rows["j0001/tensorflow"]["start_s"] == 1739162.0
    assert rows["j0001/tensorflow"]["user"] == ""
    assert "j0005/tensorflow" not in rows
    assert trace.report.skipped == 1 and trace.report.examples[0].field == "start_time"
    assert trace.meta["job_table"] == "no"


def test_pai_finds_the_job_table_beside_the_task_table() -> None:
    task_table = FIXTURES / "pai_task_table.csv"
    assert job_table_beside(task_table) == FIXTURES / "pai_job_table.csv"
    with task_table.open(encoding="utf-8", newline="") as handle:
        lines = Lines(handle, path=task_table)
        meta: dict[str, str] = {"source": task_table.name}
        rows = [row for _, row in read_pai(lines, meta)]
    assert meta["job_table"] == "yes"
    assert [row["user"] for row in rows if not isinstance(row, RowError)][:2] == ["user_a", "user_b"]


def test_pai_task_table_read_by_name_picks_up_its_job_table() -> None:
    trace = read_trace(FIXTURES / "pai_task_table.csv", "pai", "skip")
    assert trace.meta["job_table"] == "yes"
    assert "user_a" in trace.table.column("user").to_pylist()


def test_pai_reads_a_header_when_there_is_one(tmp_path: Path) -> None:
    header = "job_name,task_name,inst_num,status,start_time,end_time,plan_cpu,plan_mem,plan_gpu,gpu_type"
    path = write(tmp_path, "tasks.csv", header, "a,worker,2.0,Terminated,10.0,20.0,100.0,1.0,50.0,T4")
    assert pick(read_trace(path, "pai").table.to_pylist()[0], "job_id", "tasks") == ("a/worker", 2)


@pytest.mark.parametrize(
    ("plan_gpu", "milli"),
    [("", 0), ("0", 0), ("50.0", 500), ("33.3", 333), ("100", 1000), ("800.0", 8000), ("150", 2000)],
)
def test_pai_gpu_percent_to_milli(plan_gpu: str, milli: int) -> None:
    assert pai_gpu_milli(plan_gpu) == milli


def test_pai_job_table_bad_line_names_file_line_and_field(tmp_path: Path) -> None:
    path = write(tmp_path, "pai_job_table.csv", "j1,i1,u1,Terminated,1.0,2.0", "j2,i2,u2,Terminated,soon,3.0")
    with pytest.raises(TraceError) as caught:
        read_pai_jobs(path)
    assert (caught.value.line, caught.value.field) == (2, "start_time")


# --- Philly ------------------------------------------------------------------------------------------

PHILLY_EXPECTED = [
    # job_id, user, group, submit_s, start_s, end_s, duration_s, tasks, gpu_milli, status
    ("application_1_0001", "u01", "vc01", 0.0, 30.0, 7311.0, 7281.0, 2, 8000, "completed"),
    ("application_1_0002", "u02", "vc02", 2841.0, 2901.0, 3501.0, 600.0, 12, 1000, "failed"),
    ("application_1_0004", "u03", "vc03", 6471.0, 6501.0, None, None, 1, 1000, "running"),
    ("application_1_0005", "u04", "vc03", -699.0, None, None, None, 1, 2000, "cancelled"),
]
PHILLY_COLUMNS = (
    "user",
    "group",
    "submit_s",
    "start_s",
    "end_s",
    "duration_s",
    "tasks",
    "gpu_milli_per_task",
    "status",
)


@pytest.mark.parametrize("expected", PHILLY_EXPECTED, ids=[e[0] for e in PHILLY_EXPECTED])
def test_philly_sample_rows(expected: tuple[object, ...]) -> None:
    trace = read_trace(FIXTURES / "philly_sample.json", "philly", on_error="skip")
    assert pick(rows_by_id(trace)[str(expected[0])], *PHILLY_COLUMNS) == expected[1:]
    assert trace.meta["origin"] == "2017-10-07 01:11:39"


def test_philly_job_without_attempts_is_a_bad_row_naming_its_line_and_index() -> None:
    with pytest.raises(TraceError) as caught:
        read_trace(FIXTURES / "philly_sample.json", "philly")
    assert (caught.value.line, caught.value.field) == (41, "attempts")
    assert "job #2" in str(caught.value)
    skipped = read_trace(FIXTURES / "philly_sample.json", "philly", on_error="skip").report
    assert (skipped.rows, skipped.skipped) == (4, 1)


def test_philly_one_line_file_reads_like_the_pretty_one(tmp_path: Path) -> None:
    jobs = json.loads((FIXTURES / "philly_sample.json").read_text(encoding="utf-8"))
    path = write(tmp_path, "one_line.json", json.dumps(jobs))
    one_line = read_trace(path, "philly", on_error="skip")
    pretty = read_trace(FIXTURES / "philly_sample.json", "philly", on_error="skip")
    assert one_line.table.equals(pretty.table)


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('{"jobid": "a"}', "JSON array"),
        ('[{"jobid": "a", "submitted_time": "2017-10-07 01:00:00"', "ends inside"),
    ],
)
def test_philly_file_that_is_not_an_array_stops(tmp_path: Path, text: str, message: str) -> None:
    with pytest.raises(TraceError, match=message):
        read_trace(write(tmp_path, "log.json", text), "philly", on_error="skip")


PHILLY_BAD = [
    # element text, field
    ('{"jobid": "b", "submitted_time": "yesterday", "attempts": []}', "submitted_time"),
    ('{"jobid": "b", "submitted_time": "2017-10-07 01:00:00", "attempts": [], }', "json"),
    ('{"jobid": "b", "submitted_time": "2017-10-07 01:00:00", "attempts": "many"}', "attempts"),
    ("42", "job"),
    (
        '{"jobid": "b", "submitted_time": "2017-10-07 01:00:00", "attempts": [{"detail": [{"gpus": 3}]}]}',
        "detail",
    ),
]


@pytest.mark.parametrize(("element", "field"), PHILLY_BAD, ids=[b[1] for b in PHILLY_BAD])
def test_philly_bad_jobs(tmp_path: Path, element: str, field: str) -> None:
    good = (
        '{"jobid": "a", "user": "u", "vc": "v", "status": "Pass", "submitted_time": "2017-10-07 00:00:00",'
        ' "attempts": [{"start_time": "2017-10-07 00:00:01", "end_time": "2017-10-07 00:01:01",'
        ' "detail": [{"ip": "m1", "gpus": ["gpu0"]}]}]}'
    )
    path = write(tmp_path, "log.json", "[", good + ",", element, "]")
    with pytest.raises(TraceError) as caught:
        read_trace(path, "philly")
    assert (caught.value.line, caught.value.field) == (3, field)
    report = read_trace(path, "philly", on_error="skip").report
    assert (report.rows, report.skipped) == (1, 1)


@pytest.mark.parametrize(("hosts", "expected"), [([8], (1, 8000)), ([8, 8], (2, 8000)), ([8, 4], (12, 1000))])
def test_philly_tasks_per_host_when_even(hosts: list[int], expected: tuple[int, int]) -> None:
    assert host_gang(hosts) == expected


# --- Helios ------------------------------------------------------------------------------------------

HELIOS_EXPECTED = [
    # job_id, group, submit_s, start_s, end_s, duration_s, tasks, gpu_milli, cpu_milli, status
    ("2001", "vcX01", 0.0, 2.0, 7202.0, 7200.0, 1, 1000, 4000, "completed"),
    ("2002", "vcY02", 60.0, 660.0, 900.0, 240.0, 2, 8000, 32000, "failed"),
    ("2003", "vcX01", 150.0, None, None, None, 1, 0, 8000, "cancelled"),
    ("2004", "vcY02", 180.0, 180.0, 86580.0, 86400.0, 2, 6000, 24000, "timeout"),
    ("2005", "vcY02", 240.0, 250.0, 3850.0, 3600.0, 1, 8000, 32000, "failed"),
]
HELIOS_COLUMNS = (
    "group",
    "submit_s",
    "start_s",
    "end_s",
    "duration_s",
    "tasks",
    "gpu_milli_per_task",
    "cpu_milli_per_task",
    "status",
)


@pytest.mark.parametrize("expected", HELIOS_EXPECTED, ids=[e[0] for e in HELIOS_EXPECTED])
def test_helios_sample_rows(expected: tuple[object, ...]) -> None:
    trace = read_trace(FIXTURES / "helios_sample.csv", "helios")
    assert pick(rows_by_id(trace)[str(expected[0])], *HELIOS_COLUMNS) == expected[1:]
    assert trace.meta["origin_epoch_s"] == "1591728000"
    assert all(row["queue"] is None for row in trace.table.to_pylist())


def test_helios_without_optional_columns(tmp_path: Path) -> None:
    path = write(tmp_path, "log.csv", "job_id,gpu_num,submit_time", "7,4,2020-06-09 18:41:01")
    row = read_trace(path, "helios").table.to_pylist()[0]
    assert pick(row, "user", "group", "tasks", "gpu_milli_per_task", "status") == ("", "", 1, 4000, "unknown")


# --- Tiresias ----------------------------------------------------------------------------------------


def test_tiresias_real_testbed_trace() -> None:
    trace = read_trace(reference_data("tiresias/60_job.csv"), "tiresias")
    assert len(trace) == 60
    assert Counter(trace.table.column("tasks").to_pylist()) == {1: 30, 2: 10, 4: 10, 8: 10}
    first = trace.table.to_pylist()[0]
    assert pick(first, "job_id", "submit_s", "duration_s", "gpu_milli_per_task", "status") == (
        "0",
        0.0,
        164.0,
        1000,
        "unknown",
    )


def test_tiresias_start_time_when_given(tmp_path: Path) -> None:
    header = "job_id,num_gpu,submit_time,start_time,duration,model_size,aggr_interval,model_name,model_scale"
    path = write(tmp_path, "tf_job.csv", header, "10,12,11,14,20,400,0,vgg19,1")
    row = read_trace(path, "tiresias").table.to_pylist()[0]
    assert pick(row, "submit_s", "start_s", "end_s", "duration_s", "tasks") == (11.0, 14.0, 34.0, 20.0, 12)


def test_tiresias_duration_list_is_not_a_job_trace(tmp_path: Path) -> None:
    with pytest.raises(TraceError) as caught:
        read_trace(write(tmp_path, "yarn-gput1000.csv", "duration", "121"), "tiresias")
    assert (caught.value.line, caught.value.field) == (1, "job_id")
    assert "yarn-gput" in str(caught.value)


# --- bad rows, every CSV format -----------------------------------------------------------------------

BAD_ROWS = [
    # format, header, good line, bad line, field
    (
        "openb",
        OPENB_HEADER,
        "p0,1000,1024,1,500,,LS,Running,0,9,1",
        "p1,1000,1024,one,500,,LS,Running,0,9,1",
        "num_gpu",
    ),
    (
        "openb",
        OPENB_HEADER,
        "p0,1000,1024,1,500,,LS,Running,0,9,1",
        "p1,1000,1024,1,1500,,LS,Running,0,9,1",
        "gpu_milli",
    ),
    (
        "openb",
        OPENB_HEADER,
        "p0,1000,1024,1,500,,LS,Running,0,9,1",
        "p1,1000,1024,2,500,,LS,Running,0,9,1",
        "gpu_milli",
    ),
    (
        "openb",
        OPENB_HEADER,
        "p0,1000,1024,1,500,,LS,Running,0,9,1",
        "p1,1000,1024,1,500,,LS,Running,0,3,5",
        "deletion_time",
    ),
    ("openb", OPENB_HEADER, "p0,1000,1024,1,500,,LS,Running,0,9,1", "p1,1000,1024,1,500", "fields"),
    (
        "helios",
        HELIOS_HEADER,
        "1,u,v,n,1,1,1,COMPLETED,2020-06-09 18:41:01,,,,",
        "2,u,v,n,1,1,1,FAILED,noon,,,,",
        "submit_time",
    ),
    (
        "helios",
        HELIOS_HEADER,
        "1,u,v,n,1,1,1,COMPLETED,2020-06-09 18:41:01,,,,",
        "2,u,v,n,-1,1,1,FAILED,2020-06-09 18:41:01,,,,",
        "gpu_num",
    ),
    (
        "helios",
        HELIOS_HEADER,
        "1,u,v,n,1,1,1,COMPLETED,2020-06-09 18:41:01,,,,",
        "2,u,v,n,1,1,1,FAILED,2020-06-09 18:41:01,2020-06-09 18:42:00,2020-06-09 18:41:30,,",
        "end_time",
    ),
    ("tiresias", TIRESIAS_HEADER, "0,1,0,606,vgg19,164,30", "1,1.5,30,133,vgg11,147,23", "num_gpu"),
    ("tiresias", TIRESIAS_HEADER, "0,1,0,606,vgg19,164,30", "1,1,soon,133,vgg11,147,23", "submit_time"),
    ("tiresias", TIRESIAS_HEADER, "0,1,0,606,vgg19,164,30", "1,1,30,133,vgg11,-5,23", "duration_s"),
    (
        "pai",
        "",
        "a,w,1.0,Terminated,1.0,2.0,100.0,1.0,50.0,T4",
        "b,w,0,Terminated,1.0,2.0,100.0,1.0,50.0,T4",
        "inst_num",
    ),
    (
        "pai",
        "",
        "a,w,1.0,Terminated,1.0,2.0,100.0,1.0,50.0,T4",
        "b,w,1.0,Terminated,1.0,2.0,100.0,1.0,-50,T4",
        "plan_gpu",
    ),
    (
        "pai",
        "",
        "a,w,1.0,Terminated,1.0,2.0,100.0,1.0,50.0,T4",
        "b,w,1.0,Terminated,5.0,2.0,100.0,1.0,50.0,T4",
        "end_time",
    ),
]


@pytest.mark.parametrize(
    ("fmt", "header", "good", "bad", "field"), BAD_ROWS, ids=[f"{b[0]}-{b[4]}" for b in BAD_ROWS]
)
def test_bad_row_stops_with_file_line_field_or_is_skipped(
    tmp_path: Path, fmt: str, header: str, good: str, bad: str, field: str
) -> None:
    lines = [header, good, bad] if header else [good, bad]
    path = write(tmp_path, f"{fmt}.csv", *lines)
    with pytest.raises(TraceError) as caught:
        read_trace(path, fmt)
    assert (caught.value.source, caught.value.line, caught.value.field) == (str(path), len(lines), field)
    report = read_trace(path, fmt, on_error="skip").report
    assert (report.rows, report.skipped) == (1, 1)


@pytest.mark.parametrize("fmt", ["openb", "helios", "tiresias"])
def test_missing_required_column_stops_at_the_header(tmp_path: Path, fmt: str) -> None:
    with pytest.raises(TraceError) as caught:
        read_trace(write(tmp_path, "t.csv", "name,job,when", "a,b,c"), fmt, on_error="skip")
    assert caught.value.line == 1
    assert "header" in str(caught.value)


def test_gpu_formats_are_registered() -> None:
    assert {"openb", "pai", "philly", "helios", "tiresias"} <= set(FORMATS)


# --- Pollux ------------------------------------------------------------------------------------------


def test_pollux_workload_rows_and_the_note_on_run_times() -> None:
    trace = read_trace(FIXTURES / "pollux_workload_sample.csv", "pollux")
    rows = rows_by_id(trace)
    assert len(rows) == 6
    assert pick(rows["imagenet-11"], "submit_s", "tasks", "gpu_milli_per_task", "duration_s", "status") == (
        1604.0,
        32,
        1000,
        None,
        "unknown",
    )
    assert "add a duration column" in trace.meta["duration_s"]


def test_pollux_run_times_come_from_a_duration_column(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "w.csv",
        "name,time,application,num_replicas,batch_size,duration",
        "ncf-2,135,ncf,1,32768,600",
    )
    trace = read_trace(path, "pollux")
    assert trace.table.to_pylist()[0]["duration_s"] == 600.0
    assert "duration_s" not in trace.meta


@pytest.mark.parametrize(("line", "field"), [("a,soon,ncf,1,1", "time"), ("a,1,ncf,0,1", "num_replicas")])
def test_pollux_bad_row_names_the_field(tmp_path: Path, line: str, field: str) -> None:
    path = write(tmp_path, "w.csv", "name,time,application,num_replicas,batch_size", line)
    with pytest.raises(TraceError) as caught:
        read_trace(path, "pollux")
    assert (caught.value.line, caught.value.field) == (2, field)


# --- one published sample per format ------------------------------------------------------------------

SAMPLES = {
    "swf": "swf_sample.swf",
    "sacct": "sacct_sample.txt",
    "csv": "generic_sample.csv",
    "openb": "openb_pod_list_sample.csv",
    "pai": "pai_task_table.csv",
    "philly": "philly_sample.json",
    "helios": "helios_sample.csv",
    "tiresias": "tiresias_60_job_sample.csv",
    "gavel": "gavel_small_test.trace",
    "pollux": "pollux_workload_sample.csv",
}


def test_every_format_has_a_sample_and_a_row_in_the_docs() -> None:
    assert set(SAMPLES) == set(FORMATS)
    docs = (Path(__file__).resolve().parents[2] / "docs" / "traces.md").read_text()
    for name in FORMATS:
        assert f"| `{name}` |" in docs, f"docs/traces.md's format table lacks {name}"
        assert SAMPLES[name] in (FIXTURES / "README.md").read_text(), f"fixtures README lacks {SAMPLES[name]}"


@pytest.mark.parametrize("fmt", sorted(SAMPLES))
def test_every_sample_is_read(fmt: str) -> None:
    trace = read_trace(FIXTURES / SAMPLES[fmt], fmt, on_error="skip")
    assert len(trace) >= 2


def test_the_openb_samples_keep_gpu_models_and_read_without_creation_times() -> None:
    models = read_trace(FIXTURES / "openb_pod_list_sample.csv", "openb").table.column("gpu_model").to_pylist()
    assert "V100M16|V100M32" in models and "T4" in models
    multigpu = read_trace(FIXTURES / "openb_pod_list_multigpu_sample.csv", "openb")
    assert multigpu.table.column("submit_s").to_pylist() == [0.0, 0.0]
