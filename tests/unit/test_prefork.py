"""A forked helper runs one call beside this process; errors come back as themselves."""

from __future__ import annotations

import os
import sys
import threading
import time
from pathlib import Path

import numpy as np
import pytest

from loadmaster import prefork
from loadmaster.errors import ConfigError
from loadmaster.prefork import NICE_MAX, PREPARING_NICENESS, HelperError, Prefork, Preparation


def _write(arg: tuple[Path, np.ndarray]) -> None:
    path, values = arg
    path.write_bytes(values.tobytes() + str(os.getpid()).encode())


def _raise_config(_: object) -> None:
    raise ConfigError("spec.yaml:3", "pools", "unknown field")


def _raise_value(_: object) -> None:
    raise ValueError("not a loadmaster error")


def _import_missing(_: object) -> None:
    import loadmaster_no_such_module  # type: ignore[import-not-found]  # noqa: F401, PLC0415


@pytest.mark.parametrize("fork", [True, False])
def test_a_call_larger_than_a_pipe_runs_and_is_waited_for(tmp_path: Path, fork: bool) -> None:
    values = np.arange(1_000_000, dtype=np.int64)  # 8 MB: more than a pipe holds, read while importing
    helper = Prefork(["json"], fork=fork)
    assert helper.forked == (fork and hasattr(os, "fork"))
    helper.submit(_write, (tmp_path / "out.bin", values))
    helper.wait()
    data = (tmp_path / "out.bin").read_bytes()
    assert data[: values.nbytes] == values.tobytes()
    ran_elsewhere = int(data[values.nbytes :]) != os.getpid()
    assert ran_elsewhere == (fork and hasattr(os, "fork"))
    helper.close()  # after wait: nothing left to do


def test_a_loadmaster_error_comes_back_as_itself() -> None:
    helper = Prefork([])
    helper.submit(_raise_config, None)
    with pytest.raises(ConfigError, match=r"spec.yaml:3: pools: unknown field"):
        helper.wait()


def test_another_error_comes_back_with_its_traceback() -> None:
    helper = Prefork([])
    helper.submit(_raise_value, None)
    with pytest.raises(HelperError, match=r"(?s)Traceback.*ValueError: not a loadmaster error"):
        helper.wait()


def test_a_missing_module_keeps_its_name_for_the_extras_hint() -> None:
    helper = Prefork(["loadmaster_no_such_module"])  # the import fails quietly in the helper first
    helper.submit(_import_missing, None)
    with pytest.raises(ModuleNotFoundError) as caught:
        helper.wait()
    assert caught.value.name == "loadmaster_no_such_module"


def test_one_call_per_helper() -> None:
    helper = Prefork([], fork=False)
    helper.submit(len, "")
    with pytest.raises(HelperError, match="one call"):
        helper.submit(len, "")


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_helper_given_nothing_is_stopped_and_reaped() -> None:
    with Prefork(["json"]) as helper:
        pid = helper.pid
        assert pid is not None
    assert helper.pid is None
    with pytest.raises(ChildProcessError):
        os.waitpid(pid, os.WNOHANG)  # already reaped: no zombie left behind


_WARMED: list[int] = []


def warm_once() -> None:
    """A warm-up the helper runs by name: it leaves a mark the call can see."""
    _WARMED.append(os.getpid())


def fail_to_warm() -> None:
    raise RuntimeError("cannot warm up")


def _write_marks(path: Path) -> None:
    path.write_text(" ".join(map(str, _WARMED)))


_READY: list[Path] = []
"""Where :func:`signal_ready` leaves its file (set before the fork, so the helper inherits it)."""


def signal_ready() -> None:
    """A last warm-up: its file says the ones before it are over, so a call sent now finds them done."""
    _READY[-1].write_text("ready")


def _helper_when_ready(tmp_path: Path, warm_ups: list[str]) -> Prefork:
    """A helper given ``warm_ups`` and :func:`signal_ready`, returned once they are all over."""
    _READY.append(tmp_path / "ready")
    helper = Prefork([], warm_ups=[*warm_ups, f"{__name__}:signal_ready"])
    deadline = time.monotonic() + 30
    while not _READY[-1].exists():
        assert time.monotonic() < deadline, "the helper's warm-ups did not end in 30 s"
        time.sleep(0.01)
    return helper


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_warm_ups_run_in_the_helper_before_the_call(tmp_path: Path) -> None:
    helper = _helper_when_ready(tmp_path, [f"{__name__}:warm_once", f"{__name__}:warm_once"])
    helper.submit(_write_marks, tmp_path / "marks")
    helper.wait()
    marks = (tmp_path / "marks").read_text().split()
    assert len(marks) == 2 and marks[0] == marks[1] != str(os.getpid())
    assert not _WARMED  # only the helper warmed up


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_failing_or_unknown_warm_up_does_not_stop_the_call(tmp_path: Path) -> None:
    names = [f"{__name__}:fail_to_warm", "loadmaster_no_such_module:f", f"{__name__}:warm_once"]
    helper = _helper_when_ready(tmp_path, names)
    helper.submit(_write_marks, tmp_path / "marks")
    helper.wait()
    assert len((tmp_path / "marks").read_text().split()) == 1  # the warm-ups after the failures ran


def test_without_fork_warm_ups_are_not_run(tmp_path: Path) -> None:
    helper = Prefork([], warm_ups=[f"{__name__}:warm_once"], fork=False)
    helper.submit(_write_marks, tmp_path / "marks")
    helper.wait()
    assert (tmp_path / "marks").read_text() == ""  # the call ran here, cold, and wrote the same files


_PRIORITIES: list[int] = []


def note_priority() -> None:
    """A warm-up that notes the CPU priority of the thread it runs on."""
    _PRIORITIES.append(os.getpriority(os.PRIO_PROCESS, 0))


def _write_priorities(path: Path) -> None:
    path.write_text(" ".join(map(str, [*_PRIORITIES, os.getpriority(os.PRIO_PROCESS, 0)])))


@pytest.mark.skipif(sys.platform != "linux", reason="a thread's own priority is Linux's")
def test_a_helper_prepares_at_a_lower_priority_and_runs_the_call_at_the_caller_s(tmp_path: Path) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    helper = _helper_when_ready(tmp_path, [f"{__name__}:note_priority"])
    helper.submit(_write_priorities, tmp_path / "priorities")
    helper.wait()
    preparing, calling = map(int, (tmp_path / "priorities").read_text().split())
    assert preparing == min(ours + PREPARING_NICENESS, NICE_MAX)
    assert calling == ours  # the call runs on the thread that was never lowered: no privilege needed
    assert os.getpriority(os.PRIO_PROCESS, 0) == ours


def test_a_call_that_comes_during_the_preparation_skips_the_warm_ups_left_not_the_imports(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    arrived = threading.Event()
    imported: list[str] = []
    monkeypatch.setattr(prefork, "_import", imported.append)
    _ARRIVE.append(arrived.set)
    preparation = Preparation([], [], arrived)
    preparation.steps = [
        ("warm", f"{__name__}:arrive_now"),
        ("import", "a"),
        ("warm", f"{__name__}:warm_once"),
    ]
    before = list(_WARMED)
    preparation.run()
    assert preparation.done == 1 and not imported  # stopped after the step in which the call came
    preparation.finish()
    assert imported == ["a"]  # the import left is done, on the caller's thread
    assert before == _WARMED  # the warm-up left is dropped: the call does its work itself
    assert preparation.done == len(preparation.steps)


_ARRIVE: list[object] = []


def arrive_now() -> None:
    """A warm-up during which the call comes (what :data:`_ARRIVE` holds does it)."""
    action = _ARRIVE[-1]
    assert callable(action)
    action()
