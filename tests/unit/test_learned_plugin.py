"""The learned ordering plugin and its numpy checkpoint: format, errors, ranking, profile rules."""

from __future__ import annotations

import io
from importlib import resources
from pathlib import Path

import numpy as np
import pytest

from loadmaster.config import load_cluster, load_workload
from loadmaster.errors import ConfigError
from loadmaster.model import JobTable
from loadmaster.scheduling import PluginSpec, Profile, Scheduler, build_profile
from loadmaster.scheduling.observe import ObservationSpec
from loadmaster.scheduling.plugins.learned import Learned, RankedCycle
from loadmaster.scheduling.policy_net import (
    BUILTIN,
    JOB_INPUTS,
    context_size,
    load_policy,
    read_policy,
    save_policy,
)
from loadmaster.sim import SimOptions, simulate

SPEC = ObservationSpec()


def linear_checkpoint(path: Path, weights: dict[str, float]) -> str:
    """A one-layer policy whose score is a weighted sum of named job inputs (no context)."""
    weight = np.zeros((len(JOB_INPUTS) + context_size(SPEC), 1), dtype=np.float32)
    for name, value in weights.items():
        weight[JOB_INPUTS.index(name), 0] = value
    with path.open("wb") as fh:
        save_policy(fh, [(weight, np.zeros(1, dtype=np.float32))], SPEC, {"note": "test"})
    return str(path)


def profile(order: PluginSpec, *, strict_backfill: bool = False) -> Profile:
    plugins = [order, PluginSpec("gang", {}), PluginSpec("binpack", {})]
    return build_profile("t", ["allocate"], plugins)


def test_checkpoint_round_trip_keeps_layers_and_spec(tmp_path: Path) -> None:
    path = linear_checkpoint(tmp_path / "p.npz", {"log_limit_h": -1.0})
    policy, arrays = read_policy(Path(path).read_bytes(), path)
    assert policy.spec == SPEC
    assert policy.meta["note"] == "test"
    assert len(policy.layers) == 1
    assert "meta" not in arrays


def test_an_sjf_shaped_policy_orders_exactly_as_sjf(tmp_path: Path) -> None:
    """Score = -log(1 + limit): the learned plugin must start the same jobs at the same times as sjf."""
    path = linear_checkpoint(tmp_path / "sjf.npz", {"log_limit_h": -1.0})
    cluster = load_cluster("lab")
    jobs = load_workload("lab", cluster, jobs=300, load=1.1, seed=5).jobs
    runs = []
    for order in (PluginSpec("sjf", {}), PluginSpec("learned", {"checkpoint": path})):
        result = simulate(cluster.nodes, Scheduler(profile(order)), jobs, SimOptions(seed=1))
        runs.append(result.jobs)
    assert np.array_equal(runs[0].start_s, runs[1].start_s, equal_nan=True)
    assert list(runs[0].job_id) == list(runs[1].job_id)


def test_same_checkpoint_and_seed_give_the_same_decisions() -> None:
    cluster = load_cluster("lab")
    jobs = load_workload("lab", cluster, jobs=200, load=1.0, seed=3).jobs
    learned = profile(PluginSpec("learned", {"checkpoint": "lab"}))
    a = simulate(cluster.nodes, Scheduler(learned), jobs, SimOptions(seed=2)).jobs
    b = simulate(cluster.nodes, Scheduler(learned), jobs, SimOptions(seed=2)).jobs
    assert np.array_equal(a.start_s, b.start_s, equal_nan=True)
    assert np.array_equal(a.end_s, b.end_s, equal_nan=True)


def test_starving_jobs_go_first(tmp_path: Path) -> None:
    """A policy that prefers long jobs starves short ones; with starvation_s they go first once
    past the threshold, whatever their score (the fair variant's rule), so their longest wait drops."""
    path = linear_checkpoint(tmp_path / "long.npz", {"log_limit_h": 1.0})
    cluster = load_cluster("lab")
    jobs = load_workload("lab", cluster, jobs=400, load=1.3, seed=9).jobs
    longest = {}
    for starvation in (None, 4 * 3600.0):
        spec = PluginSpec("learned", {"checkpoint": path, "starvation_s": starvation})
        table = simulate(cluster.nodes, Scheduler(profile(spec)), jobs, SimOptions(seed=1)).jobs
        short = table.time_limit_s <= 3600
        longest[starvation] = float(np.nanmax((table.start_s - table.submit_s)[short]))
    assert longest[4 * 3600.0] < longest[None]


def test_learned_with_multi_queue_is_rejected() -> None:
    plugins = [
        PluginSpec("learned", {"checkpoint": "lab"}),
        PluginSpec("multi-queue", {"queues": [{"name": "small", "max_gpus": 4}, {"name": "large"}]}),
        PluginSpec("gang", {}),
        PluginSpec("binpack", {}),
    ]
    with pytest.raises(ConfigError, match="trained on one queue"):
        build_profile("bad", ["allocate"], plugins, source="profiles.yaml")


def test_every_shipped_checkpoint_loads_and_is_small() -> None:
    for name, file in BUILTIN.items():
        policy = load_policy(name)
        assert policy.spec.window > 0
        size = (resources.files("loadmaster.data") / "models" / file).read_bytes()
        assert len(size) < 5 * 1024 * 1024


@pytest.mark.parametrize(
    ("data", "message"),
    [
        (b"not a zip", "not a loadmaster policy"),
        (None, "missing: not a loadmaster policy checkpoint"),
    ],
)
def test_bad_checkpoints_name_the_file(data: bytes | None, message: str) -> None:
    if data is None:
        buffer = io.BytesIO()
        np.savez(buffer, x=np.zeros(2))
        data = buffer.getvalue()
    with pytest.raises(ConfigError, match=message) as err:
        read_policy(data, "ckpt.npz")
    assert "ckpt.npz" in str(err.value)


def test_unknown_names_and_missing_files_are_clear(tmp_path: Path) -> None:
    with pytest.raises(ConfigError, match="a shipped name"):
        load_policy("no-such-policy")
    with pytest.raises(ConfigError, match="cannot read"):
        load_policy(str(tmp_path / "absent.npz"))


def test_a_checkpoint_of_the_wrong_shape_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "wide.npz"
    with path.open("wb") as fh:
        save_policy(fh, [(np.zeros((3, 1), np.float32), np.zeros(1, np.float32))], SPEC, {})
    with pytest.raises(ConfigError, match="does not take"):
        load_policy(str(path))


def _recorded(explore: float, seed: int) -> tuple[list[RankedCycle], JobTable]:
    cluster = load_cluster("lab")
    jobs = load_workload("lab", cluster, jobs=150, load=1.1, seed=4).jobs
    learned = profile(PluginSpec("learned", {"checkpoint": "lab", "explore": explore}))
    plugin = learned.order[0]
    assert isinstance(plugin, Learned)
    cycles: list[RankedCycle] = []
    plugin.recorder = cycles.append
    table = simulate(cluster.nodes, Scheduler(learned), jobs, SimOptions(seed=seed)).jobs
    return cycles, table


def test_sampling_is_seeded_and_differs_from_ranking() -> None:
    """explore > 0 draws the order from the cycle's generator: same seed, same run; the ranked
    order (explore 0) is what serving sees."""
    a, table_a = _recorded(0.5, seed=1)
    b, table_b = _recorded(0.5, seed=1)
    ranked, _ = _recorded(0.0, seed=1)
    assert [c.order.tolist() for c in a] == [c.order.tolist() for c in b]
    assert np.array_equal(table_a.start_s, table_b.start_s, equal_nan=True)
    assert any(not np.array_equal(c.order, r.order) for c, r in zip(a, ranked, strict=False))


def test_the_recorder_sees_the_inputs_the_policy_scores() -> None:
    cycles, _ = _recorded(0.0, seed=1)
    assert cycles, "a loaded cluster has cycles with several waiting jobs"
    policy = load_policy("lab")
    for cycle in cycles[:20]:
        assert len(cycle.inputs) == len(cycle.job_ids) >= 2
        scores = policy.score_inputs(cycle.inputs)
        assert np.all(np.diff(scores[cycle.order]) <= 0)  # best first


def test_commit_keeps_the_picked_head() -> None:
    plugin = profile(PluginSpec("learned", {"checkpoint": "lab", "commit": True, "strict": True})).order[0]
    assert plugin.commits_head and plugin.strict
    with pytest.raises(ConfigError, match="explore"):
        profile(PluginSpec("learned", {"checkpoint": "lab", "explore": -1.0}))
