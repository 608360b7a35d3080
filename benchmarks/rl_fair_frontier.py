"""Fairness as a frontier: mean bounded slowdown against the largest wait (issue 24, item 5).

A starvation guard trades the two: serving jobs that have waited ``T`` first (and reserving for
them) cuts the largest wait and costs some slowdown. Each policy is therefore a family of points,
one per threshold, and the question is not whether one point beats another on one axis but
whether any heuristic point is better on both than a point of the learned family.

Points, on the built-in ``lab`` workload (1,024 jobs, held-out seeds 10000-10004, means over the
seeds), at loads 0.9 and 1.1:

* learned: the ``lab-fair`` checkpoint (``learned-fair``) and the ``lab`` checkpoint
  (``learned``), each with EASY backfill and the guard at every threshold (none, 48, 24, 12, 6
  and 3 hours: the guard serves jobs waiting that long first, oldest first, and reserves for
  them, as the shipped ``learned-fair`` does at 6 h);
* heuristics with a guard, at the same thresholds: ``sjf-backfill`` and the shipped backfilling
  profiles ``sds``, ``nsml`` and ``slurm`` (the ``backfill`` plugin's ``starvation_s``);
* heuristics without one, a point each: ``fifo`` (its order is its own guard), ``sjf``,
  ``first-fit``, ``random``, ``tetris``, ``fair``, ``binpack-skip`` and ``kube-default``.

Target (issue 24): at each load, no heuristic point is better on both axes than a point of the
learned family's frontier (the learned points no other learned point beats on both).

    python benchmarks/rl_fair_frontier.py [--seeds 10000-10004] [--workers 2]

Prints the points and writes benchmarks/results/rl_fair_frontier.json and .png.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import statistics
import time
from pathlib import Path

import lab_cells
from loadmaster.config import load_cluster, load_profiles
from loadmaster.rl.evaluate import HEURISTICS, EvalRow, evaluate, learned_profile
from loadmaster.scheduling import Profile, build_profile
from loadmaster.scheduling.plugins.backfill import Backfill
from results_io import print_targets, provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "rl_fair_frontier.json"
LOADS = (0.9, 1.1)
THRESHOLDS_H: tuple[float | None, ...] = (None, 48.0, 24.0, 12.0, 6.0, 3.0)
LEARNED = {"learned-fair": "lab-fair", "learned": "lab"}
GUARDED = ("sjf-backfill", "sds", "nsml", "slurm")
UNGUARDED = ("fifo", "sjf", "first-fit", "random", "tetris", "fair", "binpack-skip", "kube-default")


def _guard(threshold_h: float | None) -> str:
    return "no guard" if threshold_h is None else f"guard {threshold_h:g}h"


def _with_guard(profile: Profile, name: str, threshold_h: float | None) -> Profile:
    """``profile`` with its backfill plugin's starvation guard at ``threshold_h`` (None: none)."""
    guard = None if threshold_h is None else threshold_h * 3600

    def guarded(plugin: object) -> object:
        if not isinstance(plugin, Backfill):
            return plugin
        return Backfill(dataclasses.replace(plugin.settings, starvation_s=guard))

    return dataclasses.replace(profile, name=name, plugins=tuple(guarded(p) for p in profile.plugins))


def profiles() -> dict[str, tuple[str, Profile]]:
    """Point name -> (family, profile)."""
    shipped = load_profiles()
    heuristics = {
        name: build_profile(name, list(actions), list(plugins), source="rl_fair_frontier")
        for name, (actions, plugins) in HEURISTICS.items()
    }
    out: dict[str, tuple[str, Profile]] = {}
    for threshold_h in THRESHOLDS_H:
        guard = None if threshold_h is None else threshold_h * 3600
        for family, checkpoint in LEARNED.items():
            name = f"{family} {_guard(threshold_h)}"
            # The backfill plugin's own guard defaults to 24 h: set it as for the heuristics, or
            # "no guard" would still reserve for jobs waiting a day (and equal "guard 24h").
            out[name] = (family, _with_guard(learned_profile(name, checkpoint, guard), name, threshold_h))
        for family in GUARDED:
            base = heuristics.get(family) or shipped[family]
            name = f"{family} {_guard(threshold_h)}"
            out[name] = (family, _with_guard(base, name, threshold_h))
    for family in UNGUARDED:
        out[family] = (family, heuristics.get(family) or shipped[family])
    return out


def _cell(arg: tuple[float, int, int]) -> list[EvalRow]:
    """Every point's policy on one (load, seed) workload: a worker's task."""
    load, seed, jobs = arg
    chosen = {name: profile for name, (_, profile) in profiles().items()}
    return evaluate(load_cluster("lab"), chosen, loads=(load,), seeds=(seed,), jobs=jobs)


def frontier(points: dict[str, tuple[float, float]]) -> list[str]:
    """The points no other point dominates (lower is better on both axes; another point dominates
    one that it equals or beats on both and beats on one, so of equal points all stay)."""
    return [
        name
        for name, (x, y) in points.items()
        if not any(
            ox <= x and oy <= y and (ox < x or oy < y) for other, (ox, oy) in points.items() if other != name
        )
    ]


def check(points: dict[str, tuple[float, float]], family_of: dict[str, str]) -> dict[str, object]:
    """At one load: the learned frontier, and every heuristic point better on both than one of it."""
    learned = {n: p for n, p in points.items() if family_of[n] in LEARNED}
    edge = frontier(learned)
    beaten = sorted(
        f"{h} beats {n}"
        for h, (hx, hy) in points.items()
        if family_of[h] not in LEARNED
        for n in edge
        if hx < learned[n][0] and hy < learned[n][1]
    )
    return {"learned_frontier": edge, "beaten": beaten}


def plot(table: dict[str, dict[str, dict[str, float]]], family_of: dict[str, str], path: Path) -> None:
    """Every point at each load (top, log x), and the lower-left corner where the frontier lies (bottom)."""
    import matplotlib  # noqa: PLC0415 - only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415
    from matplotlib.ticker import NullFormatter, ScalarFormatter  # noqa: PLC0415

    fig, axes = plt.subplots(2, len(table), figsize=(6.5 * len(table), 9.5), squeeze=False)
    families = list(dict.fromkeys(family_of.values()))
    colours = plt.get_cmap("tab20")
    for column, (load, points) in enumerate(table.items()):
        for row in (0, 1):
            ax = axes[row][column]
            for i, family in enumerate(families):
                mine = [p for n, p in points.items() if family_of[n] == family]
                learned = family in LEARNED
                ax.plot(
                    [p["mean_bounded_slowdown"] for p in mine],
                    [p["max_wait_h"] for p in mine],
                    marker="*" if learned else "o",
                    markersize=10 if learned else 5,
                    linestyle="-" if len(mine) > 1 else "none",
                    linewidth=1.6 if learned else 0.7,
                    color=colours(i % 20),
                    label=family,
                )
            ax.set_ylabel("largest wait (h)")
        whole, corner = axes[0][column], axes[1][column]
        whole.set_xscale("log")
        whole.xaxis.set_major_formatter(ScalarFormatter())
        whole.xaxis.set_minor_formatter(NullFormatter())
        whole.set_xlabel("mean bounded slowdown (log)")
        whole.set_title(f"load {load}: every point (lower left is better)")
        # The corner: from the best slowdown to the worst learned point (with a margin), and every
        # point inside that range on the wait axis, on linear axes.
        xs = [p["mean_bounded_slowdown"] for p in points.values()]
        learned_x = [p["mean_bounded_slowdown"] for n, p in points.items() if family_of[n] in LEARNED]
        left, right = min(xs), max(learned_x) * 1.15
        inside = [p["max_wait_h"] for p in points.values() if p["mean_bounded_slowdown"] <= right]
        corner.set_xlim(left - 0.05 * (right - left), right)
        corner.set_ylim(min(inside) - 2, max(inside) + 4)
        corner.set_xlabel("mean bounded slowdown")
        corner.set_title(f"load {load}: the lower-left corner, where the frontier lies")
    axes[0][-1].legend(fontsize=7, loc="upper right")
    fig.tight_layout()
    fig.savefig(path, dpi=110)
    plt.close(fig)


def replot(results: Path) -> None:
    """Draw the figure again from a results file (its points and families), without simulating."""
    saved = json.loads(results.read_text(encoding="utf-8"))
    figure = results.with_name(saved["figure"])
    plot(saved["points"], saved["families"], figure)
    print(f"wrote {figure}")


def main() -> None:
    parser = lab_cells.parser(__doc__, seeds="10000-10004", loads=LOADS, out=RESULTS)
    parser.add_argument("--replot", action="store_true", help="only draw the figure again from --out")
    args = parser.parse_args()
    if args.replot:
        replot(args.out)
        return
    source = provenance(ROOT)
    loads = tuple(float(x) for x in args.loads.split(","))
    family_of = {name: family for name, (family, _) in profiles().items()}
    started = time.perf_counter()
    rows = lab_cells.simulate(_cell, lab_cells.cells(args), args.workers)
    table: dict[str, dict[str, dict[str, float]]] = {}
    checks: dict[str, dict[str, object]] = {}
    details: dict[str, dict[str, object]] = {}
    for load in loads:
        here = [r for r in rows if r.load == load]
        points = {
            name: {
                "mean_bounded_slowdown": statistics.fmean(
                    r.mean_bounded_slowdown for r in here if r.profile == name
                ),
                "max_wait_h": statistics.fmean(r.max_wait_h for r in here if r.profile == name),
            }
            for name in family_of
        }
        key = f"{load:g}"
        table[key] = points
        found = check(
            {n: (p["mean_bounded_slowdown"], p["max_wait_h"]) for n, p in points.items()}, family_of
        )
        details[key] = found
        beaten = found["beaten"]
        assert isinstance(beaten, list)
        checks[f"no_heuristic_beats_learned_frontier@{key}"] = {
            "target": "no heuristic point better on both mean bounded slowdown and largest wait than a "
            "point of the learned frontier",
            "measured": "none" if not beaten else f"{len(beaten)}: " + "; ".join(beaten[:4]),
            "pass": not beaten,
        }
        print(f"\nload {key} (means over seeds {args.seeds}); * marks the learned frontier")
        print(f"{'point':<30}{'bsld':>9}{'largest wait h':>16}")
        edge = set(found["learned_frontier"])  # type: ignore[arg-type]
        for name, p in sorted(points.items(), key=lambda item: item[1]["mean_bounded_slowdown"]):
            mark = " *" if name in edge else ""
            print(f"{name:<30}{p['mean_bounded_slowdown']:>9.3f}{p['max_wait_h']:>16.1f}{mark}")
    print_targets(checks)
    figure = args.out.with_suffix(".png")
    figure.parent.mkdir(parents=True, exist_ok=True)
    plot(table, family_of, figure)
    result = {
        "benchmark": "rl_fair_frontier",
        "command": lab_cells.command("rl_fair_frontier.py", args),
        "machine": {"python": platform.python_version(), "cpus": 2},
        "workload": {"name": "lab", "jobs": args.jobs, "loads": list(loads), "seeds": args.seeds},
        "thresholds_h": [math.inf if t is None else t for t in THRESHOLDS_H],
        "families": family_of,
        "wall_s": round(time.perf_counter() - started, 1),
        "points": table,
        "frontier": details,
        "figure": figure.name,
        "targets": checks,
    }
    write_results(args.out, ROOT, result, source)


if __name__ == "__main__":
    main()
