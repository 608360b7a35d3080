"""Errors a user can cause: one line naming the option, file or field, advice that exists, no traceback."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest

from loadmaster.cli import main
from loadmaster.cli.simulate import readable_step


def _run(
    args: list[str], capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> tuple[int, str]:
    """Run the real entry point (its error handling included); the exit code and everything printed."""
    monkeypatch.setattr(sys, "argv", ["loadmaster", *args])
    code = 0
    try:
        main()
    except SystemExit as exc:
        code = int(exc.code or 0)
    captured = capsys.readouterr()
    return code, captured.out + captured.err


@pytest.fixture
def bad_swf(tmp_path: Path) -> Path:
    path = tmp_path / "bad.swf"
    good = "1 0 10 100 4 -1 -1 4 200 -1 1 1 1 -1 -1 -1 -1 -1"
    path.write_text(f"{good}\n2 5 10 100 4\n")
    return path


def test_bad_trace_row_advises_an_option_simulate_accepts(
    bad_swf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, text = _run(["simulate", "--trace", str(bad_swf), "--profiles", "fifo"], capsys, monkeypatch)
    assert code == 2
    assert f"{bad_swf}:2" in text and "--on-error skip" in text and "Traceback" not in text
    out = tmp_path / "out"
    args = [
        "simulate",
        "--trace",
        str(bad_swf),
        "--profiles",
        "fifo",
        "--on-error",
        "skip",
        "--out",
        str(out),
    ]
    code, text = _run(args, capsys, monkeypatch)
    assert code == 0, text
    assert (out / "metrics.json").is_file()


def test_jain_says_there_is_nothing_to_compare_with_one_user(
    bad_swf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    args = ["simulate", "--trace", str(bad_swf), "--profiles", "fifo", "--on-error", "skip"]
    code, text = _run([*args, "--out", str(tmp_path / "o")], capsys, monkeypatch)
    assert code == 0, text
    assert "fewer than two users" in text


@pytest.mark.parametrize(
    ("args", "named"),
    [
        (["--jobs", "-3"], "--jobs"),
        (["--jobs", "0"], "--jobs"),
        (["--load", "0"], "--load"),
        (["--load", "-1"], "--load"),
        (["--seed", "-1"], "--seed"),
        (["--workload-seed", "-2"], "--workload-seed"),
        (["--period", "0"], "--period"),
        (["--on-error", "maybe", "--trace", "x.swf"], "--on-error"),
        (["--on-error", "skip"], "--on-error"),
        (["--explain", "nope"], "--explain"),
        (["--profiles", "fifo,nosuch"], "--profiles"),
    ],
)
def test_simulate_usage_errors_name_the_option(
    args: list[str], named: str, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    code, text = _run(["simulate", "--jobs", "50", "--profiles", "fifo", *args], capsys, monkeypatch)
    assert code == 2, text
    assert named in text
    assert "Traceback" not in text and "sample_lab_workload" not in text


def test_inspect_of_an_empty_trace_is_an_error(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    empty = tmp_path / "empty.swf"
    empty.write_text("")
    code, text = _run(["trace", "inspect", str(empty), "--out", str(tmp_path / "o")], capsys, monkeypatch)
    assert code == 2
    assert f"{empty}: no jobs to read: the file has no job rows" in text
    assert not (tmp_path / "o").exists()


def test_kube_dry_run_without_a_kubeconfig_names_the_option(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    monkeypatch.delenv("KUBERNETES_SERVICE_HOST", raising=False)
    monkeypatch.setenv("HOME", str(tmp_path))
    code, text = _run(["kube", "dry-run"], capsys, monkeypatch)
    assert code == 2
    assert "--kubeconfig" in text and "Traceback" not in text
    assert len(text.strip().splitlines()) == 1
    code, text = _run(["kube", "dry-run", "--kubeconfig", str(tmp_path / "none")], capsys, monkeypatch)
    assert code == 2
    assert f"{tmp_path / 'none'}: --kubeconfig: no such file" in text


@pytest.mark.parametrize(
    ("raw", "shown"),
    [
        (
            "waiting: [backfill] wait: reserved from t=141368s on a30-005; now: gpu: want 1 on one node",
            "waits (backfill): reserved from 39.27 h on a30-005; now: gpu: want 1 on one node",
        ),
        ("waiting: [fit] unschedulable: gpu: want 4", "cannot start now (fit): gpu: want 4"),
        ("started on n1", "started on n1"),
    ],
)
def test_explain_speaks_hours_and_names_the_plugin_once(raw: str, shown: str) -> None:
    assert readable_step(raw) == shown


def test_rejected_jobs_are_said_under_the_table(
    bad_swf: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], monkeypatch: pytest.MonkeyPatch
) -> None:
    """nsml's resource-types plugin refuses jobs that name no resource type (a replayed SWF trace)."""
    args = ["simulate", "--trace", str(bad_swf), "--profiles", "nsml", "--on-error", "skip"]
    code, text = _run([*args, "--out", str(tmp_path / "o")], capsys, monkeypatch)
    assert code == 0, text
    assert "nsml: 1 of 1 jobs rejected at arrival" in text
    assert "resource type" in text


def test_a_command_whose_extra_is_missing_names_the_extra_to_install(
    monkeypatch: pytest.MonkeyPatch, capsys: pytest.CaptureFixture[str]
) -> None:
    """An install of the core alone (`pip install loadmaster`) lacks e.g. plotting: one line, no traceback."""

    def no_plotting() -> None:
        raise ModuleNotFoundError("No module named 'matplotlib'", name="matplotlib.pyplot")

    monkeypatch.setattr("loadmaster.cli.app", no_plotting)
    with pytest.raises(SystemExit) as exited:
        main()
    assert exited.value.code == 2
    assert "pip install 'loadmaster[report]'" in capsys.readouterr().err


def test_a_missing_module_that_is_no_extra_is_a_bug_shown_whole(monkeypatch: pytest.MonkeyPatch) -> None:
    def broken() -> None:
        raise ModuleNotFoundError("No module named 'loadmaster.nowhere'", name="loadmaster.nowhere")

    monkeypatch.setattr("loadmaster.cli.app", broken)
    with pytest.raises(ModuleNotFoundError):
        main()
