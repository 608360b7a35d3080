"""Golden test: the RLScheduler heuristic table (SC'20) on Lublin-1, through our simulator.

Five policies x with and without backfilling x 10 sequences of 1,024 jobs;
bounded slowdown and utilisation must match the published per-sequence
values (../shared/data/swf/rlscheduler_reference_heuristics.json) and means
to 2 decimals. See docs/validation.md for the protocol and the switches.
The whole table takes about a minute on two cores.
"""

from __future__ import annotations

import os
from pathlib import Path

import pytest

from conftest import shared_data
from loadmaster.validation.rlscheduler import (
    POLICIES,
    Reference,
    Table,
    read_reference,
    reproduce,
    same_to_2_decimals,
)

pytestmark = pytest.mark.slow

CELLS = [
    (policy, backfill, metric)
    for backfill in (False, True)
    for policy in POLICIES
    for metric in ("bsld", "utilisation")
]


@pytest.fixture(scope="module")
def reference() -> Reference:
    return read_reference(shared_data("swf/rlscheduler_reference_heuristics.json"))


@pytest.fixture(scope="module")
def ours(reference: Reference) -> Table:
    trace: Path = shared_data("swf/lublin_256.swf")
    return reproduce(trace, starts=reference.starts, workers=min(os.cpu_count() or 1, 2))


@pytest.mark.parametrize(
    ("policy", "backfill", "metric"),
    CELLS,
    ids=[f"{p}-{'backfill' if b else 'no-backfill'}-{m}" for p, b, m in CELLS],
)
def test_every_sequence_and_the_mean_match_the_published_table(
    ours: Table, reference: Reference, policy: str, backfill: bool, metric: str
) -> None:
    cell, published = ours[policy, backfill], reference.cells[policy, backfill]
    mine = cell.bsld if metric == "bsld" else cell.utilisation
    theirs = published.bsld if metric == "bsld" else published.utilisation
    mean = cell.mean_bsld if metric == "bsld" else cell.mean_utilisation

    mismatched = {
        start: (round(a, 4), b)
        for start, a, b in zip(reference.starts, mine, theirs, strict=True)
        if not same_to_2_decimals(a, b)
    }
    assert not mismatched, f"sequence start: (ours, published) = {mismatched}"
    assert same_to_2_decimals(mean, reference.means[policy, backfill, metric])
