"""`loadmaster --help` and `loadmaster version` import nothing heavy to list commands.

How fast they start is measured by benchmarks/startup.py (a timed test would be noise on a busy machine)."""

from __future__ import annotations

import json
import subprocess
import sys

import pytest

HEAVY = (
    "numpy",
    "pandas",
    "pyarrow",
    "matplotlib",
    "scipy",
    "fastapi",
    "uvicorn",
    "kubernetes",
    "torch",
    "duckdb",
)
"""Modules that take 0.1-1 s each to import; a command that needs one imports it itself."""


def _imported_by(args: list[str]) -> set[str]:
    code = (
        "import sys; from loadmaster.cli import app; sys.argv = ['loadmaster', *sys.argv[1:]]\n"
        "try:\n    app()\nexcept SystemExit:\n    pass\n"
        "import json; print(json.dumps(sorted({m.split('.')[0] for m in sys.modules})), file=sys.stderr)"
    )
    done = subprocess.run([sys.executable, "-c", code, *args], capture_output=True, text=True, check=True)
    return set(json.loads(done.stderr.strip().splitlines()[-1]))


@pytest.mark.parametrize("args", [["--help"], ["version"], []])
def test_listing_commands_imports_nothing_heavy(args: list[str]) -> None:
    loaded = _imported_by(args)
    assert not loaded & set(HEAVY), sorted(loaded & set(HEAVY))
