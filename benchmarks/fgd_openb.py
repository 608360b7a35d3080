"""FGD on openb: GPU-sharing policies against the published curves (Weng et al., ATC'23, Fig. 7a).

Every policy places the openb default trace, inflated to 130% of the 6,212
GPUs, on the 1,213 GPU nodes (protocol: loadmaster.validation.fgd), on
seeds 42-51; the mean allocated GPU share at each arrival level is compared
with the mean of the authors' cached runs (expected_results/analysis_allo_discrete.csv).

By default each seed uses the authors' own draws for that seed (the pods'
arrival order and the node order, benchmarks/workloads/openb_reference_draws.json.gz,
written by tools/openb-draws), so the comparison is seed for seed; the table
counts the seeds whose whole curve is identical to the published one. FGD is
also run with numpy's generator (``--draws numpy`` runs every policy so),
to show what the draws alone move.

Targets (issue "MIG and GPU sharing"): Random, Best-fit, DotProd, GPU-Packing
and FGD within 0.5 percentage points of the published curve at every arrival
level; FGD at least 95.39% at 130%; the whole experiment under 10 minutes.
GPU-Clustering and loadmaster's FGD-balanced are reported without a target.

    python benchmarks/fgd_openb.py [--seeds 10] [--workers 2] [--draws reference|numpy]
    python benchmarks/fgd_openb.py --pods openb_pod_list_gpushare40.csv \
        [--nodes NODES.csv] [--expected analysis_allo_discrete.csv]

Prints a table and writes benchmarks/results/fgd_openb.json and fgd_openb.png
(for another pod list: fgd_openb_<list name>.json and .png). Any openb pod
list runs (``--pods``): the shipped draws are the default list's; for another
list the authors' draws are regenerated with tools/openb-draws (Go), and its
curves are compared with the rows of ``--expected`` (the authors' cached
results, ``experiments/analysis/expected_results/analysis_allo_discrete.csv``
of hkust-adsl/kubernetes-scheduler-simulator) whose workload is the list's
name, when there are any.
"""

from __future__ import annotations

import argparse
import csv
import gzip
import os
import platform
import shutil
import subprocess
import sys
import tempfile
import time
from concurrent.futures import ProcessPoolExecutor
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadmaster.validation.fgd import (
    LEVELS,
    POLICIES,
    OpenbData,
    ReferenceDraws,
    discrete_curve,
    load_openb,
    load_reference_draws,
    run_seed,
)
from results_io import provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
DATA = ROOT / "data" / "reference" / "openb"
RESULTS = Path(__file__).resolve().parent / "results"
REFERENCE_DRAWS = Path(__file__).resolve().parent / "workloads" / "openb_reference_draws.json.gz"
DEFAULT_PODS = DATA / "openb_pod_list_default.csv"
DEFAULT_NODES = DATA / "openb_node_list_gpu_node.csv"
DEFAULT_EXPECTED = DATA / "expected_results" / "analysis_allo_discrete.csv"
DRAWS_TOOL = Path(__file__).resolve().parents[1] / "tools" / "openb-draws"
IDENTICAL_PP = 0.005
"""A seed's curve is identical to the published one when every level differs by less (both round to 0.01)."""
PUBLISHED_NAMES = {
    "Random": "01-Random",
    "DotProd": "02-DotProd",
    "GPU-Clustering": "03-GpuClustering",
    "GPU-Packing": "04-GpuPacking",
    "Best-fit": "05-BestFit",
    "FGD": "06-FGD",
}
MATCHED = ("Random", "Best-fit", "DotProd", "GPU-Packing", "FGD")
"""Policies whose curve must be within TOLERANCE_PP of the published one at every level."""
TOLERANCE_PP = 0.5
FGD_AT_130 = 95.39
TARGET_WALL_S = 600.0
TABLE_LEVELS = (50, 80, 100, 110, 120, 130)


@dataclass(frozen=True)
class Inputs:
    """The pod list, the node list and the authors' draws for them (None: numpy's draws only)."""

    pods: Path
    nodes: Path
    draws: Path | None


_loaded: tuple[Inputs, OpenbData, dict[int, ReferenceDraws]] | None = None


def _load(inputs: Inputs) -> tuple[OpenbData, dict[int, ReferenceDraws]]:
    """The data and draws of ``inputs``, read once per (worker) process."""
    global _loaded  # noqa: PLW0603 (one copy of the trace and draws per worker process)
    if _loaded is None or _loaded[0] != inputs:
        data = load_openb(inputs.pods, inputs.nodes)
        draws = load_reference_draws(inputs.draws, data) if inputs.draws is not None else {}
        _loaded = (inputs, data, draws)
    return _loaded[1], _loaded[2]


Task = tuple[str, int, str, Inputs]
"""(policy, seed, draws: "reference" or "numpy", inputs)."""
Done = tuple[str, int, str, list[float], int, float]


def _one(task: Task) -> Done:
    name, seed, source, inputs = task
    started = time.perf_counter()
    data, draws = _load(inputs)
    run = run_seed(name, data, seed, draws=draws[seed] if source == "reference" else None)
    curve = discrete_curve(run, data.total_gpus)
    return name, seed, source, curve.tolist(), run.failed, time.perf_counter() - started


def published_runs(expected: Path, workload: str) -> dict[str, dict[int, np.ndarray]]:
    """Per policy (our names) and seed, the authors' cached curve for ``workload`` (none if absent)."""
    if not expected.exists():
        return {}
    with expected.open() as handle:
        rows = [r for r in csv.DictReader(handle) if r["workload"] == workload]
    runs: dict[str, dict[int, np.ndarray]] = {}
    for ours, theirs in PUBLISHED_NAMES.items():
        runs[ours] = {
            int(r["seed"]): np.array([float(r[str(level)] or "nan") for level in LEVELS])
            for r in rows
            if r["sc_policy"] == theirs
        }
    return {name: seeds for name, seeds in runs.items() if seeds}


def regenerate_draws(pods: Path, data: OpenbData, seeds: list[int], out: Path) -> Path:
    """The authors' draws for ``pods`` written by tools/openb-draws (Go) to ``out``."""
    go = shutil.which("go")
    if go is None:
        sys.exit(
            f"no shipped draws fit {pods.name} and Go is missing to write them with tools/openb-draws "
            "(apt-get install golang-go), or run with --draws numpy"
        )
    command = [go, "run", ".", "-pods", str(pods.resolve()), "-gpus", str(data.total_gpus)]
    command += ["-nodes", str(len(data.nodes)), "-seeds", f"{seeds[0]}-{seeds[-1]}"]
    env = {**os.environ, "GOFLAGS": "-mod=mod", "GOTOOLCHAIN": "local"}
    done = subprocess.run(command, cwd=DRAWS_TOOL, env=env, capture_output=True, text=True, check=False)
    if done.returncode != 0:
        sys.exit(f"tools/openb-draws failed on {pods}: {done.stderr.strip()}")
    out.write_bytes(gzip.compress(done.stdout.encode()))
    return out


def published(runs: dict[str, dict[int, np.ndarray]]) -> dict[str, np.ndarray]:
    """Mean published curve per policy, over the seeds in the file."""
    return {name: np.array(list(seeds.values())).mean(axis=0) for name, seeds in runs.items()}


def run_all(
    seeds: list[int], workers: int, source: str, inputs: Inputs
) -> tuple[dict[str, dict[int, np.ndarray]], dict[str, dict[str, float]], float, dict[int, float]]:
    """Per policy and seed the curve, per-policy facts, the wall time of the experiment, and FGD at 130%
    per seed with numpy's draws when ``source`` is "reference" (run after the timed experiment)."""
    tasks: list[Task] = [(name, seed, source, inputs) for name in POLICIES for seed in seeds]
    tasks.sort(key=lambda t: not t[0].startswith("FGD"))  # the slow ones first, for a balanced pool
    # No initializer: one that raises breaks the pool (BrokenProcessPool, the message lost); each
    # worker loads the data at its first task instead, and an error there reaches this process.
    with ProcessPoolExecutor(workers) as pool:
        started = time.perf_counter()
        done = list(pool.map(_one, tasks))
        wall = time.perf_counter() - started
        numpy_fgd: list[Task] = (
            [("FGD", seed, "numpy", inputs) for seed in seeds] if source == "reference" else []
        )
        extra = list(pool.map(_one, numpy_fgd))
    runs: dict[str, dict[int, np.ndarray]] = {}
    facts: dict[str, dict[str, float]] = {}
    for name in POLICIES:
        mine = [d for d in done if d[0] == name]
        runs[name] = {d[1]: np.array(d[3]) for d in mine}
        stacked = np.array([d[3] for d in mine])
        facts[name] = {
            "seed_sd_at_130": round(float(stacked[:, -1].std(ddof=1)), 3) if len(mine) > 1 else 0.0,
            "failed_pods_mean": round(float(np.mean([d[4] for d in mine])), 1),
            "cpu_s": round(sum(d[5] for d in mine), 1),
        }
    return runs, facts, wall, {d[1]: float(d[3][-1]) for d in extra}


def identical_seeds(ours: dict[int, np.ndarray], theirs: dict[int, np.ndarray]) -> int:
    """Seeds whose curve equals the published curve of the same seed at every arrival level."""
    return sum(
        1
        for seed, curve in ours.items()
        if seed in theirs and bool(np.nanmax(np.abs(curve - theirs[seed])) < IDENTICAL_PP)
    )


def plot(curves: dict[str, np.ndarray], reference: dict[str, np.ndarray], path: Path, workload: str) -> None:
    import matplotlib  # noqa: PLC0415

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    fig, axes = plt.subplots(1, 2, figsize=(13, 5))
    colours = plt.get_cmap("tab10")
    for ax, low in zip(axes, (0, 90), strict=True):
        for i, name in enumerate(curves):
            ax.plot(LEVELS, curves[name], color=colours(i), lw=1.6, label=f"{name} (ours)")
            if name in reference:
                ax.plot(
                    LEVELS, reference[name], color=colours(i), lw=1.2, ls="--", label=f"{name} (published)"
                )
        ax.set_xlim(low, 130)
        if low:
            ax.set_ylim(84, 97)
        ax.set_xlabel("arrived GPU requests (% of cluster GPUs)")
        ax.set_ylabel("allocated GPUs (%)")
        ax.grid(alpha=0.3)
    axes[0].set_title(f"{workload}, mean of the seeds")
    axes[1].set_title("zoom: 90-130% arrived")
    axes[1].legend(fontsize=7, ncol=2, loc="lower right")
    fig.tight_layout()
    fig.savefig(path, dpi=120)
    plt.close(fig)


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--seeds", type=int, default=10, help="seeds 42, 43, ... (default 10, as published)")
    parser.add_argument("--workers", type=int, default=min(2, os.cpu_count() or 1))
    parser.add_argument(
        "--draws",
        choices=("reference", "numpy"),
        default="reference",
        help="the authors' draws per seed (default), or numpy's generator seeded with the seed",
    )
    parser.add_argument(
        "--pods", type=Path, default=DEFAULT_PODS, help="openb pod list (default: openb default)"
    )
    parser.add_argument("--nodes", type=Path, default=DEFAULT_NODES, help="openb GPU node list")
    parser.add_argument("--expected", type=Path, default=DEFAULT_EXPECTED, help="the authors' cached curves")
    parser.add_argument("--out", type=Path, default=RESULTS, help="folder for the results JSON and plot")
    args = parser.parse_args()
    source = provenance(ROOT)
    for path in (args.pods, args.nodes):
        if not path.exists():
            parser.error(f"missing {path} (see data/reference/README.md)")
    workload = args.pods.stem
    default = args.pods.resolve() == DEFAULT_PODS.resolve()
    seeds = list(range(42, 42 + args.seeds))
    draws_path: Path | None = None
    scratch = tempfile.TemporaryDirectory()
    if args.draws == "reference":
        # Checked here, not in the workers, so that a missing seed stops the run before it starts.
        data = load_openb(args.pods, args.nodes)
        draws_path = REFERENCE_DRAWS
        if not default:  # the shipped draws are the default list's: another list's are written afresh
            draws_path = regenerate_draws(args.pods, data, seeds, Path(scratch.name) / "draws.json.gz")
        shipped = load_reference_draws(draws_path, data)
        if missing := [seed for seed in seeds if seed not in shipped]:
            parser.error(
                f"{draws_path} has draws for seeds {min(shipped)}-{max(shipped)}, not {missing[0]}; "
                "use --draws numpy for other seeds"
            )
    inputs = Inputs(args.pods, args.nodes, draws_path)
    runs, facts, wall, fgd_numpy = run_all(seeds, args.workers, args.draws, inputs)
    scratch.cleanup()
    curves = {name: np.array(list(per_seed.values())).mean(axis=0) for name, per_seed in runs.items()}
    theirs = published_runs(args.expected, workload)
    reference = published(theirs)
    at = [int(level) for level in TABLE_LEVELS]  # LEVELS is 0..130, so a level is its own index

    print(
        f"{'policy':<16}"
        + "".join(f"{level:>9}%" for level in TABLE_LEVELS)
        + f"{'max |diff|':>12}{'identical seeds':>17}"
    )
    diffs: dict[str, float] = {}
    for name, curve in curves.items():
        print(f"{name:<16}" + "".join(f"{curve[i]:>10.2f}" for i in at), end="")
        if name in reference:
            diffs[name] = float(np.nanmax(np.abs(curve - reference[name])))
            same = identical_seeds(runs[name], theirs[name])
            facts[name]["seeds_identical_to_published"] = same
            print(f"{diffs[name]:>12.2f}{f'{same}/{len(seeds)}':>17}")
            print(f"{'  published':<16}" + "".join(f"{reference[name][i]:>10.2f}" for i in at))
        else:
            print()
    print(
        f"whole experiment: {wall:.1f} s on {args.workers} worker(s), "
        f"{len(seeds)} seeds x {len(curves)} policies, {args.draws} draws"
    )
    if fgd_numpy:
        print(f"FGD at 130% with numpy's draws instead: {np.mean(list(fgd_numpy.values())):.2f}")

    targets: dict[str, dict[str, object]] = {}
    for name in (n for n in MATCHED if n in reference):
        worst = int(np.nanargmax(np.abs(curves[name] - reference[name])))
        targets[f"{name}_within_{TOLERANCE_PP}pp"] = {
            "target": f"|ours - published| <= {TOLERANCE_PP} pp at every arrival level 0-130%",
            "measured": round(diffs[name], 3),
            "worst_level": int(LEVELS[worst]),
            "pass": diffs[name] <= TOLERANCE_PP,
        }
    fgd_130 = float(curves["FGD"][-1])
    if default:
        targets["FGD_at_130"] = {
            "target": f">= {FGD_AT_130}",
            "measured": round(fgd_130, 2),
            "pass": fgd_130 >= FGD_AT_130,
        }
    targets["whole_run_s"] = {
        "target": f"< {TARGET_WALL_S:g}",
        "measured": round(wall, 1),
        "pass": wall < TARGET_WALL_S,
    }
    for name, target in targets.items():
        print(
            f"{name:<28} {target['measured']!s:>8}  {target['target']}  "
            f"{'PASS' if target['pass'] else 'FAIL'}"
        )

    result = {
        "benchmark": "fgd_openb",
        "command": f"python benchmarks/fgd_openb.py --seeds {args.seeds} --workers {args.workers} "
        f"--draws {args.draws}" + ("" if default else f" --pods {args.pods.name}"),
        "setup": f"{workload} tuned to 130% of the GPUs of {args.nodes.name}, seeds "
        f"{seeds[0]}-{seeds[-1]}, {args.draws} draws, protocol loadmaster.validation.fgd",
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "levels": list(TABLE_LEVELS),
        "ours": {name: [round(float(curve[i]), 2) for i in at] for name, curve in curves.items()},
        "published": {name: [round(float(curve[i]), 2) for i in at] for name, curve in reference.items()},
        "max_abs_diff_pp": {name: round(value, 3) for name, value in diffs.items()},
        "per_policy": facts,
        "fgd_at_130_numpy_draws": (
            {
                "note": "FGD with numpy's generator seeded with each seed instead of the authors' draws",
                "mean": round(float(np.mean(list(fgd_numpy.values()))), 3),
                "per_seed": {str(seed): round(value, 2) for seed, value in fgd_numpy.items()},
            }
            if fgd_numpy
            else None
        ),
        "curves_ours": {name: [round(float(v), 3) for v in curve] for name, curve in curves.items()},
        "targets": targets,
    }
    args.out.mkdir(parents=True, exist_ok=True)
    stem = "fgd_openb" if default else f"fgd_openb_{workload}"
    write_results(args.out / f"{stem}.json", ROOT, result, source)
    plot(curves, reference, args.out / f"{stem}.png", workload)
    print(f"wrote {args.out / f'{stem}.png'}")


if __name__ == "__main__":
    main()
