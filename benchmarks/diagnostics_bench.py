"""Diagnostics fault-injection suite: synthetic jobs with known faults, scored per kind.

Jobs of 8 to 128 nodes x 8 GPUs, sampled every second for 1 to 6 hours, from
:class:`~loadmaster.telemetry.synthetic.SyntheticTelemetry`; each faulty job
gets zero to two faults of every kind at random targets (distinct GPUs and
nodes, so ground truth stays unambiguous) and intervals; fault-free jobs
measure false alarms. Seeded: the same seed gives the same jobs and scores.

Scores per kind: target precision and recall over GPUs (a node target counts
as its 8 GPUs), interval IoU of each detected fault, detection delay (how far
the finding's start is from the fault's), and analysis time per 100
GPU-hours (building the frame from samples plus every detector; generating
the telemetry is not counted).

Straggler and thermal faults slow the steps whose *nominal* start lies in
the fault's interval (the generator's simplification), and steps run late
once faults and data stalls have slowed the job, so their effect in the
data can last past the declared interval. The suite scores straggler
intervals against both the declared interval and the effective one (first
to last slowed step, from the generator's public schedule), and does not
count a straggler finding that matches a thermal fault's slowed steps as a
false alarm (the data shows a straggler there).

    python benchmarks/diagnostics_bench.py [--seed 0] [--quick]

The default suite (about 40 jobs, about 2,000 GPU-hours) runs in under ten
minutes on two cores. Prints a table and writes
benchmarks/results/diagnostics_bench.json.
"""

from __future__ import annotations

import argparse
import platform
import time
from dataclasses import dataclass
from pathlib import Path

import numpy as np

from loadmaster.diagnostics import FindingKind, detect, frame_from_tables
from loadmaster.diagnostics.findings import Finding
from loadmaster.telemetry.synthetic import (
    Fault,
    FaultKind,
    GpuRef,
    JobSpec,
    NodeSpec,
    SyntheticTelemetry,
    TelemetryPlan,
)
from results_io import provenance, write_results

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "diagnostics_bench.json"
TARGETS = {
    "precision": 0.95,
    "recall": 0.95,
    "false_alarm_rate": 0.02,
    "mean_iou": 0.8,
    "s_per_100_gpu_h": 1.0,
}
NODE_KINDS = (FaultKind.COMM,)
"""Kinds that always target whole nodes; others target one GPU or (one time in four) a node."""

FAULTY = [(8, 1), (8, 2), (8, 4), (8, 6), (16, 1), (16, 2), (16, 3), (32, 1), (32, 2), (64, 1), (128, 1)] * 2
CLEAN = [(8, 1)] * 14 + [(16, 1)] * 4 + [(8, 3), (32, 1)]
QUICK_FAULTY = [(8, 1), (8, 2), (16, 1)]
QUICK_CLEAN = [(8, 1)] * 2


@dataclass
class Score:
    """Counts per kind."""

    tp: int = 0
    fp: int = 0
    fn: int = 0
    ious: list[float] | None = None
    ious_effective: list[float] | None = None
    delays: list[float] | None = None

    def __post_init__(self) -> None:
        self.ious, self.ious_effective, self.delays = [], [], []


def make_job(
    rng: np.random.Generator, nodes: int, hours: float, faulty: bool, seed: int
) -> SyntheticTelemetry:
    """One job on ``nodes`` x 8 GPUs for ``hours``, with random faults when ``faulty``."""
    specs = tuple(NodeSpec(f"n{i:03d}", 8) for i in range(nodes))
    gpus = tuple(GpuRef(n.hostname, g) for n in specs for g in range(8))
    end = hours * 3600.0
    faults: list[Fault] = []
    free_nodes = [n.hostname for n in specs]
    rng.shuffle(free_nodes)
    free_gpus = [g for g in gpus]
    order = rng.permutation(len(free_gpus))
    free_gpus = [free_gpus[i] for i in order]
    taken_nodes: set[str] = set()
    if faulty:
        for kind in FaultKind:
            for _ in range(int(rng.integers(0, 3))):
                length = float(rng.uniform(600.0, max(900.0, 0.3 * end)))
                start = float(rng.uniform(0.05 * end, end - length - 60.0))
                start, length = round(start), round(length)
                whole_node = kind in NODE_KINDS or rng.random() < 0.25
                magnitude = float(rng.uniform(1.4, 2.0)) if kind is FaultKind.STRAGGLER else None
                if whole_node:
                    host = next(h for h in free_nodes if h not in taken_nodes)
                    taken_nodes.add(host)
                    free_gpus = [g for g in free_gpus if g.hostname != host]
                    faults.append(Fault(kind, start, start + length, nodes=(host,), magnitude=magnitude))
                else:
                    gpu = free_gpus.pop()
                    taken_nodes.add(gpu.hostname)
                    faults.append(Fault(kind, start, start + length, gpus=(gpu,), magnitude=magnitude))
    job = JobSpec("bench", "ann", gpus, 0.0, end + 1.0)
    return SyntheticTelemetry(TelemetryPlan(specs, (job,), tuple(faults), seed=seed))


def effective(gen: SyntheticTelemetry, fault: Fault, end_s: float) -> tuple[float, float] | None:
    """The real-time span of the steps a straggler or thermal fault slowed (None if none)."""
    job = gen.jobs[0]
    sched = gen.schedule(job, end_s)
    rows = set(np.flatnonzero(np.isin(job.rows, [gen.gpus.index(g) for g in gen.fault_gpus(fault)])).tolist())
    others = [r for r in range(job.rows.size) if r not in rows]
    slow = np.zeros(sched.compute.shape[1], dtype=bool)
    base = np.median(sched.compute[others], axis=0)
    for r in rows:
        slow |= sched.compute[r] > 1.05 * base
    idx = np.flatnonzero(slow)
    if idx.size == 0:
        return None
    return float(sched.edges[idx[0]]), float(min(sched.edges[idx[-1] + 1], end_s))


def iou(a: tuple[float, float], b: tuple[float, float]) -> float:
    inter = max(0.0, min(a[1], b[1]) - max(a[0], b[0]))
    union = max(a[1], b[1]) - min(a[0], b[0])
    return inter / union if union > 0 else 0.0


def score_job(
    gen: SyntheticTelemetry, findings: list[Finding], end_s: float, scores: dict[str, Score]
) -> None:
    """Add one job's matches to the per-kind scores."""
    truth_by_kind: dict[str, list[tuple[Fault, set[str], tuple[float, float], tuple[float, float]]]] = {}
    for f in gen.truth:
        targets = {str(g) for g in gen.fault_gpus(f)}
        declared = (f.start_s, f.end_s)
        eff = effective(gen, f, end_s) if f.kind in (FaultKind.STRAGGLER, FaultKind.THERMAL) else None
        truth_by_kind.setdefault(f.kind.value, []).append((f, targets, declared, eff or declared))
        if f.kind is FaultKind.THERMAL and eff is not None:
            truth_by_kind.setdefault("thermal-straggling", []).append((f, targets, eff, eff))
    for kind in FindingKind:
        s = scores[kind.value]
        truths = truth_by_kind.get(kind.value, [])
        explained = truth_by_kind.get("thermal-straggling", []) if kind is FindingKind.STRAGGLER else []
        hit: set[tuple[int, str]] = set()
        best: dict[int, tuple[float, float, float]] = {}
        for finding in (x for x in findings if x.kind is kind):
            span = (finding.start_s, finding.end_s)
            for gpu in finding.gpus:
                matched = False
                for i, (_, targets, declared, eff) in enumerate(truths):
                    window = eff if kind is FindingKind.STRAGGLER else declared
                    if gpu in targets and iou(span, window) > 0:
                        matched = True
                        hit.add((i, gpu))
                        cur = best.get(i, (-1.0, 0.0, 0.0))
                        if iou(span, declared) > cur[0]:
                            best[i] = (iou(span, declared), iou(span, eff), finding.start_s - declared[0])
                if not matched and any(gpu in t and iou(span, e) > 0 for _, t, e, _ in explained):
                    matched = True
                s.tp += matched
                s.fp += not matched
        for i, (_, targets, _, _) in enumerate(truths):
            s.fn += sum((i, g) not in hit for g in targets)
            if i in best:
                assert s.ious is not None and s.ious_effective is not None and s.delays is not None
                s.ious.append(best[i][0])
                s.ious_effective.append(best[i][1])
                s.delays.append(best[i][2])


def run_job(
    nodes: int, hours: float, faulty: bool, rng: np.random.Generator, seed: int
) -> tuple[SyntheticTelemetry, list[Finding], float, float, float]:
    gen = make_job(rng, nodes, hours, faulty, seed)
    end = hours * 3600.0
    series = gen.series(end / 2)
    t0 = time.perf_counter()
    chunks = list(gen.chunks(0.0, end, 1.0, chunk_s=600.0))
    generated = time.perf_counter()
    frame = frame_from_tables(series, chunks, job="bench", step_s=1.0, start_s=0.0, end_s=end)
    del chunks
    findings = detect(frame)
    done = time.perf_counter()
    return gen, findings, generated - t0, done - generated, frame.gpu_hours


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.split("\n", 1)[0])
    parser.add_argument("--seed", type=int, default=0)
    parser.add_argument("--quick", action="store_true", help="a 5-job smoke run (not written to results)")
    args = parser.parse_args()
    source = provenance(ROOT)
    rng = np.random.default_rng(args.seed)
    faulty, clean = (QUICK_FAULTY, QUICK_CLEAN) if args.quick else (FAULTY, CLEAN)
    scores = {k.value: Score() for k in FindingKind}
    analysis_s = gen_s = gpu_h = 0.0
    false_alarm_jobs = 0
    started = time.perf_counter()
    for i, (nodes, hours) in enumerate(faulty + clean):
        is_faulty = i < len(faulty)
        gen, findings, g_s, a_s, h = run_job(nodes, hours, is_faulty, rng, args.seed * 1000 + i)
        gen_s, analysis_s, gpu_h = gen_s + g_s, analysis_s + a_s, gpu_h + h
        if is_faulty:
            score_job(gen, findings, hours * 3600.0, scores)
        else:
            false_alarm_jobs += bool(findings)
        print(
            f"job {i:2d}: {nodes:3d} nodes x {hours:g} h, {len(gen.truth):2d} faults, "
            f"{len(findings):2d} findings, analysis {a_s:5.1f} s",
            flush=True,
        )
    write(
        scores,
        false_alarm_jobs,
        len(clean),
        analysis_s,
        gen_s,
        gpu_h,
        time.perf_counter() - started,
        args,
        source,
    )


def _mean(x: list[float] | None) -> float:
    return float(np.mean(x)) if x else float("nan")


def write(
    scores: dict[str, Score],
    false_alarm_jobs: int,
    clean_jobs: int,
    analysis_s: float,
    gen_s: float,
    gpu_h: float,
    wall_s: float,
    args: argparse.Namespace,
    source: dict[str, object],
) -> None:
    per_kind = {}
    print(f"\n{'kind':<12} {'prec':>6} {'recall':>6} {'IoU':>6} {'IoU eff':>7} {'delay s':>8} {'faults':>6}")
    for kind, s in scores.items():
        prec = s.tp / (s.tp + s.fp) if s.tp + s.fp else 1.0
        rec = s.tp / (s.tp + s.fn) if s.tp + s.fn else 1.0
        per_kind[kind] = {
            "precision": round(prec, 4),
            "recall": round(rec, 4),
            "mean_iou": round(_mean(s.ious), 4),
            "mean_iou_effective": round(_mean(s.ious_effective), 4),
            "median_delay_s": round(float(np.median(s.delays)), 1) if s.delays else None,
            "faults_detected": len(s.ious or []),
            "tp_gpus": s.tp,
            "fp_gpus": s.fp,
            "fn_gpus": s.fn,
        }
        print(
            f"{kind:<12} {prec:6.3f} {rec:6.3f} {_mean(s.ious):6.3f} {_mean(s.ious_effective):7.3f} "
            f"{per_kind[kind]['median_delay_s']!s:>8} {len(s.ious or []):6d}"
        )
    fa = false_alarm_jobs / clean_jobs if clean_jobs else 0.0
    speed = analysis_s / gpu_h * 100.0
    all_iou = [v for s in scores.values() for v in (s.ious or [])]
    print(
        f"false alarms on fault-free jobs: {false_alarm_jobs}/{clean_jobs}; mean IoU {_mean(all_iou):.3f}; "
        f"analysis {speed:.3f} s per 100 GPU-hours; whole run {wall_s:.0f} s"
    )
    if args.quick:
        return
    targets = {
        "precision_every_kind": {
            "target": ">= 0.95",
            "measured": min(v["precision"] for v in per_kind.values()),
            "pass": all(v["precision"] >= TARGETS["precision"] for v in per_kind.values()),
        },
        "recall_every_kind": {
            "target": ">= 0.95",
            "measured": min(v["recall"] for v in per_kind.values()),
            "pass": all(v["recall"] >= TARGETS["recall"] for v in per_kind.values()),
        },
        "false_alarm_rate": {
            "target": "<= 0.02",
            "measured": round(fa, 4),
            "pass": fa <= TARGETS["false_alarm_rate"],
        },
        "mean_interval_iou": {
            "target": ">= 0.8",
            "measured": round(_mean(all_iou), 4),
            "pass": _mean(all_iou) >= TARGETS["mean_iou"],
        },
        "analysis_s_per_100_gpu_hours": {
            "target": "<= 1.0",
            "measured": round(speed, 4),
            "pass": speed <= TARGETS["s_per_100_gpu_h"],
        },
    }
    result = {
        "benchmark": "diagnostics_bench",
        "command": f"python benchmarks/diagnostics_bench.py --seed {args.seed}",
        "setup": f"{len(FAULTY)} faulty jobs {sorted(set(FAULTY))} and {clean_jobs} fault-free jobs "
        "(nodes x 8 GPUs, hours), 1 s sampling, 0-2 faults of each kind per faulty job",
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": __import__("os").cpu_count(),
        },
        "measured": {
            "gpu_hours": round(gpu_h, 1),
            "analysis_s": round(analysis_s, 2),
            "generate_s": round(gen_s, 2),
            "wall_s": round(wall_s, 1),
            "false_alarm_jobs": false_alarm_jobs,
            "clean_jobs": clean_jobs,
        },
        "per_kind": per_kind,
        "targets": targets,
    }
    write_results(RESULTS, ROOT, result, source)


if __name__ == "__main__":
    main()
