"""Golden test: the RLScheduler heuristic table (SC'20) on Lublin-1, through our simulator.

Five policies x with and without backfilling x 10 sequences of 1,024 jobs;
bounded slowdown and utilisation must match the published per-sequence
values (data/reference/swf/rlscheduler_reference_heuristics.json) and means
to 2 decimals. See docs/validation.md for the protocol and the switches.
The whole table takes about a minute on two cores.
"""

from __future__ import annotations

import os
from pathlib import Path

import numpy as np
import pytest

from conftest import reference_data
from loadmaster.scheduling.observe import ObservationSpec
from loadmaster.scheduling.policy_net import JOB_INPUTS, context_size, save_policy
from loadmaster.validation.rlscheduler import (
    HELD_OUT_FROM,
    POLICIES,
    Reference,
    Table,
    TraceWindows,
    learned_cell,
    read_jobs,
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
    return read_reference(reference_data("swf/rlscheduler_reference_heuristics.json"))


@pytest.fixture(scope="module")
def ours(reference: Reference) -> Table:
    trace: Path = reference_data("swf/lublin_256.swf")
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


@pytest.mark.parametrize("backfill", [False, True], ids=["no-backfill", "backfill"])
def test_an_sjf_shaped_learned_order_reproduces_the_published_sjf_sequence(
    reference: Reference, backfill: bool, tmp_path: Path
) -> None:
    """The learned plugin in the protocol (head picked, committed, blocking) with a checkpoint
    scoring -log(1 + requested hours) is SJF: it must give SJF's published bounded slowdown."""
    weight = np.zeros((len(JOB_INPUTS) + context_size(ObservationSpec()), 1), dtype=np.float32)
    weight[JOB_INPUTS.index("log_limit_h"), 0] = -1.0
    path = tmp_path / "sjf.npz"
    with path.open("wb") as fh:
        save_policy(fh, [(weight, np.zeros(1, dtype=np.float32))], ObservationSpec(), {})
    trace: Path = reference_data("swf/lublin_256.swf")
    start = reference.starts[0]
    cell = learned_cell(trace, str(path), backfill, starts=(start,))
    assert same_to_2_decimals(cell.bsld[0], reference.cells["SJF", backfill].bsld[0])


def test_trace_windows_keep_to_the_jobs_before_the_held_out_sequences() -> None:
    trace: Path = reference_data("swf/lublin_256.swf")
    evaluated = {t.job.id for t in read_jobs(trace)[HELD_OUT_FROM:]}
    windows = TraceWindows(str(trace), jobs=256, before=HELD_OUT_FROM)
    starts = set()
    for index in range(20):
        nodes, jobs, _ = windows.episode(0, index)
        assert len(jobs) == 256 and nodes.total_gpus == 256
        assert not evaluated & {t.job.id for t in jobs}
        starts.add(jobs[0].job.id)
    assert len(starts) > 10  # seeded windows, not one window over and over
