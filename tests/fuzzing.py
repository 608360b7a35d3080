"""How many examples a property test explores: a fixed, bounded set by default, many more under fuzzing.

The Hypothesis profiles are registered in conftest.py: ``ci`` (the default) derandomizes, so every
run checks the same examples; ``fuzz`` (``make fuzz``, or ``HYPOTHESIS_PROFILE=fuzz``) draws new
ones and :func:`examples` multiplies each test's budget by :data:`FUZZ_FACTOR`.
"""

from __future__ import annotations

import os

PROFILES = ("ci", "fuzz")
PROFILE = os.environ.get("HYPOTHESIS_PROFILE", "ci")
if PROFILE not in PROFILES:
    raise ValueError(f"HYPOTHESIS_PROFILE must be one of {', '.join(PROFILES)}, got {PROFILE!r}")

FUZZ_FACTOR = 10
"""How many times more examples each property test explores under ``fuzz``."""


def examples(budget: int) -> int:
    """``budget`` examples by default, ``FUZZ_FACTOR`` times as many under the fuzz profile."""
    return budget * FUZZ_FACTOR if PROFILE == "fuzz" else budget
