"""A forked helper runs one call beside this process; errors come back as themselves."""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from loadmaster.errors import ConfigError
from loadmaster.prefork import PREPARING_NICENESS, HelperError, Prefork


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


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_warm_ups_run_in_the_helper_before_the_call(tmp_path: Path) -> None:
    helper = Prefork(["json"], warm_ups=[f"{__name__}:warm_once", f"{__name__}:warm_once"])
    helper.submit(_write_marks, tmp_path / "marks")
    helper.wait()
    marks = (tmp_path / "marks").read_text().split()
    assert len(marks) == 2 and marks[0] == marks[1] != str(os.getpid())
    assert not _WARMED  # only the helper warmed up


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_failing_or_unknown_warm_up_does_not_stop_the_call(tmp_path: Path) -> None:
    names = [f"{__name__}:fail_to_warm", "loadmaster_no_such_module:f", f"{__name__}:warm_once"]
    helper = Prefork([], warm_ups=names)
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
    """A warm-up that notes the helper's CPU priority while it prepares."""
    _PRIORITIES.append(os.getpriority(os.PRIO_PROCESS, 0))


def _write_priorities(path: Path) -> None:
    path.write_text(" ".join(map(str, [*_PRIORITIES, os.getpriority(os.PRIO_PROCESS, 0)])))


@pytest.mark.skipif(not hasattr(os, "fork"), reason="needs fork")
def test_a_helper_prepares_at_a_lower_priority_and_runs_the_call_at_the_caller_s(tmp_path: Path) -> None:
    ours = os.getpriority(os.PRIO_PROCESS, 0)
    helper = Prefork([], warm_ups=[f"{__name__}:note_priority"])
    helper.submit(_write_priorities, tmp_path / "priorities")
    helper.wait()
    preparing, calling = map(int, (tmp_path / "priorities").read_text().split())
    assert preparing == min(ours + PREPARING_NICENESS, 19)
    # Raising a priority back needs privilege (root or RLIMIT_NICE); without it the call stays lower.
    privileged = os.geteuid() == 0
    assert calling == ours if privileged else calling in {ours, preparing}
