"""Synthetic telemetry: deterministic, realistic, and every fault kind visible with its ground truth."""

from __future__ import annotations

from collections.abc import Callable

import numpy as np
import pyarrow as pa
import pytest

from builders import a_cluster, a_job, a_snapshot, profile, trace
from loadmaster.errors import TelemetryError
from loadmaster.scheduling import Scheduler
from loadmaster.sim import simulate
from loadmaster.telemetry import SAMPLE_SCHEMA, field
from loadmaster.telemetry.memory import MemoryStore
from loadmaster.telemetry.synthetic import (
    GPU_MODELS,
    Fault,
    FaultKind,
    GpuRef,
    NodeSpec,
    PlannedJob,
    SyntheticTelemetry,
    TelemetryPlan,
    Workload,
    plan_from_run,
    plan_from_snapshot,
)
from loadmaster.telemetry.synthetic.plan import CLOCKS_GPU_IDLE, CLOCKS_SW_THERMAL

H100 = GPU_MODELS["H100"]
END = 1200.0
FAULT = (400.0, 800.0)


def gpus(host: str, *indices: int) -> tuple[GpuRef, ...]:
    return tuple(GpuRef(host, i) for i in indices)


def base_plan(*faults: Fault, seed: int = 7) -> TelemetryPlan:
    """Two nodes share an 8-GPU training job (4 + 4); n2 has an idle notebook on GPU 0 and three free GPUs."""
    return TelemetryPlan(
        nodes=(NodeSpec("n0", 4), NodeSpec("n1", 4), NodeSpec("n2", 4)),
        jobs=(
            PlannedJob("train", "ann", gpus("n0", 0, 1, 2, 3) + gpus("n1", 0, 1, 2, 3), 0.0, END, step_s=4.0),
            PlannedJob("notebook", "bob", gpus("n2", 0), 0.0, END, Workload.IDLE),
        ),
        faults=faults,
        seed=seed,
    )


class View:
    """Samples of one generated plan as dense (series x second) matrices."""

    def __init__(self, plan: TelemetryPlan, end_s: float = END) -> None:
        self.gen = SyntheticTelemetry(plan)
        telemetry = self.gen.generate(0.0, end_s)
        self.store = MemoryStore()
        self.store.register(telemetry.series)
        self.store.append(telemetry.samples)
        self.samples = telemetry.samples
        self.end_s = end_s
        self.ids = {(s.labels["Hostname"], s.labels.get("gpu")): s.id for s in telemetry.series}

    def of(self, key: str, host: str, gpu: int | None = None, step_s: float = 1.0) -> np.ndarray:
        sid = self.ids[(host, None if gpu is None else str(gpu))]
        return self.store.range(field(key), [sid], 1.0, self.end_s + 1.0, step_s).mean[0]


def inside(values: np.ndarray, lo: float = FAULT[0], hi: float = FAULT[1]) -> np.ndarray:
    """Seconds lo+20..hi (bucket k holds the sample at k+1; the margin skips edge effects)."""
    return values[int(lo) + 20 : int(hi)]


def outside(values: np.ndarray) -> np.ndarray:
    return np.concatenate((values[150 : int(FAULT[0])], values[int(FAULT[1]) + 60 :]))


@pytest.fixture(scope="module")
def healthy() -> View:
    return View(base_plan())


def test_output_is_in_the_schema_and_deterministic() -> None:
    first = SyntheticTelemetry(base_plan()).generate(0.0, 60.0)
    again = SyntheticTelemetry(base_plan()).generate(0.0, 60.0)
    other = SyntheticTelemetry(base_plan(seed=8)).generate(0.0, 60.0)
    assert first.samples.schema == SAMPLE_SCHEMA
    assert first.samples.equals(again.samples)
    assert not first.samples.equals(other.samples)
    assert [s.id for s in first.series] == list(range(15))
    assert first.series[12].scope == "node"


def test_chunks_give_the_same_samples_as_one_call() -> None:
    gen = SyntheticTelemetry(base_plan(Fault(FaultKind.STRAGGLER, 30.0, 90.0, gpus=gpus("n0", 1))))
    whole = gen.samples(0.0, 200.0)
    chunked = pa.concat_tables(SyntheticTelemetry(gen.plan).chunks(0.0, 200.0, chunk_s=45.0))
    order = [("field", "ascending"), ("series", "ascending"), ("time_s", "ascending")]
    assert whole.sort_by(order).equals(chunked.sort_by(order))


def test_labels_follow_the_running_job(healthy: View) -> None:
    series = {s.id: s for s in healthy.gen.series(at_s=100.0)}
    assert series[0].labels["job"] == "train" and series[0].labels["user"] == "ann"
    assert series[0].labels["modelName"] == H100.label
    assert series[0].labels["UUID"].startswith("GPU-")
    assert "job" not in series[9].labels
    assert "job" not in healthy.gen.series(at_s=END + 1)[0].labels


def test_training_steps_have_dips_and_synchronised_communication(healthy: View) -> None:
    sm = healthy.of("SM_ACTIVE", "n0", 0)[100:1100]
    assert sm.mean() > 0.5
    assert sm.min() < 0.5 * sm.max()
    nvlink = np.array([healthy.of("NVLINK_TX_BYTES", h, g)[100:1100] for h in ("n0", "n1") for g in range(4)])
    assert np.corrcoef(nvlink).min() > 0.9
    assert healthy.of("NODE_IB_TX_BYTES", "n0")[100:1100].max() > 1e9


def test_free_and_idle_gpus_look_idle(healthy: View) -> None:
    free_power = healthy.of("POWER_USAGE", "n2", 2)
    np.testing.assert_allclose(free_power, H100.idle_w)
    assert (healthy.of("GPU_UTIL", "n2", 2) == 0).all()
    assert (healthy.of("FB_USED", "n2", 2) == 0).all()
    assert (healthy.of("CLOCKS_EVENT_REASONS", "n2", 2).astype(int) & CLOCKS_GPU_IDLE).all()
    assert (healthy.of("GPU_UTIL", "n2", 0) == 0).all()
    assert healthy.of("FB_USED", "n2", 0)[300:].min() > 10_000


def test_memory_grows_then_plateaus_and_heat_follows_power(healthy: View) -> None:
    used = healthy.of("FB_USED", "n0", 0)
    assert used[5] < 0.6 * used[600]
    assert abs(used[1100] - used[600]) < 0.03 * used[600]
    temp_busy = healthy.of("GPU_TEMP", "n0", 0)[300:].mean()
    temp_free = healthy.of("GPU_TEMP", "n2", 2)[300:].mean()
    assert temp_busy > temp_free + 15
    assert healthy.of("POWER_USAGE", "n0", 0)[300:].mean() > 3 * H100.idle_w


def straggler(view: View) -> None:
    target, peer = view.of("SM_ACTIVE", "n0", 1), view.of("SM_ACTIVE", "n1", 2)
    assert inside(target).mean() > inside(peer).mean() + 0.1
    assert inside(peer).mean() < outside(peer).mean() - 0.1


def comm(view: View) -> None:
    target, peer = view.of("NODE_IB_TX_BYTES", "n1"), view.of("NODE_IB_TX_BYTES", "n0")
    assert inside(target).mean() < 0.5 * inside(peer).mean()
    # NCCL kernels spin through the stall, so GPU_UTIL stays high; SM activity shows the stall job-wide.
    sm = view.of("SM_ACTIVE", "n0", 0)
    assert inside(sm).mean() < outside(sm).mean() - 0.05


def thermal(view: View) -> None:
    clock = view.of("SM_CLOCK", "n0", 2)
    reasons = view.of("CLOCKS_EVENT_REASONS", "n0", 2).astype(int)
    assert inside(clock).max() <= 0.6 * H100.max_sm_clock_mhz + 1
    assert (inside(reasons) & CLOCKS_SW_THERMAL).all()
    assert not (outside(reasons) & CLOCKS_SW_THERMAL).any()
    assert inside(view.of("GPU_TEMP", "n0", 2)).min() >= 85


def memory_leak(view: View) -> None:
    used = view.of("FB_USED", "n1", 3)
    assert used[int(FAULT[1]) - 2] > 0.95 * H100.memory_mib
    assert used[int(FAULT[0]) - 2] < 0.92 * H100.memory_mib


def xid(view: View) -> None:
    values = view.of("XID_ERRORS", "n1", 0)
    assert (inside(values) == 79).all() and (outside(values) == 0).all()


def ecc(view: View) -> None:
    sbe, dbe = view.of("ECC_SBE_VOL_TOTAL", "n0", 3), view.of("ECC_DBE_VOL_TOTAL", "n0", 3)
    assert sbe[int(FAULT[0]) - 1] == 0 and sbe[-1] >= 10
    assert np.all(np.diff(sbe) >= 0)
    assert dbe[int(FAULT[0]) + 10] == 0 and dbe[-1] == 1


def missing(view: View) -> None:
    values = view.of("GPU_UTIL", "n0", 0)
    assert np.isnan(inside(values)).all()
    assert not np.isnan(outside(values)).any()


def idle(view: View) -> None:
    util = view.of("GPU_UTIL", "n1", 1)
    assert (inside(util) == 0).all() and outside(util).mean() > 50
    assert inside(view.of("FB_USED", "n1", 1)).min() > 10_000


FAULT_CASES: dict[FaultKind, tuple[Fault, Callable[[View], None]]] = {
    FaultKind.STRAGGLER: (Fault(FaultKind.STRAGGLER, *FAULT, gpus=gpus("n0", 1)), straggler),
    FaultKind.COMM: (Fault(FaultKind.COMM, *FAULT, nodes=("n1",)), comm),
    FaultKind.THERMAL: (Fault(FaultKind.THERMAL, *FAULT, gpus=gpus("n0", 2)), thermal),
    FaultKind.MEMORY_LEAK: (Fault(FaultKind.MEMORY_LEAK, *FAULT, gpus=gpus("n1", 3)), memory_leak),
    FaultKind.XID: (Fault(FaultKind.XID, *FAULT, gpus=gpus("n1", 0)), xid),
    FaultKind.ECC: (Fault(FaultKind.ECC, *FAULT, gpus=gpus("n0", 3)), ecc),
    FaultKind.MISSING: (Fault(FaultKind.MISSING, *FAULT, gpus=gpus("n0", 0)), missing),
    FaultKind.IDLE: (Fault(FaultKind.IDLE, *FAULT, gpus=gpus("n1", 1)), idle),
}


def test_every_fault_kind_has_a_case() -> None:
    assert set(FAULT_CASES) == set(FaultKind)


@pytest.mark.parametrize("kind", list(FaultKind))
def test_fault_is_visible_in_the_data_with_its_ground_truth(kind: FaultKind) -> None:
    fault, check = FAULT_CASES[kind]
    view = View(base_plan(fault))
    assert view.gen.truth == (fault,)
    check(view)


def test_healthy_run_shows_none_of_the_fault_signatures(healthy: View) -> None:
    for kind, (_, check) in FAULT_CASES.items():
        if kind is FaultKind.MEMORY_LEAK:
            continue  # a healthy GPU's memory is below the leak's threshold too; nothing to contrast
        with pytest.raises(AssertionError):
            check(healthy)


def test_node_fault_targets_every_gpu_of_the_node() -> None:
    gen = SyntheticTelemetry(base_plan(Fault(FaultKind.THERMAL, *FAULT, nodes=("n2",))))
    assert gen.fault_gpus(gen.truth[0]) == list(gpus("n2", 0, 1, 2, 3))


def one_node(*jobs: PlannedJob, faults: tuple[Fault, ...] = ()) -> TelemetryPlan:
    return TelemetryPlan((NodeSpec("n0", 2),), jobs, faults)


def job(job_id: str, gpu: int, start: float, end: float) -> PlannedJob:
    return PlannedJob(job_id, "u", gpus("n0", gpu), start, end)


@pytest.mark.parametrize(
    ("plan", "message"),
    [
        (one_node(job("a", 0, 0, 10), job("b", 0, 5, 20)), "also used by job a"),
        (one_node(job("a", 5, 0, 10)), "n0/5"),
        (one_node(job("a", 0, 10, 10)), "end_s"),
        (one_node(faults=(Fault(FaultKind.COMM, 0, 10, gpus=gpus("n0", 0)),)), "targets nodes"),
        (one_node(faults=(Fault(FaultKind.XID, 0, 10, nodes=("n9",)),)), "n9"),
        (one_node(faults=(Fault(FaultKind.STRAGGLER, 0, 10, gpus=gpus("n0", 0), magnitude=0.5),)), ">= 1"),
        (TelemetryPlan((NodeSpec("n0", 2), NodeSpec("n0", 2))), "unique"),
    ],
)
def test_bad_plans_are_rejected_with_the_field(plan: TelemetryPlan, message: str) -> None:
    with pytest.raises(TelemetryError, match=message):
        SyntheticTelemetry(plan)


def test_plan_from_snapshot_uses_the_exact_gpus() -> None:
    cluster = a_cluster().nodes(2, gpus=4).build()
    snapshot = (
        a_snapshot(cluster)
        .used("n0", 1)
        .running(a_job("j1").tasks(2).gpus(2).user("ann").limit(3600), "n0", "n1", since=100.0)
        .build()
    )
    plan = plan_from_snapshot(snapshot, until_s=1000.0, seed=3)
    assert [n.hostname for n in plan.nodes] == ["n0", "n1"]
    (job,) = plan.jobs
    assert job.gpus == gpus("n0", 1, 2) + gpus("n1", 0, 1)
    assert (job.user, job.start_s, job.end_s) == ("ann", 100.0, 1000.0)
    SyntheticTelemetry(plan).generate(100.0, 160.0)


def test_plan_from_run_places_jobs_on_their_nodes() -> None:
    cluster = a_cluster().nodes(2, gpus=4).build()
    jobs = [trace(a_job(f"j{i}").gpus(2).user("ann").submitted(0.0).limit(1000), 600.0) for i in range(5)]
    result = simulate(cluster, Scheduler(profile("fifo")), jobs)
    plan = plan_from_run(cluster, result.jobs)
    assert len(plan.jobs) == 5
    assert all(len(j.gpus) == 2 for j in plan.jobs)
    telemetry = SyntheticTelemetry(plan).generate(0.0, 1300.0, interval_s=10.0)
    assert telemetry.samples.num_rows > 0
