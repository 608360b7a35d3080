"""The learned order's advantage over the best heuristic as load grows, per seed, plotted (issue 24, item 6).

Every policy of ``benchmarks/rl_vs_heuristics.py`` that competes for "best heuristic" (the six
single heuristics and the six production profiles) and the shipped ``learned`` profile run in
the ordinary simulator on the built-in ``lab`` workload, 1,024 jobs, at loads 0.7 to 1.2 with
the held-out seeds 10000-10009 (training never draws them). At each load the rival is the
policy with the lowest mean bounded slowdown over the seeds, chosen on the means so that no
seed picks its own luckiest rival; the advantage on a seed is ``1 - learned / rival`` (positive:
learned is ahead), reported as the mean over seeds with a 95% confidence interval (Student's t
over the per-seed values, which share each seed's jobs and so are paired).

Reported, no target: the issue asks for the curve. It is rerun whenever the shipped
checkpoints change.

    python benchmarks/rl_load_curve.py [--seeds 10000-10009] [--jobs 1024] [--workers 2]

Prints a table and writes benchmarks/results/rl_load_curve.json and rl_load_curve.png.
"""

from __future__ import annotations

import argparse
import math
import platform
import statistics
import time
from collections.abc import Sequence
from pathlib import Path

from loadmaster.config import load_cluster
from loadmaster.parallel import LocalPool, TaskError
from loadmaster.rl.evaluate import (
    HEURISTICS,
    PRODUCTION,
    EvalRow,
    comparison_profiles,
    evaluate,
    learned_profiles,
)
from results_io import provenance, seed_range, write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "rl_load_curve.json"
LOADS = (0.7, 0.8, 0.9, 1.0, 1.1, 1.2)
RIVALS = (*HEURISTICS, *PRODUCTION)

# Two-sided 97.5% quantiles of Student's t by degrees of freedom (scipy is not a dependency of
# the benchmarks' core path; these are the standard table values).
_T975 = {1: 12.706, 2: 4.303, 3: 3.182, 4: 2.776, 5: 2.571, 6: 2.447, 7: 2.365, 8: 2.306, 9: 2.262}


def _cell(arg: tuple[float, int, int]) -> list[EvalRow]:
    """Every policy on one (load, seed) workload: a worker's task."""
    load, seed, jobs = arg
    everyone = comparison_profiles(learned_profiles("lab", "lab-fair"))
    profiles = {name: everyone[name] for name in ("learned", *RIVALS)}
    return evaluate(load_cluster("lab"), profiles, loads=(load,), seeds=(seed,), jobs=jobs)


def interval(values: Sequence[float]) -> tuple[float, float]:
    """Mean and half-width of the 95% confidence interval (Student's t; 10 or more values: 1.96
    only from 30 on, the table's last entry below that)."""
    mean = statistics.fmean(values)
    if len(values) < 2:
        return mean, math.nan
    quantile = _T975.get(len(values) - 1, 2.262 if len(values) <= 30 else 1.96)
    return mean, quantile * statistics.stdev(values) / math.sqrt(len(values))


def curve(rows: Sequence[EvalRow]) -> dict[str, dict[str, object]]:
    """Per load: the rival (best mean bounded slowdown), each policy's mean, and the advantage."""
    out: dict[str, dict[str, object]] = {}
    for load in sorted({r.load for r in rows}):
        here = [r for r in rows if r.load == load]
        bsld = {
            name: {r.seed: r.mean_bounded_slowdown for r in here if r.profile == name}
            for name in ("learned", *RIVALS)
        }
        means = {name: statistics.fmean(per.values()) for name, per in bsld.items()}
        rival = min(RIVALS, key=means.__getitem__)
        seeds = sorted(bsld["learned"])
        per_seed = [1 - bsld["learned"][s] / bsld[rival][s] for s in seeds]
        mean, half = interval(per_seed)
        out[f"{load:g}"] = {
            "rival": rival,
            "advantage_mean": mean,
            "advantage_ci95": half,
            "advantage_per_seed": dict(zip(map(str, seeds), per_seed, strict=True)),
            "mean_bounded_slowdown": means,
        }
    return out


def plot(table: dict[str, dict[str, object]], path: Path) -> None:
    import matplotlib  # noqa: PLC0415 - only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    loads = [float(x) for x in table]
    mean = [100 * float(table[x]["advantage_mean"]) for x in table]  # type: ignore[arg-type]
    half = [100 * float(table[x]["advantage_ci95"]) for x in table]  # type: ignore[arg-type]
    fig, ax = plt.subplots(figsize=(7, 4))
    ax.axhline(0, color="grey", linewidth=0.8)
    for x in table:
        seeds = table[x]["advantage_per_seed"]
        assert isinstance(seeds, dict)
        ax.scatter(
            [float(x)] * len(seeds), [100 * v for v in seeds.values()], s=10, color="tab:blue", alpha=0.35
        )
    ax.errorbar(loads, mean, yerr=half, color="tab:blue", marker="o", capsize=4, label="mean, 95% CI")
    for load, m, x in zip(loads, mean, table, strict=True):
        ax.annotate(str(table[x]["rival"]), (load, m), textcoords="offset points", xytext=(6, 6), fontsize=7)
    ax.set_xlabel("offered load")
    ax.set_ylabel("learned ahead of the best heuristic (%)")
    ax.set_title("Learned order against the best heuristic at each load (lab, held-out seeds)")
    ax.legend(loc="best", fontsize=8)
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(
        description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter
    )
    parser.add_argument("--seeds", default="10000-10009", help="held-out workload seeds, first-last")
    parser.add_argument("--jobs", type=int, default=1024, help="jobs per workload")
    parser.add_argument("--loads", default=",".join(f"{x:g}" for x in LOADS), help="comma-separated loads")
    parser.add_argument("--workers", type=int, default=2, help="workloads simulated at once")
    parser.add_argument("--out", type=Path, default=RESULTS)
    args = parser.parse_args()
    source = provenance(ROOT)
    loads = tuple(float(x) for x in args.loads.split(","))
    cells = [(load, seed, args.jobs) for load in loads for seed in seed_range(args.seeds)]
    started = time.perf_counter()
    rows: list[EvalRow] = []
    with LocalPool(args.workers) as pool:
        for cell in cells:
            pool.submit(_cell, cell)
        while len(rows) < len(cells) * (1 + len(RIVALS)):
            for item in pool.wait(1.0):
                if item.error is not None:
                    raise TaskError(item.error)
                rows.extend(item.value)
                done = len(rows) // (1 + len(RIVALS))
                print(f"\r[{done:>3}/{len(cells)}] workloads simulated", end="", flush=True)
    print()
    table = curve(rows)
    print(
        f"\n{'load':>5}  {'rival':<14}{'rival bsld':>11}{'learned bsld':>14}{'advantage':>11}{'95% CI':>10}"
    )
    for load, cell in table.items():
        means = cell["mean_bounded_slowdown"]
        assert isinstance(means, dict)
        rival = str(cell["rival"])
        print(
            f"{load:>5}  {rival:<14}{means[rival]:>11.3f}{means['learned']:>14.3f}"
            f"{float(cell['advantage_mean']):>+11.1%}{'±':>4}{float(cell['advantage_ci95']):.1%}"  # type: ignore[arg-type]
        )
    figure = args.out.with_suffix(".png")
    figure.parent.mkdir(parents=True, exist_ok=True)
    plot(table, figure)
    result = {
        "benchmark": "rl_load_curve",
        "command": "python benchmarks/rl_load_curve.py "
        f"--seeds {args.seeds} --jobs {args.jobs} --loads {args.loads} --workers {args.workers}",
        "machine": {"python": platform.python_version(), "cpus": 2},
        "workload": {"name": "lab", "jobs": args.jobs, "loads": list(loads), "seeds": args.seeds},
        "checkpoint": "lab (the shipped default of `learned`)",
        "rivals": list(RIVALS),
        "wall_s": round(time.perf_counter() - started, 1),
        "curve": table,
        "figure": figure.name,
    }
    write_results(args.out, ROOT, result, source)


if __name__ == "__main__":
    main()
