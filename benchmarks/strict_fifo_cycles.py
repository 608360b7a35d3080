"""Why a strict FIFO profile's cost grows faster than its job count: which cycles run the scheduler.

    python benchmarks/strict_fifo_cycles.py binpack --jobs 20000
    python benchmarks/strict_fifo_cycles.py binpack --jobs 100000

Counts the simulator's cycles, those that ran the scheduler (a cycle with no
job waiting costs almost nothing), the scheduler's CPU time per cycle and the
mean queue length it saw, and the *repeat* cycles: no decision, after a cycle
with no decision and with no job ended since, so the cluster and the blocked
head are what they were (an exact skip of such a cycle would change nothing),
and how many cycles the scheduler answered as repeats of the last one without
walking the queue (``Scheduler.skipped_cycles``; 0 on code without the skip).
On 1,000 x 8 GPUs at load 1.1 (docs/simulator.md, "Linear cost for strict FIFO"
and "Repeat cycles skipped (strict FIFO)").
"""

from __future__ import annotations

import argparse
import time

import numpy as np

from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model import ClusterSnapshot
from loadmaster.scheduling import CycleResult, Profile, Scheduler
from loadmaster.sim import SimOptions
from loadmaster.sim.simulator import Simulator


class CountingScheduler(Scheduler):
    """A scheduler that times its cycles and counts the repeat cycles (see the module docstring)."""

    def __init__(self, profile: Profile) -> None:
        super().__init__(profile)
        self.cycles = 0
        self.cycle_s = 0.0
        self.queued = 0
        self.repeats = 0
        self.repeat_s = 0.0
        self.ended = True
        """A job ended (or was rejected) since the last cycle (set by the simulator's progress callback)."""
        self._idle = False

    def cycle(self, snapshot: ClusterSnapshot, now: float, rng: np.random.Generator) -> CycleResult:
        started = time.process_time()
        result = super().cycle(snapshot, now, rng)
        spent = time.process_time() - started
        self.cycles += 1
        self.cycle_s += spent
        self.queued += len(snapshot.pending)
        idle = not result.decisions
        if idle and self._idle and not self.ended:
            self.repeats += 1
            self.repeat_s += spent
        self._idle, self.ended = idle, False
        return result

    def job_ended(self, count: int) -> None:
        self.ended = True


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("profile")
    parser.add_argument("--jobs", type=int, default=20_000)
    parser.add_argument("--load", type=float, default=1.1)
    args = parser.parse_args()
    cluster = load_cluster("large")
    workload = load_workload("large", cluster, jobs=args.jobs, load=args.load)
    scheduler = CountingScheduler(load_profiles()[args.profile])
    sim = Simulator(cluster.nodes, scheduler, workload.jobs, SimOptions(progress=scheduler.job_ended))
    started = time.process_time()
    sim.start()
    steps = 0
    while sim.events:
        sim.step()
        steps += 1
    cpu = time.process_time() - started
    ran = max(scheduler.cycles, 1)
    print(
        f"{args.profile}, {args.jobs} jobs, load {args.load:g}: {cpu:.2f} s CPU, {steps} cycles, "
        f"{scheduler.cycles} ran the scheduler ({scheduler.cycle_s:.2f} s, "
        f"{scheduler.cycle_s / ran * 1e6:.0f} us each, mean queue {scheduler.queued / ran:.0f}), "
        f"{scheduler.repeats} repeat cycles ({scheduler.repeat_s:.2f} s), "
        f"{getattr(scheduler, 'skipped_cycles', 0)} skipped"
    )


if __name__ == "__main__":
    main()
