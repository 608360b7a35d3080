"""Several profiles in one process, one per schedulerName (kube-scheduler's profiles)."""

from __future__ import annotations

import sys
from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

sys.path.insert(0, str(Path(__file__).parents[1]))

from builders import a_cluster, a_job, a_snapshot, bind_of, nodes_of, profile
from loadmaster.cli.kube import scheduler_profiles
from loadmaster.errors import ConfigError
from loadmaster.kube.profiles import ProfileScheduler, skipped_walks
from loadmaster.model import Job
from loadmaster.scheduling import Scheduler


def named(job: Job, name: str) -> Job:
    return replace(job, scheduler_name=name)


def two_profiles() -> ProfileScheduler:
    return ProfileScheduler(
        {
            "strict": Scheduler(profile("fifo", "gang", "binpack")),
            "spread": Scheduler(profile("fifo", "gang", "spread")),
        }
    )


def test_each_job_goes_to_its_profile_and_room_is_shared() -> None:
    table = a_cluster().nodes(2, gpus=8).build()
    jobs = [
        named(a_job("huge").gpus(16).build(), "strict"),  # never fits: strict FIFO blocks its queue
        named(a_job("a-small").gpus(2).submitted(1).build(), "strict"),
        named(a_job("b-1").gpus(8).submitted(2).build(), "spread"),
        named(a_job("b-2").gpus(8).submitted(3).build(), "spread"),
        named(a_job("b-3").gpus(1).submitted(4).build(), "spread"),
    ]
    result = two_profiles().cycle(a_snapshot(table).pending(*jobs).build(), 0.0, np.random.default_rng(0))
    assert bind_of(result, "a-small") is None and "queued behind huge" in result.statuses["a-small"].reason
    assert sorted(nodes_of(table, bind_of(result, "b-1")) + nodes_of(table, bind_of(result, "b-2"))) == [
        "n0",
        "n1",
    ]  # type: ignore[arg-type]
    assert bind_of(result, "b-3") is None and "gpu" in result.statuses["b-3"].reason  # no GPU left


def test_room_bound_by_an_earlier_profile_is_used_for_the_later_ones() -> None:
    table = a_cluster().nodes(1, gpus=8).build()
    jobs = [
        named(a_job("a").gpus(6).build(), "strict"),
        named(a_job("b").gpus(4).submitted(1).build(), "spread"),
    ]
    result = two_profiles().cycle(a_snapshot(table).pending(*jobs).build(), 0.0, np.random.default_rng(0))
    assert bind_of(result, "a") is not None and bind_of(result, "b") is None
    assert "largest free block is 2" in result.statuses["b"].reason


@pytest.mark.parametrize(
    ("options", "expected"),
    [
        ([], {"loadmaster": "fair"}),
        (["loadmaster=fair", "loadmaster-batch=slurm"], {"loadmaster": "fair", "loadmaster-batch": "slurm"}),
    ],
)
def test_scheduler_name_options(options: list[str], expected: dict[str, str]) -> None:
    assert scheduler_profiles(options, "fair") == expected


@pytest.mark.parametrize(
    ("options", "why"), [(["loadmaster"], "NAME=PROFILE"), (["a=x", "a=y"], "given twice")]
)
def test_bad_scheduler_name_options_say_what_is_allowed(options: list[str], why: str) -> None:
    with pytest.raises(ConfigError, match=why):
        scheduler_profiles(options, "fair")


def test_skipped_backfill_walks_are_counted_over_every_profile() -> None:
    """A periodic backfill walk skipped by any profile counts; a profile without one adds nothing."""
    periodic = ("fifo", "gang", "first-fit", "backfill")
    args = {"backfill": {"interval_s": 30.0}}
    several = ProfileScheduler(
        {
            "strict": Scheduler(profile("fifo", "gang", "binpack")),
            "periodic": Scheduler(profile(*periodic, args=args)),
        }
    )
    table = a_cluster().nodes(1, gpus=8).build()
    jobs = [named(a_job("w").gpus(16).build(), "periodic"), named(a_job("s").gpus(16).build(), "strict")]
    snapshot = a_snapshot(table).pending(*jobs).build()
    rng = np.random.default_rng(0)
    for now in (0.0, 1.0, 2.0):  # a walk, then two cycles within its interval
        several.cycle(snapshot, now, rng)
    assert skipped_walks(several) == 2
    alone = ProfileScheduler({"periodic": Scheduler(profile(*periodic, args=args))})
    for now in (0.0, 1.0):  # one profile: its scheduler runs the cycle itself
        alone.cycle(a_snapshot(table).pending(jobs[0]).build(), now, rng)
    assert skipped_walks(alone) == 1
    assert skipped_walks(Scheduler(profile("fifo", "gang", "binpack"))) == 0
