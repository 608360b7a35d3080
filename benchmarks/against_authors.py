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


def print_cases(
    cases: Mapping[str, Mapping[str, object]],
    *,
    theirs: str,
    time_key: str,
    extra: tuple[str, str] | None = None,
) -> None:
    """The comparison table: JCT and makespan of ours against the authors', with both run times.

    ``theirs`` is the key of the authors' row in each case, ``time_key`` that of their run time in
    the case's timing; ``extra`` is (column title, key) of one more relative delta of the case to
    print (Gavel's other solver), or None.
    """
    head = f"{'case':44} {'JCT ours':>10} {'JCT theirs':>10} {'dJCT':>7} {'makespan':>9} {'dmksp':>7}"
    print(f"\n{head}" + (f" {extra[0]:>8}" if extra else "") + f" {'ours s':>7} {'theirs s':>8}")
    for name, case in cases.items():
        mine, their_row, timing = case["loadmaster"], case[theirs], case["time"]
        assert isinstance(mine, dict) and isinstance(their_row, dict) and isinstance(timing, dict)
        their_s = f"{timing[time_key]:.2f}" if time_key in timing else "-"
        extra_cell = f" {case[extra[1]]:+8.2%}" if extra else ""
        print(
            f"{name:44} {mine['avg_jct_s']:10.1f} {their_row['avg_jct_s']:10.1f}"
            f" {case['avg_jct_delta']:+7.2%} {mine['makespan_s']:9.0f}"
            f" {case['makespan_delta']:+7.2%}{extra_cell}"
            f" {timing['loadmaster_s']:7.2f} {their_s:>8}"
        )


def git_commit(root: Path) -> str:
    """The commit the results come from (empty outside a git checkout)."""
    return subprocess.run(
        ["git", "rev-parse", "HEAD"], check=False, cwd=root, capture_output=True, text=True
    ).stdout.strip()


def machine() -> dict[str, object]:
    """The machine the times were taken on."""
    return {"python": platform.python_version(), "processor": platform.machine(), "cpus": os.cpu_count()}
