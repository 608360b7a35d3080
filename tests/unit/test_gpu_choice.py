"""``choose_gpus`` is one extension point: the scheduler's placement asks the profile's GPU-choice plugin.

The FGD validation (validation/fgd.py) calls the same plugin method, so the
simulator, the Kubernetes driver and the validation choose a share's GPU alike.
"""

from __future__ import annotations

import numpy as np
import pytest

from builders import a_cluster, a_job, a_node, a_snapshot, bind_of, cycle, profile
from loadmaster.scheduling.framework import CycleContext
from loadmaster.scheduling.plugins.sharing import FragmentationGradient
from loadmaster.scheduling.state import WorkingState


@pytest.mark.parametrize(
    ("policy", "args", "gpu"),
    [
        # Free [600, 1000], typical share 500: best fit fills the 600 GPU, stranding 400; FGD keeps both.
        (
            "fgd",
            {"workload": [{"cpu_milli": 0, "gpu_milli": 500, "weight": 1.0}], "integer_scores": False},
            1,
        ),
        ("best-fit", {}, 0),
    ],
)
def test_a_shares_gpu_is_the_policys_choice(policy: str, args: dict[str, object], gpu: int) -> None:
    table = a_cluster().node(a_node("n0").gpus(2)).build()
    snapshot = a_snapshot(table).running(a_job("r").gpus(0.4), "n0").pending(a_job("j").gpus(0.2)).build()
    result = cycle(profile("fifo", policy, args={policy: args}), snapshot)
    bind = bind_of(result, "j")
    assert bind is not None and bind.placements[0].gpu_indices == (gpu,)


def test_the_scheduler_and_the_plugin_agree_on_the_gpu() -> None:
    table = a_cluster().node(a_node("n0").gpus(4)).build()
    snapshot = a_snapshot(table).running(a_job("r").gpus(0.7), "n0").pending(a_job("j").gpus(0.3)).build()
    args = {"workload": [{"cpu_milli": 0, "gpu_milli": 300, "weight": 1.0}], "integer_scores": False}
    chosen = profile("fifo", "fgd", args={"fgd": args})
    bind = bind_of(cycle(chosen, snapshot), "j")
    fgd = chosen.plugins[1]
    assert isinstance(fgd, FragmentationGradient)
    ctx = CycleContext(0.0, np.random.default_rng(0), snapshot, WorkingState.from_snapshot(snapshot))
    job = a_job("j").gpus(0.3).build()
    assert bind is not None
    assert (
        bind.placements[0].gpu_indices == fgd.choose_gpus(job, job.request, 0, ctx) == (0,)
    )  # fills the 300 left
