"""Makes the shared test builders importable as ``from builders import ...``; finds shared data."""

from __future__ import annotations

import os
import sys
from pathlib import Path

import pytest

_TESTS = str(Path(__file__).parent)
if _TESTS not in sys.path:
    sys.path.insert(0, _TESTS)


SHARED_DATA = Path(__file__).resolve().parents[2] / "shared" / "data"
"""Public reference data beside the project (see ../shared/data/README.md)."""


def shared_data(relative: str) -> Path:
    """A file under ../shared/data: skips the test when absent, but fails under CI=true.

    CI must not pass by skipping the golden tests, so a missing file there is an error.
    """
    path = SHARED_DATA / relative
    if not path.exists():
        message = f"shared data {path} is missing (see ../shared/data/README.md)"
        if os.environ.get("CI") == "true":
            pytest.fail(message)
        pytest.skip(message)
    return path
