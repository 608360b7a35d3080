"""A job that asks for at least as much as one that just failed is not tried again in the cycle."""

from __future__ import annotations

import pytest

from builders import a_cluster, a_job, a_snapshot, bind_of, cycle, profile
from loadmaster.scheduling.actions import allocate

LAX = profile("fifo", "gang", "first-fit", strict=False)


def test_a_larger_request_after_a_failure_fails_with_the_smaller_ones_reason(
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    cluster = a_cluster().nodes(2, gpus=4).build()
    snapshot = (
        a_snapshot(cluster)
        .running(a_job("busy").tasks(2).gpus(3), "n0", "n1")  # 1 GPU left on each node
        .pending(a_job("two").gpus(2), a_job("four").gpus(4), a_job("one").gpus(1))
        .build()
    )
    attempts: list[str] = []
    real = allocate.place_job

    def counting(pending, *args, **kwargs):  # type: ignore[no-untyped-def]
        attempts.append(pending.job.id)
        return real(pending, *args, **kwargs)

    monkeypatch.setattr(allocate, "place_job", counting)
    result = cycle(LAX, snapshot)

    assert attempts == ["two", "one"]  # "four" is never tried: it needs more than "two" did
    assert bind_of(result, "one") is not None
    assert result.statuses["two"].reason.startswith("gpu: want 2 on one node, largest free block is 1")
    assert result.statuses["four"].reason == f"as for a smaller request, {result.statuses['two'].reason}"


def test_a_request_smaller_in_one_resource_is_still_tried() -> None:
    cluster = a_cluster().nodes(1, gpus=4).build()
    snapshot = (
        a_snapshot(cluster)
        .running(a_job("busy").gpus(3), "n0")
        .pending(a_job("wide").tasks(2).gpus(1), a_job("narrow").gpus(1))
        .build()
    )
    result = cycle(LAX, snapshot)
    assert bind_of(result, "wide") is None  # 2 tasks need 2 GPUs; 1 is free
    assert bind_of(result, "narrow") is not None  # fewer tasks: a different group, tried and placed
