"""What the learned-scheduler benchmarks share: seed ranges, the targets listing and the results file.

Imported by ``rl_vs_heuristics.py``, ``clairvoyant_ceiling.py`` and
``fair_rule_sweep.py`` (run as scripts from the repository root, so this
folder is on ``sys.path``).
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path


def seed_range(text: str) -> tuple[int, ...]:
    """``"first-last"`` -> the seeds from first to last, both included."""
    first, last = (int(x) for x in text.split("-"))
    return tuple(range(first, last + 1))


def print_targets(checks: Mapping[str, Mapping[str, object]]) -> None:
    """One PASS/FAIL line per target: what was measured beside what was asked."""
    print("\ntargets:")
    for name, check in checks.items():
        verdict = "PASS" if check["pass"] else "FAIL"
        print(f"  {verdict}  {name}: {check['measured']}  (target: {check['target']})")


def write_results(path: Path, root: Path, result: Mapping[str, object]) -> None:
    """Write ``result`` as indented JSON to ``path`` and say where (relative to ``root``)."""
    path.write_text(json.dumps(result, indent=2) + "\n", encoding="utf-8")
    print(f"wrote {path.relative_to(root)}")
