"""The switches that reproduce the RLScheduler simulator, each on a case computed by hand.

Every switch defaults to loadmaster's own behaviour; each case shows the
default and the switched behaviour side by side. Time limits equal durations
unless said otherwise, so reservations are exact.
"""

from __future__ import annotations

import pytest

from builders import JobBuilder, a_cluster, a_job, by_id, profile, trace
from loadmaster.model import Job, TaskRequest, TraceJob
from loadmaster.scheduling import Scheduler
from loadmaster.sim import SimOptions, simulate
from loadmaster.sim.events import EventQueue, Kind
from loadmaster.validation import rlscheduler


def exact(job: JobBuilder, duration_s: float) -> TraceJob:
    return trace(job.limit(duration_s), duration_s)


def starts_of(plugins: tuple[str, ...], args: dict[str, dict[str, object]], jobs: list[TraceJob], gpus: int):
    cluster = a_cluster().nodes(1, gpus=gpus).build()
    chosen = profile(*plugins, args=args)
    return by_id(simulate(cluster, Scheduler(chosen), jobs, SimOptions()).jobs, "start_s")


# commit: "long" becomes the blocked head at t=10; "short", better by SJF, arrives at t=20.
COMMIT_JOBS = [
    exact(a_job("a").gpus(2).submitted(0), 100),
    exact(a_job("long").gpus(2).submitted(10), 50),
    exact(a_job("short").gpus(2).submitted(20), 5),
]


@pytest.mark.parametrize(
    ("commit", "expected"),
    [(False, {"short": 100.0, "long": 105.0}), (True, {"long": 100.0, "short": 150.0})],
)
def test_commit_keeps_the_chosen_head_first_until_it_starts(commit: bool, expected: dict[str, float]) -> None:
    started = starts_of(("sjf",), {"sjf": {"strict": True, "commit": commit}}, COMMIT_JOBS, gpus=2)

    assert {j: started[j] for j in expected} == expected


def test_commit_with_backfill_keeps_the_committed_head_first() -> None:
    jobs = [*COMMIT_JOBS, exact(a_job("tiny").gpus(2).submitted(30), 1)]
    args: dict[str, dict[str, object]] = {"sjf": {"commit": True}, "backfill": {"starvation_s": None}}

    started = starts_of(("sjf", "backfill"), args, jobs, gpus=2)

    # tiny cannot start before a (it needs both GPUs); then long (committed) goes first, then tiny, short.
    assert (started["long"], started["tiny"], started["short"]) == (100.0, 150.0, 151.0)


# A 5-GPU machine: "a" holds 3 GPUs until t=100; head "h" (4 GPUs) reserves t=100, leaving 1 GPU spare.
def reservation_case(candidate: JobBuilder, limit_s: float) -> list[TraceJob]:
    return [
        exact(a_job("a").gpus(3).submitted(0), 100),
        exact(a_job("h").gpus(4).submitted(1), 10),
        exact(candidate.gpus(1).submitted(2), limit_s),
    ]


@pytest.mark.parametrize(
    ("limit_s", "easy_start", "strict_start"),
    [
        (50.0, 2.0, 2.0),  # ends at 52, before the reservation: starts now either way
        (98.0, 2.0, 100.0),  # ends exactly at 100: EASY lets it start, the strict rule does not
        (200.0, 2.0, 100.0),  # still running at 100: only EASY's spare GPU lets it start now
    ],
)
def test_end_before_reservation_forbids_spare_gpus_and_ending_at_the_reserved_start(
    limit_s: float, easy_start: float, strict_start: float
) -> None:
    jobs = reservation_case(a_job("x"), limit_s)
    found = {}
    for rule in (False, True):
        args: dict[str, dict[str, object]] = {
            "backfill": {"starvation_s": None, "end_before_reservation": rule}
        }
        found[rule] = starts_of(("fifo", "backfill"), args, jobs, gpus=5)["x"]

    assert (found[False], found[True]) == (easy_start, strict_start)
    assert starts_of(("fifo", "backfill"), {}, jobs, gpus=5)["h"] == 100.0


@pytest.mark.parametrize(("submission_order", "first"), [(False, "q"), (True, "p")])
def test_submission_order_backfills_first_come_first_served(submission_order: bool, first: str) -> None:
    # "h" (3 GPUs, shortest) reserves t=100; when z ends at t=10, p and q (1 GPU each, p submitted
    # first, q shorter) both end before the reservation but only one fits.
    jobs = [
        exact(a_job("a").gpus(2).submitted(0), 100),
        exact(a_job("z").gpus(1).submitted(0), 10),
        exact(a_job("h").gpus(3).submitted(1), 10),
        exact(a_job("p").gpus(1).submitted(2), 60),
        exact(a_job("q").gpus(1).submitted(3), 50),
    ]
    args: dict[str, dict[str, object]] = {
        "backfill": {"starvation_s": None, "submission_order": submission_order}
    }

    started = starts_of(("sjf", "backfill"), args, jobs, gpus=3)

    assert started[first] == 10.0
    assert started["h"] == 100.0


def test_submission_order_keeps_the_policys_order_among_equal_submit_times() -> None:
    # The reference (HPCSimPickJobs.py, moveforward_for_resources_backfill_greedy) re-sorts its queue
    # by submit time with Python's stable sort before each backfill pass, so among equal submit times
    # the jobs stay in the order of the policy's last sort. On a 10-processor machine: R holds all 10
    # until t=100; h0 (5) is the head meanwhile and starts at 100, until 150; a, b, s (submitted
    # together at t=2) were queued behind it. SJF then picks s (6, the shortest) as head: it reserves
    # t=150; a (ends 130) and b (ends 120) both fit before it but only one fits now: b, ahead of a
    # by SJF (job-number order would pick a).
    specs = [("1", 10, 0, 100), ("2", 5, 1, 50), ("3", 5, 2, 30), ("4", 5, 2, 20), ("5", 6, 2, 10)]
    jobs = [
        TraceJob(Job(i, "", "", float(t), 1, TaskRequest(gpu_milli=n * 1000), float(d)), float(d))
        for i, n, t, d in specs
    ]
    chosen = rlscheduler.profile("SJF", backfill=True)
    table = simulate(rlscheduler.machine(10), Scheduler(chosen), jobs, rlscheduler.OPTIONS).jobs
    started = by_id(table, "start_s")

    assert (started["2"], started["4"], started["5"]) == (100.0, 100.0, 150.0)
    assert started["3"] > 100.0


def test_arrivals_first_swaps_the_tie_order_and_pop_next_takes_one_event() -> None:
    orders = {}
    for arrivals_first in (False, True):
        queue = EventQueue(arrivals_first)
        queue.push(5.0, Kind.ARRIVAL, 1)
        queue.push(5.0, Kind.COMPLETION, 2)
        queue.push(5.0, Kind.TICK)
        orders[arrivals_first] = [queue.pop_next()[0] for _ in range(3)]

    assert orders[False] == [(Kind.COMPLETION, 2), (Kind.ARRIVAL, 1), (Kind.TICK, -1)]
    assert orders[True] == [(Kind.ARRIVAL, 1), (Kind.COMPLETION, 2), (Kind.TICK, -1)]


@pytest.mark.parametrize(("per_event", "cycles_at_10"), [(False, 1), (True, 3)])
def test_cycle_per_event_runs_a_cycle_after_each_event(per_event: bool, cycles_at_10: int) -> None:
    cluster = a_cluster().nodes(1, gpus=2).build()
    jobs = [exact(a_job(f"j{i}").submitted(10), 5) for i in range(3)]
    options = SimOptions(cycle_per_event=per_event)

    result = simulate(cluster, Scheduler(profile("fifo")), jobs, options)

    assert list(result.timeline.time_s).count(10.0) == cycles_at_10
    assert by_id(result.jobs, "start_s") == {"j0": 10.0, "j1": 10.0, "j2": 15.0}


@pytest.mark.parametrize(
    ("per_event", "arrivals_first", "expected"),
    [
        (False, False, {"j2": 100.0, "j1": 105.0}),
        (False, True, {"j2": 100.0, "j1": 105.0}),
        (True, False, {"j1": 100.0, "j2": 150.0}),
        (True, True, {"j1": 100.0, "j2": 150.0}),
    ],
)
def test_a_cycle_per_event_decides_on_the_first_arrival_alone(
    per_event: bool, arrivals_first: bool, expected: dict[str, float]
) -> None:
    # At t=100 "a" ends and j1, then j2 (shorter, so first by SJF) arrive. One cycle per time sees
    # both and starts j2 first. A cycle per event decides on j1 alone: it starts j1 at once
    # (completion first), or commits to it until the completion at the same time (arrivals first).
    cluster = a_cluster().nodes(1, gpus=2).build()
    jobs = [
        exact(a_job("a").gpus(2).submitted(0), 100),
        exact(a_job("j1").gpus(2).submitted(100), 50),
        exact(a_job("j2").gpus(2).submitted(100), 5),
    ]
    chosen = profile("sjf", args={"sjf": {"strict": True, "commit": True}})
    options = SimOptions(cycle_per_event=per_event, arrivals_first=arrivals_first)

    started = by_id(simulate(cluster, Scheduler(chosen), jobs, options).jobs, "start_s")

    assert {j: started[j] for j in expected} == expected
