"""MIG invariants under random operations and random runs.

Never an invalid placement (instances never overlap, starts are valid for the
profile and model); a layout changes only on an empty GPU; one MIG device per
container.
"""

from __future__ import annotations

import numpy as np
import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from builders import RecordingScheduler, profile
from fuzzing import examples
from loadmaster.errors import ModelError
from loadmaster.model import (
    Job,
    MigPoolConfig,
    MigSlot,
    Node,
    NodeTable,
    ResourceType,
    TaskRequest,
    TraceJob,
)
from loadmaster.model.mig import MIG_MODELS, MigModel, layout_problem, maximal_layouts
from loadmaster.scheduling.mig_pool import MigPool
from loadmaster.sim import SimOptions, simulate
from loadmaster.sim.mig import MigSimOptions

MODELS = sorted(MIG_MODELS)


def free_counts(pool: MigPool) -> np.ndarray:
    counts = np.zeros_like(pool.free)
    for node, _, gpu in pool.instances():
        for instance, used in zip(gpu.layout, gpu.used, strict=True):
            if gpu.ready and not used:
                counts[node, pool.profiles.index(instance.profile)] += 1
    return counts


def idle_gpus(pool: MigPool) -> list[float]:
    """Per node: MIG GPUs less the compute slices in use, from the instances themselves."""
    idle = [0.0] * pool.node_count
    for node, _, gpu in pool.instances():
        used = sum(
            gpu.model.profile(i.profile).compute_slices
            for i, u in zip(gpu.layout, gpu.used, strict=True)
            if u
        )
        idle[node] += 1 - used / gpu.model.compute_slices
    return idle


def layouts_of(model: MigModel) -> list:  # type: ignore[type-arg]
    return maximal_layouts(model, [p.name for p in model.profiles])


@settings(max_examples=examples(60), deadline=None)
@given(
    model_name=st.sampled_from(MODELS),
    ops=st.lists(st.tuples(st.integers(0, 3), st.integers(0, 1000)), max_size=60),
)
def test_random_operations_keep_every_layout_valid_and_change_only_empty_gpus(
    model_name: str, ops: list[tuple[int, int]]
) -> None:
    model = MIG_MODELS[model_name]
    candidates = layouts_of(model)
    pool = MigPool.build(2, {(n, g): (model, candidates[0]) for n in range(2) for g in range(2)})
    taken: list[tuple[int, MigSlot]] = []
    for op, pick in ops:
        node, gpu = pick % 2, (pick // 2) % 2
        if op == 0:
            slot = pool.choose(node, model.profiles[pick % len(model.profiles)].name)
            if slot is not None:
                pool.occupy(node, slot)
                taken.append((node, slot))
        elif op == 1 and taken:
            node, held = taken.pop(pick % len(taken))
            pool.vacate(node, held)
        elif op == 2:
            state = pool.gpus[(node, gpu)]
            was_empty, before = state.empty, state.layout
            try:
                pool.set_layout(node, gpu, candidates[pick % len(candidates)], ready=pick % 3 != 0)
            except ModelError:
                assert not was_empty and state.layout == before
            else:
                assert was_empty
        else:
            pool.set_ready(node, gpu, True)
        for _, _, state in pool.instances():
            assert layout_problem(model, state.layout) is None
        assert (pool.free == free_counts(pool)).all()
        assert pool.idle_gpus() == pytest.approx(idle_gpus(pool))


def cluster() -> NodeTable:
    rtype = ResourceType("h100", "H100-SXM5-80GB", 81_920, 0, 0)
    nodes = [Node(f"n{i}", "p", "z", f"r{i % 2}", "h100", 2, 64_000, 512_000) for i in range(3)]
    return NodeTable.build(nodes, {"h100": rtype})


@settings(max_examples=examples(15), deadline=None)
@given(
    jobs=st.lists(
        st.tuples(
            st.sampled_from(["1g.10gb", "1g.20gb", "2g.20gb", "3g.40gb", "4g.40gb", "7g.80gb"]),
            st.integers(1, 3),
            st.integers(0, 500),
            st.integers(1, 300),
        ),
        min_size=1,
        max_size=25,
    ),
    replan=st.sampled_from([None, 60.0, 200.0]),
)
def test_runs_place_one_valid_instance_per_task(
    jobs: list[tuple[str, int, int, int]], replan: float | None
) -> None:
    trace = [
        TraceJob(Job(f"j{i}", "u", "g", float(t), n, TaskRequest(0, mig_profile=p), 10_000.0), float(d))
        for i, (p, n, t, d) in enumerate(jobs)
    ]
    scheduler = RecordingScheduler(profile("fifo", "first-fit"))
    mig = MigSimOptions((MigPoolConfig("p", "3g.40gb + 2g.20gb + 1g.10gb x2"),), 30.0, (), replan)
    result = simulate(cluster(), scheduler, trace, SimOptions(mig=mig))
    model = MIG_MODELS["H100-80GB"]
    for bind in scheduler.binds:
        for placement in bind.bind.placements:
            assert placement.mig is not None and placement.gpu_indices == () and placement.gpu_milli == 0
            assert model.has(placement.mig.profile)
    assert result.mig is not None
    assert result.mig.reconfigure_gpu_s == 30.0 * result.mig.reconfigurations
