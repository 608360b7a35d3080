"""What every benchmark shares: seed ranges, the targets listing and the stamped results file.

Every script under ``benchmarks/`` that writes ``benchmarks/results/NAME.json``
writes it through :func:`write_results`, which stamps it with the commit it
measured and whether the tree was clean (``tests/unit/test_benchmark_results.py``
checks both, for every committed file). Scripts run from the repository root
(``python benchmarks/NAME.py``), so this folder is on ``sys.path``.

A long benchmark takes its :func:`provenance` before it starts measuring and
passes it to :func:`write_results`: the checkout may move on while it runs.
"""

from __future__ import annotations

import argparse
import json
import subprocess
from collections.abc import Mapping
from pathlib import Path

# Results written by an earlier benchmark of the same session do not make the
# code measured by the next one different: the results folder is left out.
_NOT_SOURCE = ":(exclude)benchmarks/results"
_DIRTY_LISTED = 20  # enough to see what differed; a huge diff needs no longer list


def seed_range(text: str) -> tuple[int, ...]:
    """``"first-last"`` -> the seeds from first to last, both included."""
    first, last = (int(x) for x in text.split("-"))
    return tuple(range(first, last + 1))


def held_out_args(doc: str | None) -> argparse.Namespace:
    """``--seeds first-last --jobs N`` of the lab comparisons that evaluate on the held-out seeds
    10000-10004 (the learned policies never trained on them), 1,024 jobs each by default."""
    parser = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    parser.add_argument("--seeds", default="10000-10004", help="held-out workload seeds, first-last")
    parser.add_argument("--jobs", type=int, default=1024, help="jobs per workload")
    return parser.parse_args()


def print_targets(checks: Mapping[str, Mapping[str, object]]) -> None:
    """One PASS/FAIL line per target: what was measured beside what was asked."""
    print("\ntargets:")
    for name, check in checks.items():
        verdict = "PASS" if check["pass"] else "FAIL"
        print(f"  {verdict}  {name}: {check['measured']}  (target: {check['target']})")


def provenance(root: Path) -> dict[str, object]:
    """The commit checked out at ``root`` and whether its tree was clean (results folder aside).

    ``{"commit": <40 hex digits>, "tree_clean": bool}``, plus ``"dirty_paths"``
    (the first few ``git status --porcelain`` lines) when it was not. Without
    git, or outside a repository, the commit is ``"unknown"`` and the tree is
    not called clean: nothing says what was measured.
    """
    git = ["git", "-C", str(root)]
    head = subprocess.run([*git, "rev-parse", "HEAD"], check=False, capture_output=True, text=True)
    if head.returncode != 0:
        return {"commit": "unknown", "tree_clean": False, "dirty_paths": [head.stderr.strip()]}
    status = subprocess.run(
        [*git, "status", "--porcelain", "--", ".", _NOT_SOURCE], check=False, capture_output=True, text=True
    )
    dirty = status.stdout.splitlines() if status.returncode == 0 else [status.stderr.strip()]
    stamp: dict[str, object] = {"commit": head.stdout.strip(), "tree_clean": not dirty}
    if dirty:
        stamp["dirty_paths"] = dirty[:_DIRTY_LISTED] + (
            [f"... {len(dirty) - _DIRTY_LISTED} more"] if len(dirty) > _DIRTY_LISTED else []
        )
    return stamp


def write_results(
    path: Path, root: Path, result: Mapping[str, object], source: Mapping[str, object] | None = None
) -> None:
    """Write ``result`` as indented JSON to ``path``, stamped, and say where (relative to ``root``).

    ``source`` is the :func:`provenance` taken when the benchmark started; without
    it the stamp is taken now. The stamp's keys follow ``benchmark`` and
    ``command`` and replace any of the same name in ``result``.
    """
    stamp = dict(source) if source is not None else provenance(root)
    head = {key: result[key] for key in ("benchmark", "command") if key in result}
    rest = {key: value for key, value in result.items() if key not in head and key not in stamp}
    path.parent.mkdir(parents=True, exist_ok=True)
    path.write_text(json.dumps({**head, **stamp, **rest}, indent=2) + "\n", encoding="utf-8")
    try:
        shown: Path = path.resolve().relative_to(root.resolve())
    except ValueError:  # written outside the repository (an --out elsewhere)
        shown = path
    print(f"wrote {shown}")
