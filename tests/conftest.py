"""Makes the shared test builders importable as ``from builders import ...``; finds reference data."""

from __future__ import annotations

import sys
from pathlib import Path

import pytest
from hypothesis import settings
from hypothesis.database import DirectoryBasedExampleDatabase

_TESTS = str(Path(__file__).parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)

import fuzzing  # noqa: E402  (found through the path just set)

REFERENCE_DATA = Path(__file__).resolve().parents[1] / "data" / "reference"
"""Public reference data vendored in the repository (data/reference/README.md, manifest.json)."""


def reference_data(relative: str) -> Path:
    """A file under data/reference; a missing one fails the test (it ships with every clone).

    No test skips for want of data: the files are committed, and a checkout that lacks one is
    broken, which must show as a failure rather than as a quietly smaller suite.
    """
    path = REFERENCE_DATA / relative
    if not path.is_file():
        pytest.fail(
            f"reference data {path} is missing: it is committed under data/reference/ (see its README.md)"
        )
    return path


shared_data = reference_data
"""The former name, kept so that tests written against it still run."""


SYSTEM_TOOLS_INSTALL = "sudo apt-get install -y chromium prometheus golang-go"
"""The system packages pip cannot install (what .ci/run installs; README.md, "Two commands")."""


def system_tool(name: str, *candidates: str) -> str:
    """The path of a system program the test needs (first on PATH, then ``candidates``).

    A missing one fails the test with the command that installs it: skipping would let a run
    without the browser, Prometheus or Go pass as if those parts had been checked.
    """
    import shutil  # noqa: PLC0415 - only the few tests that need a system program call this

    found = shutil.which(name) or next((c for c in candidates if Path(c).is_file()), None)
    if found is None:
        pytest.fail(f"{name} is not installed; install it with: {SYSTEM_TOOLS_INSTALL} (or run .ci/run)")
    return found


# Hypothesis: property tests explore the same examples on every run unless asked otherwise, so that
# a test run fails only on code that changed. `make fuzz` (HYPOTHESIS_PROFILE=fuzz) explores new,
# random examples, many more of them (fuzzing.examples); each failure it finds is kept as an
# @example of its test, where the deterministic run checks it from then on.
settings.register_profile("ci", derandomize=True, database=None, deadline=None, print_blob=True)
settings.register_profile(
    "fuzz",
    derandomize=False,
    database=DirectoryBasedExampleDatabase(Path(__file__).resolve().parents[1] / ".hypothesis" / "fuzz"),
    deadline=None,
    print_blob=True,
)
settings.load_profile(fuzzing.PROFILE)
