"""Every benchmark result says what it measured: the commit, and whether the tree was clean.

benchmarks/results_io.py stamps each results file it writes; every benchmark
script writes through it. These tests check the committed files, the scripts,
and the stamp itself (in a scratch git repository).
"""

from __future__ import annotations

import ast
import importlib.util
import json
import re
import subprocess
from pathlib import Path
from types import ModuleType

import pytest

ROOT = Path(__file__).resolve().parents[2]
BENCHMARKS = ROOT / "benchmarks"
RESULTS = BENCHMARKS / "results"
COMMIT = re.compile(r"[0-9a-f]{40}")

# Scripts under benchmarks/ that write no results file, and why.
NOT_BENCHMARKS = {
    "results_io.py": "the stamping module itself",
    "lab_cells.py": "options and the worker loop shared by the lab comparisons; writes nothing",
    "job_checksums.py": "writes the test fixture tests/fixtures/job_checksums.json, not a result",
    "sim_profile.py": "prints a cProfile table for docs/simulator.md; writes nothing",
    "strict_fifo_cycles.py": "prints cycle counts for docs/simulator.md; writes nothing",
    "against_authors.py": "helpers of validate_research.py and validate_gavel.py, which write the results",
    "dashboard_live.py": "the live row of dashboard_scale.py, which writes the results",
}


def _results_io() -> ModuleType:
    spec = importlib.util.spec_from_file_location("results_io", BENCHMARKS / "results_io.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    spec.loader.exec_module(module)
    return module


@pytest.mark.parametrize("path", sorted(RESULTS.glob("*.json")), ids=lambda p: p.name)
def test_every_committed_result_is_stamped(path: Path) -> None:
    result = json.loads(path.read_text(encoding="utf-8"))
    assert COMMIT.fullmatch(str(result.get("commit"))), f"{path.name}: commit {result.get('commit')!r}"
    assert isinstance(result.get("tree_clean"), bool), f"{path.name}: tree_clean {result.get('tree_clean')!r}"


@pytest.mark.parametrize(
    "script", sorted(p for p in BENCHMARKS.glob("*.py") if p.name not in NOT_BENCHMARKS), ids=lambda p: p.name
)
def test_every_benchmark_writes_through_results_io(script: Path) -> None:
    tree = ast.parse(script.read_text(encoding="utf-8"))
    imported = {
        alias.name
        for node in ast.walk(tree)
        if isinstance(node, ast.ImportFrom) and node.module == "results_io"
        for alias in node.names
    }
    assert "write_results" in imported, f"{script.name} does not write through results_io.write_results"


def _git(repo: Path, *args: str) -> None:
    subprocess.run(["git", "-C", str(repo), *args], check=True, capture_output=True)


@pytest.fixture
def repo(tmp_path: Path) -> Path:
    _git(tmp_path, "init", "-q")
    (tmp_path / "src.py").write_text("x = 1\n")
    (tmp_path / "benchmarks" / "results").mkdir(parents=True)
    (tmp_path / "benchmarks" / "results" / "old.json").write_text("{}\n")
    _git(tmp_path, "add", "-A")
    _git(tmp_path, "-c", "user.name=t", "-c", "user.email=t@t", "commit", "-q", "-m", "first")
    return tmp_path


def test_provenance_of_a_clean_tree_ignores_earlier_results(repo: Path) -> None:
    (repo / "benchmarks" / "results" / "old.json").write_text('{"rerun": true}\n')
    (repo / "benchmarks" / "results" / "new.json").write_text("{}\n")
    stamp = _results_io().provenance(repo)
    assert COMMIT.fullmatch(str(stamp["commit"]))
    assert stamp["tree_clean"] is True
    assert "dirty_paths" not in stamp


def test_provenance_of_a_dirty_tree_lists_what_differs(repo: Path) -> None:
    (repo / "src.py").write_text("x = 2\n")
    (repo / "extra.py").write_text("")
    stamp = _results_io().provenance(repo)
    assert stamp["tree_clean"] is False
    assert stamp["dirty_paths"] == [" M src.py", "?? extra.py"]


def test_provenance_outside_a_repository_is_not_clean(tmp_path: Path) -> None:
    stamp = _results_io().provenance(tmp_path)
    assert stamp["commit"] == "unknown"
    assert stamp["tree_clean"] is False


def test_write_results_puts_the_stamp_after_the_name_and_command(repo: Path) -> None:
    out = repo / "benchmarks" / "results" / "x.json"
    source = {"commit": "a" * 40, "tree_clean": True}
    result = {"machine": {"cpus": 2}, "benchmark": "x", "commit": "stale", "command": "python x.py"}
    _results_io().write_results(out, repo, result, source)
    written = json.loads(out.read_text())
    assert list(written) == ["benchmark", "command", "commit", "tree_clean", "machine"]
    assert written["commit"] == "a" * 40
