"""What the validations against a paper's own simulator share (validate_gavel, validate_research).

Both replay the same cases in loadmaster and, when given the authors' code, in
their simulator, timed in the same run; a case passes when average JCT and
makespan are within the tolerance of the authors' output. This module runs the
authors' command, computes the relative deltas, builds the targets listing and
stamps the results with the commit and machine. Run as scripts from the
repository root, so this folder is on ``sys.path``.
"""

from __future__ import annotations

import os
import platform
import subprocess
import sys
import time
from collections.abc import Mapping
from pathlib import Path


def run_authors(folder: Path, command: list[str]) -> tuple[float, str]:
    """Run the authors' simulator in ``folder``: (seconds it took, its stdout); exit on failure."""
    start = time.perf_counter()
    done = subprocess.run(command, cwd=folder, capture_output=True, text=True, check=False)
    elapsed = time.perf_counter() - start
    if done.returncode != 0:
        sys.exit(f"the authors' simulator failed ({' '.join(command)}):\n{done.stderr[-2000:]}")
    return elapsed, done.stdout


def delta(ours: float, theirs: float) -> float:
    """Relative difference of ours against theirs (0 where theirs is 0)."""
    return ours / theirs - 1.0 if theirs else 0.0


def targets(
    cases: Mapping[str, Mapping[str, object]],
    target: str,
    timed: tuple[str, float, float] | None,
) -> dict[str, dict[str, object]]:
    """The targets listing: one "within" check per case, and the total time against the authors'.

    ``timed`` is (their name for the ratio, our total seconds, their total
    seconds), or None when the authors' simulator was not run.
    """
    checks: dict[str, dict[str, object]] = {
        f"{name} within 2%": {
            "measured": f"JCT {case['avg_jct_delta']:+.2%}, makespan {case['makespan_delta']:+.2%}",
            "target": target,
            "pass": case["pass"],
        }
        for name, case in cases.items()
    }
    if timed is not None:
        theirs_name, ours_total, theirs_total = timed
        checks["loadmaster not slower than the authors' simulator (all cases)"] = {
            "measured": f"{ours_total:.2f} s vs {theirs_total:.2f} s"
            f" (ratio {theirs_name}/ours {theirs_total / ours_total:.2f})",
            "target": "ratio >= 1",
            "pass": theirs_total >= ours_total,
        }
    return checks


def git_commit(root: Path) -> str:
    """The commit the results come from (empty outside a git checkout)."""
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], check=False, cwd=root, capture_output=True, text=True
    ).stdout.strip()


def machine() -> dict[str, object]:
    """The machine the times were taken on."""
    return {"python": platform.python_version(), "processor": platform.machine(), "cpus": os.cpu_count()}
