"""FGD with pods that require a GPU model: a node's fragmentation counts its whole free share for the
typical pods it cannot host (the FGD authors' NoAccess), and typical pods tell model lists apart."""

from __future__ import annotations

import csv
from pathlib import Path

import numpy as np

from conftest import reference_data
from loadmaster.model import TaskRequest
from loadmaster.scheduling.plugins.fragmentation import (
    CompiledWorkload,
    TypicalTask,
    node_stats,
    typical_workload,
)
from loadmaster.validation.fgd import LEVELS, discrete_curve, load_openb, load_reference_draws, run_seed

FIXTURES = Path(__file__).resolve().parents[1] / "fixtures" / "openb"


def test_a_node_counts_its_whole_free_share_for_typical_pods_of_another_model() -> None:
    # Half the typical pods want a V100, half run anywhere; two nodes with 2 free GPUs each.
    workload = CompiledWorkload.of(
        [TypicalTask(0, 1000, 0.5, frozenset({"V100"})), TypicalTask(0, 1000, 0.5)]
    )
    gpu_free = np.array([[1000, 1000], [1000, 1000]], dtype=np.int64)
    cpu_free = np.array([8000, 8000], dtype=np.int64)
    rows = workload.for_rows(workload.model_index(["T4", "V100"]))

    frag = node_stats(gpu_free, cpu_free, rows).frag
    # T4: the V100 pods cannot run there, so their half counts all 2000 free milli-GPU.
    assert frag.tolist() == [1000.0, 0.0]
    # Without models every node hosts every pod (the earlier, model-blind measure).
    assert node_stats(gpu_free, cpu_free, CompiledWorkload.of([TypicalTask(0, 1000, 1.0)])).frag.tolist() == [
        0.0,
        0.0,
    ]


def test_typical_pods_tell_model_lists_apart_by_their_text() -> None:
    requests = [TaskRequest(gpu_milli=1000)] * 3
    tasks = typical_workload(requests, coverage=1.0, models=["A|B", "A|B|B", "A|B"])
    assert [(t.weight, t.gpu_models) for t in tasks] == [
        (2 / 3, frozenset({"A", "B"})),
        (1 / 3, frozenset({"A", "B"})),
    ]


def test_fgd_reproduces_the_authors_curve_on_a_pod_list_with_gpu_models() -> None:
    # openb_pod_list_gpuspec33, seed 42, the authors' draws: every arrival level equals their cached run.
    data = load_openb(
        FIXTURES / "openb_pod_list_gpuspec33.csv.gz", reference_data("openb/openb_node_list_gpu_node.csv")
    )
    draws = load_reference_draws(FIXTURES / "openb_gpuspec33_draws_seed42.json.gz", data)
    with (FIXTURES / "fgd_gpuspec33_seed42_allo_discrete.csv").open() as handle:
        row = next(csv.DictReader(handle))
    published = np.array([float(row[str(level)]) for level in LEVELS])

    curve = discrete_curve(run_seed("FGD", data, 42, draws=draws[42]), data.total_gpus)
    assert np.nanmax(np.abs(curve - published)) < 0.005
