"""Where a profile's simulation time goes: cProfile of one run, the top functions by own and total time.

    python benchmarks/sim_profile.py slurm                       # the lab demo's cluster and workload
    python benchmarks/sim_profile.py sds --cluster large --jobs 10000 --load 1.1

Prints the simulation's CPU seconds (without the profiler: a separate run
first, so the figure is the real one) and cProfile's tables. docs/simulator.md
("Where the time goes") quotes its output.
"""

from __future__ import annotations

import argparse
import cProfile
import pstats
import time

from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.scheduling import Scheduler
from loadmaster.sim import SimOptions, simulate


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--cluster", default="lab")
    parser.add_argument("--workload", default=None, help="default: the cluster's name")
    parser.add_argument("--jobs", type=int, default=None)
    parser.add_argument("--load", type=float, default=None)
    parser.add_argument("--top", type=int, default=25)
    parser.add_argument("--no-profile", action="store_true", help="only time the run")
    args = parser.parse_args()
    cluster = load_cluster(args.cluster)
    workload = load_workload(args.workload or args.cluster, cluster, jobs=args.jobs, load=args.load)
    profile = load_profiles()[args.profile]
    scheduler = Scheduler(profile)
    started = time.process_time()
    result = simulate(cluster.nodes, scheduler, workload.jobs, SimOptions())
    cpu = time.process_time() - started
    print(f"{args.profile}: {len(workload.jobs)} jobs, {len(result.timeline.time_s)} cycles, {cpu:.2f} s CPU")
    # getattr: the script also times older code (before the memo) for before/after tables
    searched, reused = getattr(scheduler, "search_counts", (0, 0))
    if searched or reused:
        settled = getattr(scheduler, "settled_searches", 0)
        print(
            f"reservation searches: {searched} made, {reused} answered from the last cycle's, "
            f"{settled} of those made tried only the times up to the last change"
        )
    remembered, tried = getattr(scheduler, "placements_remembered", (0, 0))
    if remembered or tried:
        print(
            f"failed placements: {tried} tried, "
            f"{remembered} answered from an earlier cycle's on the same free resources"
        )
    if args.no_profile:
        return
    profiler = cProfile.Profile()
    profiler.enable()
    simulate(cluster.nodes, Scheduler(profile), workload.jobs, SimOptions())
    profiler.disable()
    stats = pstats.Stats(profiler)
    stats.sort_stats("cumulative").print_stats(args.top)
    stats.sort_stats("tottime").print_stats(args.top)


if __name__ == "__main__":
    main()
