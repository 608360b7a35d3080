"""benchmarks/periodic_backfill.py: its figure, redrawn from a results file without running anything."""

from __future__ import annotations

import importlib.util
import shutil
import sys
from pathlib import Path
from types import ModuleType

import pytest

BENCHMARKS = Path(__file__).resolve().parents[2] / "benchmarks"
COMMITTED = BENCHMARKS / "results" / "periodic_backfill.json"


@pytest.fixture(scope="module")
def bench() -> ModuleType:
    # The script imports its neighbour results_io as a top-level module, as when run from the root.
    if str(BENCHMARKS) not in sys.path:
        sys.path.insert(0, str(BENCHMARKS))
    spec = importlib.util.spec_from_file_location("periodic_backfill", BENCHMARKS / "periodic_backfill.py")
    assert spec is not None and spec.loader is not None
    module = importlib.util.module_from_spec(spec)
    sys.modules[spec.name] = module
    spec.loader.exec_module(module)
    return module


def test_plot_only_draws_the_figure_beside_the_results_and_leaves_them(
    bench: ModuleType, tmp_path: Path, monkeypatch: pytest.MonkeyPatch
) -> None:
    results = tmp_path / "periodic_backfill.json"
    shutil.copy(COMMITTED, results)
    monkeypatch.setattr(sys, "argv", ["periodic_backfill.py", "--plot-only", "--out", str(results)])
    bench.main()
    assert (tmp_path / "periodic_backfill.png").read_bytes()[:8] == b"\x89PNG\r\n\x1a\n"
    assert results.read_bytes() == COMMITTED.read_bytes()
