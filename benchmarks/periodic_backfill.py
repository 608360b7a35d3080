"""Periodic backfill (``interval_s``, Slurm's ``bf_interval``): the time it saves, what it costs in metrics.

Each backfilling production profile (``slurm``, ``sds``, ``nsml``, ``learned``)
runs as shipped (a backfill walk every cycle) and with its walk at most once
per 30 s of simulated time (Slurm's default ``bf_interval``; ``slurm-periodic``
ships as such a profile), on two setups:

* ``lab``: the lab demo (160 GPUs, 4,000 jobs, load 0.85), where events come
  about two minutes apart, so few walks are skipped;
* ``large``: 1,000 x 8 GPUs, 20,000 jobs at load 1.1 (the smaller size of
  ``sim_throughput.py``), where events come seconds apart and the queue
  builds up as the long jobs accumulate (with 10,000 jobs it hardly does:
  mean waits of seconds, nothing for the option to change).

Times are the simulation's CPU seconds, each run ``--rounds`` times, the two
variants alternating; the ratio is periodic / every cycle, per round, and the
table gives its median and range. The metrics come from the first round
(runs are deterministic: every round's job table is checked to be the same).
Issue 19 asks for this option's effect on the metrics to be reported; it sets
no target for it, so the results file has none.

    python benchmarks/periodic_backfill.py                 # about 40 CPU minutes
    python benchmarks/periodic_backfill.py --quick         # 600 jobs each: a smoke run, prints only
    python benchmarks/periodic_backfill.py --setups large --jobs 10000 --rounds 1   # prints only

Only the default run writes benchmarks/results/periodic_backfill.json; a quick or partial
run prints, unless ``--out`` is given. With the results goes a figure beside them
(periodic_backfill.png): per profile and setup, the CPU-time ratio and the change in
mean bounded slowdown. ``--plot-only`` redraws it from a results file (``--out``, or the
committed one) without running anything:

    python benchmarks/periodic_backfill.py --plot-only
"""

from __future__ import annotations

import argparse
import json
import statistics
import sys
import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadmaster.config import load_cluster, load_profile_with_args, load_profiles, load_workload
from loadmaster.metrics.summary import summarize
from loadmaster.model import JobTable
from loadmaster.scheduling import Profile, Scheduler
from loadmaster.sim import SimOptions, simulate
from results_io import provenance, write_results

ROOT = Path(__file__).resolve().parents[1]
RESULTS = Path(__file__).resolve().parent / "results" / "periodic_backfill.json"
INTERVAL_S = 30.0
PROFILES = ("slurm", "sds", "nsml", "learned")
SETUPS = {"lab": ("lab", 4000, None), "large": ("large", 20_000, 1.1)}
"""Setup -> (cluster and workload name, jobs, load; None: the workload's own, 0.85 for lab)."""
METRICS = ("mean_bounded_slowdown", "mean_wait_s", "p99_wait_s", "max_wait_s", "allocation_mean")
SETUP_LABELS = {
    "lab": "lab demo (160 GPUs, 4,000 jobs, load 0.85)",
    "large": "1,000 x 8 GPUs, 20,000 jobs, load 1.1",
}
"""Each setup as the figure's legend names it (docs/plugins/backfill.md's table says the same)."""


def periodic(name: str, interval_s: float, max_job_test: int | None = None) -> Profile:
    """Shipped profile ``name`` with its backfill walk at most once per ``interval_s`` (and trying at
    most ``max_job_test`` jobs, where given), built from its configuration with the backfill
    arguments set, as a profiles file setting them would be."""
    args: dict[str, object] = {"interval_s": interval_s}
    if max_job_test is not None:
        args["max_job_test"] = max_job_test
    return load_profile_with_args(name, {"backfill": args})


@dataclass(frozen=True, slots=True)
class Run:
    cpu_s: float
    cycles: int
    skipped_walks: int
    jobs: JobTable
    metrics: dict[str, float]


def run_once(profile: Profile, setup: str, jobs_override: int | None) -> Run:
    name, jobs, load = SETUPS[setup]
    cluster = load_cluster(name)
    workload = load_workload(name, cluster, jobs=jobs_override or jobs, load=load)
    scheduler = Scheduler(profile)
    started = time.process_time()
    result = simulate(cluster.nodes, scheduler, workload.jobs, SimOptions())
    cpu = time.process_time() - started
    summary = summarize(result.jobs, result.timeline)
    metrics = {m: float(getattr(summary, m)) for m in METRICS}
    return Run(cpu, len(result.timeline.time_s), scheduler.skipped_walks, result.jobs, metrics)


def same_jobs(a: JobTable, b: JobTable) -> bool:
    return all(
        np.array_equal(getattr(a, f), getattr(b, f), equal_nan=getattr(a, f).dtype.kind == "f")
        for f in ("start_s", "end_s", "node_names")
    )


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--rounds", type=int, default=2)
    parser.add_argument("--profiles", default=",".join(PROFILES))
    parser.add_argument("--setups", default=",".join(SETUPS))
    parser.add_argument("--quick", action="store_true", help="600 jobs per run, one round; prints only")
    parser.add_argument("--jobs", type=int, default=None, help="jobs per run (default: each setup's)")
    parser.add_argument("--out", type=Path, default=None)
    parser.add_argument(
        "--max-job-test",
        type=int,
        default=None,
        help="the periodic variant also tries at most this many jobs per walk (Slurm's bf_max_job_test)",
    )
    parser.add_argument(
        "--plot-only",
        action="store_true",
        help="redraw the figure from the results file (--out, or the committed one); run nothing",
    )
    args = parser.parse_args()
    if args.plot_only:
        results = args.out or RESULTS
        figure = results.with_suffix(".png")
        written = json.loads(results.read_text())
        plot(written["rows"], figure, written["interval_s"])
        print(f"wrote {figure}")
        return
    source = provenance(ROOT)
    shipped = load_profiles()
    names = args.profiles.split(",")
    setups = args.setups.split(",")
    rounds = 1 if args.quick else args.rounds
    jobs_override = 600 if args.quick else args.jobs
    full = (
        not args.quick
        and args.jobs is None
        and args.max_job_test is None
        and names == list(PROFILES)
        and setups == list(SETUPS)
    )
    total, done = len(names) * len(setups) * rounds * 2, 0
    rows: list[dict[str, object]] = []
    for setup in setups:
        for name in names:
            bounded = periodic(name, INTERVAL_S, args.max_job_test)
            variants = {"every cycle": shipped[name], "periodic": bounded}
            runs: dict[str, list[Run]] = {v: [] for v in variants}
            for _ in range(rounds):
                for variant, profile in variants.items():
                    run = run_once(profile, setup, jobs_override)
                    if runs[variant]:
                        first = runs[variant][0].jobs
                        assert same_jobs(run.jobs, first), f"{setup} {name}: not deterministic"
                    runs[variant].append(run)
                    done += 1
                    print(f"[{done}/{total}] {setup} {name} {variant}: {run.cpu_s:.1f} s CPU", flush=True)
            rows.append(_row(setup, name, runs))
    _print(rows)
    if not full and args.out is None:
        return
    write_results(
        args.out or RESULTS,
        ROOT,
        {
            "benchmark": "periodic_backfill",
            "command": " ".join(["python benchmarks/periodic_backfill.py", *sys.argv[1:]]),
            "interval_s": INTERVAL_S,
            "max_job_test": args.max_job_test,
            "rounds": rounds,
            "setups": {k: {"cluster": v[0], "jobs": v[1], "load": v[2]} for k, v in SETUPS.items()},
            "targets": {},
            "note": "issue 19 asks for the option's effect on the metrics to be reported and sets no target",
            "rows": rows,
        },
        source,
    )
    plot(rows, (args.out or RESULTS).with_suffix(".png"), INTERVAL_S)


def _row(setup: str, name: str, runs: dict[str, list[Run]]) -> dict[str, object]:
    every, per = runs["every cycle"], runs["periodic"]
    ratios = [p.cpu_s / e.cpu_s for e, p in zip(every, per, strict=True)]
    return {
        "setup": setup,
        "profile": name,
        "cycles_every_cycle": every[0].cycles,
        "cycles_periodic": per[0].cycles,
        "walks_skipped": per[0].skipped_walks,
        "cpu_s_every_cycle": [round(r.cpu_s, 2) for r in every],
        "cpu_s_periodic": [round(r.cpu_s, 2) for r in per],
        "cpu_ratio_median": round(statistics.median(ratios), 3),
        "cpu_ratio_range": [round(min(ratios), 3), round(max(ratios), 3)],
        "metrics_every_cycle": every[0].metrics,
        "metrics_periodic": per[0].metrics,
    }


def plot(rows: Sequence[Mapping[str, object]], path: Path, interval_s: float = INTERVAL_S) -> None:
    """Per profile and setup: the CPU-time ratio (median, range over the rounds) and the change in
    mean bounded slowdown, periodic against a walk every cycle."""
    import matplotlib  # noqa: PLC0415 - only for the figure

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt  # noqa: PLC0415

    profiles = list(dict.fromkeys(str(r["profile"]) for r in rows))
    setups = list(dict.fromkeys(str(r["setup"]) for r in rows))
    by_cell = {(str(r["setup"]), str(r["profile"])): r for r in rows}
    fig, (cpu_ax, bsld_ax) = plt.subplots(
        1, 2, figsize=(10, 0.5 * len(profiles) * len(setups) + 2.2), sharey=True
    )
    height = 0.8 / len(setups)
    for i, setup in enumerate(setups):
        cells = [by_cell.get((setup, p)) for p in profiles]
        at = [k + i * height for k, c in enumerate(cells) if c is not None]
        shown = [c for c in cells if c is not None]
        ratios = [float(c["cpu_ratio_median"]) for c in shown]  # type: ignore[arg-type]
        ranges = [c["cpu_ratio_range"] for c in shown]
        spread = [
            [m - float(r[0]) for m, r in zip(ratios, ranges, strict=True)],  # type: ignore[index]
            [float(r[1]) - m for m, r in zip(ratios, ranges, strict=True)],  # type: ignore[index]
        ]
        label = SETUP_LABELS.get(setup, setup)
        cpu_ax.barh(at, ratios, height=height, xerr=spread, capsize=3, label=label, color=f"C{i}")
        changes = [100 * (_bsld(c, "metrics_periodic") / _bsld(c, "metrics_every_cycle") - 1) for c in shown]
        bsld_ax.barh(at, changes, height=height, color=f"C{i}")
    cpu_ax.axvline(1.0, color="black", linestyle="--", linewidth=0.8)
    bsld_ax.axvline(0.0, color="black", linewidth=0.8)
    cpu_ax.set_yticks([k + (len(setups) - 1) * height / 2 for k in range(len(profiles))], profiles)
    cpu_ax.invert_yaxis()
    cpu_ax.set_xlabel("simulation CPU time, periodic / every cycle\n(median and range over the rounds)")
    bsld_ax.set_xlabel("mean bounded slowdown, periodic against every cycle (%)\n(lower is better)")
    fig.suptitle(
        f"Backfill walk at most every {interval_s:g} s of time (interval_s) against a walk every cycle"
    )
    fig.legend(*cpu_ax.get_legend_handles_labels(), loc="lower center", ncols=len(setups), fontsize=8)
    fig.tight_layout(rect=(0, 0.06, 1, 1))
    fig.savefig(path, dpi=110)
    plt.close(fig)


def _bsld(row: Mapping[str, object], variant: str) -> float:
    metrics = row[variant]
    assert isinstance(metrics, Mapping)
    return float(metrics["mean_bounded_slowdown"])


def _change(after: float, before: float) -> str:
    return f"{(after / before - 1) * 100:+.1f}%" if before else "-"


def _print(rows: list[dict[str, object]]) -> None:
    print(
        f"\n{'setup':6} {'profile':8} {'walks skipped / cycles':>24} {'CPU ratio (range)':>20} "
        f"{'bsld':>15} {'change':>7} {'mean wait s':>15} {'p99 wait s':>17} {'max wait s':>19}"
    )
    for row in rows:
        e, p = row["metrics_every_cycle"], row["metrics_periodic"]
        assert isinstance(e, dict) and isinstance(p, dict)
        lo, hi = row["cpu_ratio_range"]  # type: ignore[misc]
        print(
            f"{row['setup']:6} {row['profile']:8} {row['walks_skipped']:>7} / {row['cycles_periodic']:<6}"
            f"({row['cycles_every_cycle']:<6}) "
            f"{row['cpu_ratio_median']:>7.3f} ({lo:.2f}-{hi:.2f}) "
            f"{e['mean_bounded_slowdown']:>7.3f}>{p['mean_bounded_slowdown']:<7.3f} "
            f"{_change(p['mean_bounded_slowdown'], e['mean_bounded_slowdown']):>7} "
            f"{e['mean_wait_s']:>7.0f}>{p['mean_wait_s']:<7.0f} "
            f"{e['p99_wait_s']:>8.0f}>{p['p99_wait_s']:<8.0f} "
            f"{e['max_wait_s']:>9.0f}>{p['max_wait_s']:<9.0f}"
        )


if __name__ == "__main__":
    main()
