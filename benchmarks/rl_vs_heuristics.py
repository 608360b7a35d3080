"""Benchmark: the learned scheduler against the heuristics (issue 5).

Every policy runs in the ordinary simulator on the same held-out workloads:
the built-in ``lab`` workload, 1,024 jobs, sampled at loads 0.7, 0.9 and 1.1
with seeds 10000-10004 (training draws its episodes from its own seeded
generator, never these seeds). The learned rows use the shipped checkpoints
(``lab``, ``lab-fair``) through the ``learned`` plugin, exactly as a profile
runs them. See ``loadmaster.rl.evaluate`` for what each row is.

Targets, per load >= 0.9. Issue 5's "10% ahead of every heuristic" is withdrawn
(issue 24: at 0.9 no order we know is 10% ahead of ``sjf-backfill`` on this
workload); issue 24's targets take its place, on this benchmark's rows:

* ``learned_within_2pct``: learned's mean bounded slowdown is at most 2%
  above the best of the heuristics (fifo, sjf, sjf-backfill, first-fit,
  random, tetris) and the best production profile (issue 24, item 2).
* ``headroom_share``: learned removes at least half of the headroom from that
  best rival to ``sjf-clairvoyant-backfill`` (issue 24, item 3; the ten-seed
  version with confidence intervals and every clairvoyant order tried is
  ``benchmarks/rl_load_curve.py``).
* ``fair_max_wait``: learned-fair's maximum wait is no worse than FIFO's,
  and ``fair_ahead_of_fifo``: its mean bounded slowdown is below FIFO's.
* ``training_minutes``: each shipped checkpoint's training took at most 30
  minutes (from the seconds recorded in the checkpoint; the command that
  made it is in docs/learned.md).

Two references, not rivals (no scheduler knows true run times):

* ``sjf-oracle-backfill`` is ``sjf-backfill`` ordering by each job's true run
  time (backfilling still plans with the requested limits): how much knowing
  run times would help a ranking;
* ``sjf-clairvoyant-backfill`` is ``sjf-backfill`` on the same jobs with every
  time limit set to the true run time, so that both the order and EASY's
  reservations use perfect knowledge. How far it is ahead of ``sjf-backfill``
  bounds what run-time prediction can give this profile; it is not a proof
  that no policy does better (``benchmarks/clairvoyant_ceiling.py`` tries other
  clairvoyant orders). The JSON keeps both under ``ordering_ceiling``.

The RLScheduler protocol (``validation/rlscheduler.py``): the ten Lublin-1
sequences of 1,024 jobs, the ``learned`` order as the head the protocol
commits to, against SJF and F1 rerun in the same script, without backfilling
(checkpoint ``lublin``) and with the protocol's EASY backfilling
(``lublin-backfill``); both were trained on Lublin-1's jobs before the first
sequence only. Each is also run in the other mode. Reported, no target.

The DeepJS setup (``validation/deepjs_learned.py``): chunks 0-49 of
CloudSimPy's jobs.csv, which training never draws, under the shipped DeepJS
chooser (learned), its fair variant, FIFO, SJF and CloudSimPy's Random,
FirstFit and Tetris; per task, in the trace's time units. Reported, no target.

    python benchmarks/rl_vs_heuristics.py [--seeds 10000-10004] [--jobs 1024]
"""

from __future__ import annotations

import dataclasses
import math
import platform
import time
from pathlib import Path

from loadmaster.config import Cluster, load_cluster, load_workload
from loadmaster.model import Job
from loadmaster.rl.evaluate import (
    HEURISTICS,
    aggregate,
    best_production,
    comparison_profiles,
    evaluate,
    learned_profiles,
)
from loadmaster.scheduling import Profile
from loadmaster.scheduling.framework import CycleContext
from loadmaster.scheduling.plugins.sjf import ShortestJobFirst, SjfArgs
from loadmaster.scheduling.policy_net import load_policy
from loadmaster.validation.deepjs_learned import TEST_CHUNKS, compare_choosers, load_chooser
from loadmaster.validation.rlscheduler import SEQUENCE_STARTS, compare_learned
from results_io import held_out_args, print_targets, provenance, seed_range, write_results

REFERENCE = Path(__file__).resolve().parents[1] / "data" / "reference"
SWF = REFERENCE / "swf" / "lublin_256.swf"
JOBS_CSV = REFERENCE / "cloudsimpy" / "jobs.csv"
DEEPJS_METRICS = {
    "avg_bounded_slowdown": "mean_bounded_slowdown",
    "makespan": "makespan",
    "fairness": "jain_fairness",
    "max_wait": "max_wait",
    "avg_wait": "mean_wait",
}
"""DeepJS metrics reported, under this benchmark's names (times in the trace's units)."""

ROOT = Path(__file__).resolve().parents[1]
RESULTS = ROOT / "benchmarks" / "results" / "rl_vs_heuristics.json"
LOADS = (0.7, 0.9, 1.1)
WITHIN = 0.02
"""Learned at most this far behind the best rival (issue 24, item 2)."""
HEADROOM = 0.5
"""Share of the headroom learned must remove (issue 24, item 3)."""
CLAIRVOYANT = "sjf-clairvoyant-backfill"


def targets(table: dict[float, dict[str, dict[str, float]]]) -> dict[str, dict[str, object]]:
    out: dict[str, dict[str, object]] = {}
    for load, per in table.items():
        if load < 0.9:
            continue
        best = best_production(per)
        rivals = [*HEURISTICS, best]
        bsld = {name: per[name]["mean_bounded_slowdown"] for name in [*rivals, "learned", CLAIRVOYANT]}
        closest = min(rivals, key=bsld.__getitem__)
        behind = bsld["learned"] / bsld[closest] - 1
        out[f"learned_within_2pct@{load:g}"] = {
            "target": f"learned bsld at most {WITHIN:.0%} above the best of {', '.join(rivals)}",
            "measured": f"{bsld['learned']:.3f} vs best rival {closest} {bsld[closest]:.3f} ({-behind:+.1%})",
            "pass": behind <= WITHIN,
        }
        headroom = bsld[closest] - bsld[CLAIRVOYANT]
        share = (bsld[closest] - bsld["learned"]) / headroom if headroom > 0 else math.nan
        out[f"headroom_share@{load:g}"] = {
            "target": f">= {HEADROOM:.0%} of the headroom from the best rival to {CLAIRVOYANT}",
            "measured": f"{share:+.0%} (headroom {bsld[closest]:.3f} - {bsld[CLAIRVOYANT]:.3f})"
            if headroom > 0
            else "no headroom (the clairvoyant reference is not ahead of the best rival)",
            "pass": bool(share >= HEADROOM),  # False without headroom: nothing was shown
        }
        fair, fifo = per["learned-fair"], per["fifo"]
        out[f"fair_max_wait@{load:g}"] = {
            "target": "learned-fair max wait <= fifo max wait",
            "measured": f"{fair['max_wait_h']:.1f} h vs {fifo['max_wait_h']:.1f} h",
            "pass": fair["max_wait_h"] <= fifo["max_wait_h"],
        }
        out[f"fair_ahead_of_fifo@{load:g}"] = {
            "target": "learned-fair bsld < fifo bsld",
            "measured": f"{fair['mean_bounded_slowdown']:.3f} vs {fifo['mean_bounded_slowdown']:.3f}",
            "pass": fair["mean_bounded_slowdown"] < fifo["mean_bounded_slowdown"],
        }
    return out


def training_target() -> dict[str, object]:
    names = ("lab", "lab-fair", "lublin", "lublin-backfill")
    seconds = [load_policy(name).meta.get("train_seconds") for name in names]
    seconds.append(load_chooser().net.meta.get("train_seconds"))  # the DeepJS chooser
    known = [s for s in seconds if isinstance(s, (int, float))]
    if len(known) < len(seconds):
        return {"target": "<= 30 min", "measured": "not recorded in a shipped checkpoint", "pass": False}
    return {
        "target": "<= 30 min per shipped checkpoint",
        "measured": " / ".join(f"{s / 60:.1f} min" for s in known),
        "pass": max(known) <= 1800,
    }


class TrueRunTimeFirst(ShortestJobFirst):
    """SJF by the true run time, looked up by (job id, submit time): a reference, not a policy."""

    def __init__(self, durations: dict[tuple[str, float], float]) -> None:
        super().__init__(SjfArgs(strict=True))
        self.durations = durations

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        return (self.durations[job.id, job.submit_s], job.submit_s, job.id)


def oracle_profile(
    base: Profile, cluster: Cluster, loads: tuple[float, ...], seeds: tuple[int, ...], jobs: int
) -> Profile:
    """``base`` (sjf-backfill) with its order replaced by :class:`TrueRunTimeFirst`."""
    durations: dict[tuple[str, float], float] = {}
    for load in loads:
        for seed in seeds:
            for t in load_workload("lab", cluster, jobs=jobs, load=load, seed=seed).jobs:
                durations[t.job.id, t.job.submit_s] = t.duration_s
    oracle = TrueRunTimeFirst(durations)
    plugins = tuple(oracle if isinstance(p, ShortestJobFirst) else p for p in base.plugins)
    return dataclasses.replace(base, name="sjf-oracle-backfill", plugins=plugins)


def ceiling_at(per: dict[str, dict[str, float]]) -> dict[str, float]:
    """The two references' bounded slowdown at one load and how far each is ahead of sjf-backfill."""
    base = per["sjf-backfill"]["mean_bounded_slowdown"]
    oracle = per["sjf-oracle-backfill"]["mean_bounded_slowdown"]
    clairvoyant = per[CLAIRVOYANT]["mean_bounded_slowdown"]
    return {
        "sjf-oracle-backfill": oracle,
        CLAIRVOYANT: clairvoyant,
        "sjf-backfill": base,
        "oracle_margin": 1 - oracle / base,
        "clairvoyant_margin": 1 - clairvoyant / base,
    }


def rlscheduler_table() -> dict[str, dict[str, float]]:
    """Mean bounded slowdown of learned (``lublin``, ``lublin-backfill``), SJF and F1 on the protocol's
    ten sequences, each checkpoint also in the other mode."""
    if not SWF.is_file():
        raise SystemExit(f"missing {SWF} (see data/reference/README.md)")
    return compare_learned(SWF, cross=True)


def deepjs_table() -> dict[str, dict[str, float]]:
    """Every chooser on the DeepJS evaluation chunks (none trained on): chooser -> metric -> mean."""
    if not JOBS_CSV.is_file():
        raise SystemExit(f"missing {JOBS_CSV} (see data/reference/README.md)")
    return {
        name: {ours: means[theirs] for theirs, ours in DEEPJS_METRICS.items()}
        for name, means in compare_choosers(JOBS_CSV).items()
    }


def main() -> None:
    args = held_out_args(__doc__)
    source = provenance(ROOT)
    cluster = load_cluster("lab")
    profiles = comparison_profiles(learned_profiles("lab", "lab-fair"))
    profiles["sjf-oracle-backfill"] = oracle_profile(
        profiles["sjf-backfill"], cluster, LOADS, seed_range(args.seeds), args.jobs
    )
    profiles[CLAIRVOYANT] = dataclasses.replace(profiles["sjf-backfill"], name=CLAIRVOYANT)
    started = time.perf_counter()
    total = len(profiles) * len(LOADS) * len(seed_range(args.seeds))
    done = [0]

    def tick(what: str) -> None:
        done[0] += 1
        print(f"\r[{done[0]:>4}/{total}] {what:<40}", end="", flush=True)

    rows = evaluate(
        cluster,
        profiles,
        loads=LOADS,
        seeds=seed_range(args.seeds),
        jobs=args.jobs,
        progress=tick,
        clairvoyant=(CLAIRVOYANT,),
    )
    print()
    table = aggregate(rows)
    for load, per in table.items():
        best = best_production(per)
        print(f"\nload {load:g} (mean of seeds {args.seeds}, {args.jobs} jobs; best production: {best})")
        print(f"{'policy':<26}{'bsld':>9}{'makespan h':>12}{'Jain':>8}{'max wait h':>12}{'mean wait h':>13}")
        for name, m in per.items():
            print(
                f"{name:<26}{m['mean_bounded_slowdown']:>9.3f}{m['makespan_h']:>12.1f}{m['jain_fairness']:>8.3f}"
                f"{m['max_wait_h']:>12.1f}{m['mean_wait_h']:>13.2f}"
            )
    lublin = rlscheduler_table()
    print(f"\nRLScheduler protocol, Lublin-1, sequences {', '.join(map(str, SEQUENCE_STARTS))}: mean bsld")
    for mode, cells in lublin.items():
        print(f"  {mode:<12}" + "".join(f"  {name} {value:.2f}" for name, value in cells.items()))
    deepjs = deepjs_table()
    print(f"\nDeepJS setup, chunks 0-{TEST_CHUNKS - 1} of jobs.csv (never trained on), per task, trace units")
    print(f"{'chooser':<14}{'bsld':>9}{'makespan':>10}{'Jain':>8}{'max wait':>10}{'mean wait':>11}")
    for name, m in deepjs.items():
        print(
            f"{name:<14}{m['mean_bounded_slowdown']:>9.3f}{m['makespan']:>10.1f}{m['jain_fairness']:>8.3f}"
            f"{m['max_wait']:>10.1f}{m['mean_wait']:>11.1f}"
        )
    checks = targets(table)
    checks["training_minutes"] = training_target()
    ceiling = {f"{at:g}": ceiling_at(rows_at) for at, rows_at in table.items()}
    print("\nreferences against sjf-backfill (true run times: order only / order and EASY planning):")
    for at_text, c in ceiling.items():
        oracle, clairvoyant = c["sjf-oracle-backfill"], c[CLAIRVOYANT]
        print(
            f"  load {at_text}: sjf-backfill {c['sjf-backfill']:.3f}, oracle order {oracle:.3f}"
            f" ({c['oracle_margin']:+.1%}), clairvoyant {clairvoyant:.3f} ({c['clairvoyant_margin']:+.1%})"
        )
    print_targets(checks)
    result = {
        "benchmark": "rl_vs_heuristics",
        "machine": {"python": platform.python_version(), "cpus": 2},
        "workload": {"name": "lab", "jobs": args.jobs, "loads": list(LOADS), "seeds": args.seeds},
        "wall_s": round(time.perf_counter() - started, 1),
        "table": {f"{load:g}": per for load, per in table.items()},
        "ordering_ceiling": ceiling,
        "rlscheduler_lublin1": lublin,
        "deepjs": deepjs,
        "targets": checks,
    }
    write_results(RESULTS, ROOT, result, source)


if __name__ == "__main__":
    main()
