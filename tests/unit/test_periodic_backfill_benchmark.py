"""benchmarks/periodic_backfill.py: its figure, redrawn from a results file without running anything."""

from __future__ import annotations

import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

from builders import BENCHMARKS, load_benchmark

COMMITTED = BENCHMARKS / "results" / "periodic_backfill.json"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    return load_benchmark("periodic_backfill")


def test_plot_only_draws_the_figure_beside_the_results_and_leaves_them(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "periodic_backfill.json"
    shutil.copy(COMMITTED, results)
    monkeypatch.setattr(sys, "argv", ["periodic_backfill.py", "--plot-only", "--out", str(results)])
    bench.main()
    assert (tmp_path / "periodic_backfill.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results.read_bytes() == COMMITTED.read_bytes()
