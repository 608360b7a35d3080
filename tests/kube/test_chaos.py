"""The chaos model (tests/kube/chaos.py) over a few fixed-seed runs: every invariant holds at every step."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from kube.chaos import KubeChaos

CI = settings(
    max_examples=6,
    stateful_step_count=30,
    derandomize=True,
    deadline=None,
    database=None,
    suppress_health_check=[HealthCheck.too_slow, HealthCheck.filter_too_much],
)


def test_the_scheduler_stays_safe_under_chaos() -> None:
    run_state_machine_as_test(KubeChaos, settings=CI)
