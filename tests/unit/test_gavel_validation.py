"""Gavel's shipped traces through loadmaster's round simulator, against the authors' committed outputs."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import REFERENCE_DATA
from loadmaster.errors import ModelError
from loadmaster.model.hetero import HeteroCluster
from loadmaster.traces.gavel import read_step_jobs
from loadmaster.traces.rows import TraceError
from loadmaster.validation.gavel import read_throughputs, reference, replay

DATA = REFERENCE_DATA / "gavel"
REFERENCE = REFERENCE_DATA.parents[1] / "benchmarks" / "reference" / "gavel"
CLUSTER = HeteroCluster.parse("v100=8,p100=16,k80=24")


def test_vendored_throughput_table_reads() -> None:
    table = read_throughputs(DATA / "throughputs.csv")
    assert len(table.steps_per_s) == 83
    # ResNet-50 does not run on a K80 in Gavel's table; A3C is fastest on a V100.
    assert table.rates(("ResNet-50 (batch size 128)", 2), ("k80",)) == (0.0,)
    a3c = table.rates(("A3C", 1), ("k80", "p100", "v100"))
    assert a3c[0] < a3c[1] < a3c[2]


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ("model,scale_factor,k80\nA,1,2\n", "line 1: header must be job_type,scale_factor"),
        ("job_type,scale_factor,k80\nA,one,2\n", "line 2"),
        ("job_type,scale_factor,k80\nA,1,2\nA,1,3\n", r"line 3: \('A', 1\) appears twice"),
        ("job_type,scale_factor,k80\nA,1,-2\n", "steps/s must be >= 0"),
    ],
)
def test_bad_throughput_table_names_the_line(tmp_path: Path, text: str, message: str) -> None:
    path = tmp_path / "t.csv"
    path.write_text(text)
    with pytest.raises(ModelError, match=message):
        read_throughputs(path)


def test_step_jobs_keep_what_the_round_simulator_needs() -> None:
    jobs = read_step_jobs(DATA / "max_min_fairness.trace")
    assert len(jobs) == 96 and [j.job_id for j in jobs] == list(range(96))
    first = jobs[0]
    assert (first.job_type, first.scale_factor, first.total_steps, first.arrival_s) == (
        "ResNet-18 (batch size 128)",
        4,
        925982,
        0.0,
    )


def test_bad_step_job_line_names_file_line_and_field(tmp_path: Path) -> None:
    good = (DATA / "max_min_fairness.trace").read_text().splitlines()[0]
    fields = good.split("\t")
    fields[6] = "0"
    path = tmp_path / "bad.trace"
    path.write_text(f"{good}\n\n{chr(9).join(fields)}\n")
    with pytest.raises(TraceError, match="scale_factor") as caught:
        read_step_jobs(path)
    assert (caught.value.line, caught.value.field) == (3, "scale_factor")


def test_reference_output_parses_and_bad_one_is_refused(tmp_path: Path) -> None:
    outcome = reference(REFERENCE / "minimize_makespan" / "max_min_fairness_perf-ECOS.txt")
    assert len(outcome.jct_s) == 100 and outcome.makespan_s > max(outcome.jct_s.values()) - 1
    bad = tmp_path / "x.txt"
    bad.write_text("Average job completion time: 1 seconds\n")
    with pytest.raises(ModelError, match="not a Gavel simulator log"):
        reference(bad)


@pytest.mark.parametrize(
    ("trace", "policy"),
    [("minimize_makespan", "max_min_fairness_perf"), ("max_min_fairness", "finish_time_fairness_perf")],
)
def test_replay_is_within_two_percent_of_the_authors_simulator(trace: str, policy: str) -> None:
    ours, result = replay(DATA / f"{trace}.trace", DATA / "throughputs.csv", policy, CLUSTER)
    theirs = reference(REFERENCE / trace / f"{policy}-ECOS.txt")
    assert set(ours.jct_s) == set(theirs.jct_s)
    assert ours.avg_jct_s == pytest.approx(theirs.avg_jct_s, rel=0.02)
    assert ours.makespan_s == pytest.approx(theirs.makespan_s, rel=0.02)
    assert result.recomputations > 1 and result.rounds > 100


@pytest.mark.parametrize("trace", ["max_min_fairness", "minimize_makespan"])
def test_fifo_replay_matches_the_authors_simulator_job_for_job(trace: str) -> None:
    # No solver is involved, so the round mechanism alone decides: every job's JCT agrees
    # to the 3 decimals Gavel prints.
    ours, _ = replay(DATA / f"{trace}.trace", DATA / "throughputs.csv", "fifo_perf", CLUSTER)
    theirs = reference(REFERENCE / trace / "fifo_perf-ECOS.txt")
    assert {k: round(v, 3) for k, v in ours.jct_s.items()} == pytest.approx(theirs.jct_s, abs=1e-3)
    assert ours.makespan_s == pytest.approx(theirs.makespan_s, abs=1e-3)


def test_unknown_policy_is_refused_with_the_allowed_names() -> None:
    with pytest.raises(
        ModelError, match="allowed: fifo_perf, max_min_fairness_perf, finish_time_fairness_perf"
    ):
        replay(DATA / "max_min_fairness.trace", DATA / "throughputs.csv", "fifo", CLUSTER)
