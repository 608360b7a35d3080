"""Every command README.md and docs/*.md mark as runnable runs as written in a fresh clone.

The runner is tools/doc_commands.py (marker convention in its docstring); this test runs the
cheap commands (about a minute and a half here); `make docs-slow` runs those marked slow. The
clone is of the committed HEAD, as anyone cloning the repository gets it.
"""

from __future__ import annotations

import importlib.util
import subprocess
import sys
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
RUNNER = ROOT / "tools" / "doc_commands.py"
PROGRAMS = ("loadmaster ", ".venv/bin/loadmaster ", "python ", "pytest ", "cd tools/", "git diff ")


def _runner() -> ModuleType:
    spec = importlib.util.spec_from_file_location("doc_commands", RUNNER)
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules["doc_commands"] = module
    spec.loader.exec_module(module)
    return module


def test_blocks_marked_runnable_parse_into_commands(tmp_path: Path) -> None:
    runner = _runner()
    doc = tmp_path / "README.md"
    doc.write_text(
        "text\n```sh runnable\nloadmaster profiles   # list them\n\nloadmaster simulate \\\n  --jobs 5\n```\n"
        "```sh\nloadmaster serve --demo\n```\n```sh runnable slow\npython x.py\n```\n"
    )
    found = runner.commands_in(doc, tmp_path)
    assert [(c.line, c.text, c.slow) for c in found] == [
        (3, "loadmaster profiles", False),
        (5, "loadmaster simulate --jobs 5", False),
        (12, "python x.py", True),
    ]
    assert [c.text for c in runner.select(found, slow=False, only_slow=False)] == [
        "loadmaster profiles",
        "loadmaster simulate --jobs 5",
    ]
    assert [c.text for c in runner.select(found, slow=False, only_slow=True)] == ["python x.py"]


def test_the_docs_mark_commands_that_need_nothing_but_the_clone() -> None:
    runner = _runner()
    found = [c for f in runner.documents(ROOT) for c in runner.commands_in(f, ROOT)]
    cheap = [c for c in found if not c.slow]
    assert len(cheap) >= 8, found
    for c in found:
        assert c.text.startswith(PROGRAMS), c
        assert "my-" not in c.text and "[" not in c.text, c  # no placeholders


@pytest.mark.slow
def test_the_cheap_commands_run_as_written_in_a_fresh_clone() -> None:
    done = subprocess.run(
        [sys.executable, str(RUNNER), "--timeout", "300"],
        capture_output=True,
        text=True,
        check=False,
        timeout=1500,
    )
    assert done.returncode == 0, done.stdout[-6000:] + done.stderr[-3000:]
    assert "FAILED" not in done.stdout
