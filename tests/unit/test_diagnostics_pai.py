"""On the Alibaba PAI v2020 mini-batch times: job_1's straggler and job_4's slow group."""

from __future__ import annotations

from conftest import reference_data
from loadmaster.diagnostics import read_pai_minibatch, slow_group, stragglers

FOLDER = "telemetry/alibaba-pai-v2020-minibatch-time"


def test_job_1_straggler_is_worker_6_in_the_middle_of_training() -> None:
    it = read_pai_minibatch(reference_data(f"{FOLDER}/job_1_norm.csv"))
    found = stragglers(it)
    assert [f.gpus for f in found] == [("worker 6",)]
    episode = found[0]
    first, last = float(it.iterations[0]), float(it.iterations[-1])
    # "emerges in the middle of the training": an interval well inside the run.
    assert first + 0.2 * (last - first) < episode.start_s <= episode.end_s < last - 0.2 * (last - first)
    assert episode.evidence.numbers["slow_iterations"] >= 5
    assert slow_group(it) is None


def test_job_4_slow_group_is_identified() -> None:
    it = read_pai_minibatch(reference_data(f"{FOLDER}/job_4_norm.csv"))
    group = slow_group(it)
    assert group is not None
    assert set(group.gpus) == {f"worker {w}" for w in (0, 5, 6, 7, 8)}


def test_steady_jobs_have_no_slow_group() -> None:
    for job in ("job_2", "job_3"):
        assert slow_group(read_pai_minibatch(reference_data(f"{FOLDER}/{job}_norm.csv"))) is None
