"""The chaos model (tests/kube/chaos.py) over a few fixed-seed runs: every invariant holds at every step."""

from __future__ import annotations

from hypothesis import HealthCheck, settings
from hypothesis.stateful import run_state_machine_as_test

from kube.chaos import TALLY, KubeChaos, KubePreemptChaos

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


def test_victims_keep_their_gpus_while_preemption_is_in_flight() -> None:
    """The preemption scenario evicts, and the over-commit invariant is judged while victims terminate."""
    before = TALLY.snapshot()
    run_state_machine_as_test(KubePreemptChaos, settings=settings(CI, max_examples=8, stateful_step_count=40))
    after = TALLY.snapshot()
    assert after["evictions"] > before["evictions"], "the preemption scenario never preempted"
    assert after["checks_with_victims_terminating"] > before["checks_with_victims_terminating"]
