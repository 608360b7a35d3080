"""Lab comparisons that simulate every policy on one (load, seed) workload per task, in worker processes.

``rl_load_curve.py`` and ``rl_fair_frontier.py`` share the options (held-out seeds, jobs per
workload, loads, workers, output file) and the loop that hands the workloads to a process pool
and prints how many are done.
"""

from __future__ import annotations

import argparse
from collections.abc import Callable, Sequence
from pathlib import Path
from typing import TypeVar

from loadmaster.parallel import LocalPool, TaskError
from results_io import seed_range

Cell = tuple[float, int, int]
"""(load, workload seed, jobs)."""

Task = TypeVar("Task")
Row = TypeVar("Row")


def parser(doc: str | None, *, seeds: str, loads: Sequence[float], out: Path) -> argparse.ArgumentParser:
    """``--seeds first-last --jobs N --loads a,b --workers K --out FILE`` with these defaults."""
    made = argparse.ArgumentParser(description=doc, formatter_class=argparse.RawDescriptionHelpFormatter)
    made.add_argument("--seeds", default=seeds, help="held-out workload seeds, first-last")
    made.add_argument("--jobs", type=int, default=1024, help="jobs per workload")
    made.add_argument("--loads", default=",".join(f"{x:g}" for x in loads), help="comma-separated loads")
    made.add_argument("--workers", type=int, default=2, help="workloads simulated at once")
    made.add_argument("--out", type=Path, default=out)
    return made


def cells(args: argparse.Namespace) -> list[Cell]:
    """Every (load, seed) workload the options name, load by load."""
    loads = tuple(float(x) for x in args.loads.split(","))
    return [(load, seed, args.jobs) for load in loads for seed in seed_range(args.seeds)]


def command(script: str, args: argparse.Namespace) -> str:
    """The command line that reruns ``script`` with these options (for the results file)."""
    return (
        f"python benchmarks/{script} --seeds {args.seeds} --jobs {args.jobs} --loads {args.loads} "
        f"--workers {args.workers}"
    )


def simulate(task: Callable[[Task], list[Row]], todo: Sequence[Task], workers: int) -> list[Row]:
    """``task`` on every cell in ``workers`` processes, with a count of the workloads done (cells
    are :data:`Cell` for the lab comparisons, any picklable task for others; rows are
    ``loadmaster.rl.evaluate.EvalRow`` for them)."""
    rows: list[Row] = []
    with LocalPool(workers) as pool:
        for cell in todo:
            pool.submit(task, cell)
        done = 0
        while done < len(todo):
            for item in pool.wait(1.0):
                if item.error is not None:
                    raise TaskError(item.error)
                rows.extend(item.value)
                done += 1
                print(f"\r[{done:>3}/{len(todo)}] workloads simulated", end="", flush=True)
    print()
    return rows
