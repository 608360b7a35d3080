"""Every error loadmaster raises on purpose crosses a process boundary intact."""

from __future__ import annotations

import importlib
import inspect
import pickle
import pkgutil
from pathlib import Path

import pytest

import loadmaster
from loadmaster.errors import ConfigError, LoadmasterError
from loadmaster.traces import TraceError
from loadmaster.validation.rlscheduler import reproduce


def _every_module() -> None:
    """Imports every loadmaster module, so that every error class is defined."""
    for info in pkgutil.walk_packages(loadmaster.__path__, "loadmaster."):
        if not info.name.endswith(".__main__"):  # `python -m` entry points run the CLI when imported
            importlib.import_module(info.name)


def _subclasses(cls: type[LoadmasterError]) -> list[type[LoadmasterError]]:
    found = []
    for sub in cls.__subclasses__():
        found += [sub, *_subclasses(sub)]
    return found


def _argument(name: str, annotation: object) -> object:
    """A value for a constructor argument, from its annotation (the errors take strings and ints)."""
    text = str(annotation)
    if "int" in text and "str" not in text:
        return 403
    return f"<{name}>"


def _example(cls: type[LoadmasterError]) -> LoadmasterError:
    parameters = list(inspect.signature(cls.__init__).parameters.values())[1:]
    if any(p.kind is p.VAR_POSITIONAL for p in parameters):
        return cls("something went wrong")
    return cls(*(_argument(p.name, p.annotation) for p in parameters))


_every_module()
ERRORS = sorted(
    {cls for cls in [LoadmasterError, *_subclasses(LoadmasterError)]}, key=lambda c: c.__qualname__
)


def test_every_module_defines_its_errors_where_this_test_finds_them() -> None:
    names = {cls.__name__ for cls in ERRORS}
    assert {"ConfigError", "TraceError", "ReplayError", "ModelError", "SimulationError"} <= names


@pytest.mark.parametrize("cls", ERRORS, ids=lambda c: f"{c.__module__}.{c.__qualname__}")
def test_every_error_survives_a_pickle_round_trip(cls: type[LoadmasterError]) -> None:
    error = _example(cls)
    back = pickle.loads(pickle.dumps(error))

    assert type(back) is cls
    assert str(back) == str(error)
    assert back.args == error.args
    assert vars(back) == vars(error)


def test_a_reader_error_in_a_worker_process_reaches_the_caller_with_its_message(tmp_path: Path) -> None:
    bad = tmp_path / "jobs.swf"
    bad.write_text("1 0 abc 10 1 -1 -1 1 10 -1 1 1 1 -1 -1 -1 -1 -1\n")
    with pytest.raises(TraceError, match=r"jobs.swf:1: ") as raised:
        reproduce(bad, policies=["FCFS"], modes=[False], starts=[0], workers=2)
    assert raised.value.line == 1


def test_config_error_keeps_its_fields() -> None:
    error = pickle.loads(pickle.dumps(ConfigError("cluster.yaml", "nodes[0].gpus", "must be > 0")))
    assert (error.source, error.field, error.detail) == ("cluster.yaml", "nodes[0].gpus", "must be > 0")
    assert str(error) == "cluster.yaml: nodes[0].gpus: must be > 0"
