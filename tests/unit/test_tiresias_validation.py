"""The Tiresias replay against the authors' simulator's committed outputs (benchmarks/reference/tiresias)."""

from __future__ import annotations

from pathlib import Path

import pytest

from conftest import reference_data as shared_data
from loadmaster.errors import ModelError
from loadmaster.validation.tiresias import cluster, derive_stress, reference, replay

REFERENCE = Path(__file__).resolve().parents[2] / "benchmarks" / "reference" / "tiresias"


def test_shipped_trace_matches_exactly() -> None:
    trace, spec = shared_data("tiresias/60_job.csv"), shared_data("tiresias/n32g4.csv")
    for policy in ("fifo", "dlas-gpu", "dlas"):
        assert replay(trace, spec, policy) == reference(REFERENCE / "60_job" / f"{policy}-n32g4.csv")


def test_stress_trace(tmp_path: Path) -> None:
    stress = tmp_path / "480_job_stress.csv"
    derive_stress(shared_data("tiresias/60_job.csv"), stress)
    spec = shared_data("tiresias/cluster_spec.csv")
    # FIFO with yarn placement queues hard here (average JCT 12,288 s against 178 s unqueued), and
    # 1D LAS preempts 68 times: both exact, preemptions included.
    assert replay(stress, spec, "fifo") == reference(REFERENCE / "480_job_stress" / "fifo-cluster_spec.csv")
    assert replay(stress, spec, "dlas") == reference(REFERENCE / "480_job_stress" / "dlas-cluster_spec.csv")
    ours = replay(stress, shared_data("tiresias/n32g4.csv"), "dlas-gpu")
    theirs = reference(REFERENCE / "480_job_stress" / "dlas-gpu-n32g4.csv")
    assert ours.preemptions > 0 and theirs.preemptions > 0
    assert ours.avg_jct_s == pytest.approx(theirs.avg_jct_s, rel=0.02)
    assert ours.makespan_s == pytest.approx(theirs.makespan_s, rel=0.02)


@pytest.mark.parametrize(
    ("text", "match"),
    [
        ("num_switch,num_node_p_switch\n1,2\n", "missing"),
        ("num_switch,num_node_p_switch,num_gpu_p_node,num_cpu_p_node,mem_p_node\n1,x,4,40,256\n", "line 2"),
    ],
)
def test_bad_cluster_spec_names_the_file(tmp_path: Path, text: str, match: str) -> None:
    path = tmp_path / "spec.csv"
    path.write_text(text)
    with pytest.raises(ModelError, match=match) as err:
        cluster(path)
    assert str(path) in str(err.value)
