"""Property tests are deterministic by default: a test run fails only on code that changed."""

from __future__ import annotations

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

import fuzzing


@pytest.mark.skipif(fuzzing.PROFILE == "fuzz", reason="the fuzz profile draws new examples on purpose")
def test_property_tests_draw_the_same_examples_on_every_run() -> None:
    runs: list[list[int]] = [[], []]
    for seen in runs:

        @settings(max_examples=fuzzing.examples(30))
        @given(st.integers())
        def probe(value: int) -> None:
            seen.append(value)  # noqa: B023  (each run appends to its own list)

        probe()
    assert runs[0] == runs[1]
    assert settings.default.database is None, "failures of other runs must not change what CI checks"


def test_fuzzing_explores_more_examples_than_the_default() -> None:
    assert fuzzing.examples(40) == (40 * fuzzing.FUZZ_FACTOR if fuzzing.PROFILE == "fuzz" else 40)
    assert fuzzing.FUZZ_FACTOR > 1
