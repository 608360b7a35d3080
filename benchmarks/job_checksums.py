"""Proof that a speed-up changed no scheduling decision: checksums of every job table.

For each case, a SHA-256 over the job table (id, start, end, nodes, preemptions,
lost and held-idle GPU-seconds, estimated start, reasons) and over every bind in
the order it was carried out (job, node, GPU indices, milli-GPU, CPU, memory), so
a different GPU on the same node, or the same binds in another order, changes
the checksum too.

Cases (``--set``):

* ``quick``: every shipped production profile (and ``binpack``) on the lab
  cluster with the first 1,200 jobs' worth of the lab workload (seconds; what
  the unit test compares);
* ``demo``: the same profiles on the lab demo itself (``loadmaster simulate
  --cluster lab --workload lab``: 4,000 jobs, load 0.85, workload seed 7);
* ``lublin``: the Lublin-1 validation (docs/validation.md): five orders with
  and without backfilling, on the protocol's sequences (``quick``: the first);
* ``overload``: the backfilling, non-strict and preempting profiles on the
  lab cluster with 6,000 lab jobs at load 1.1, where the queue grows to
  thousands of waiting jobs (what keeping verdicts across cycles must not
  change);
* ``fgd``: the FGD validation's policies on openb, seed 0 with numpy's draws;
* ``peer``: Tiresias' scaled trace of ``benchmarks/peer_speed.py`` (7,500 jobs, most of them
  gangs of one-GPU tasks, several to a node) on 1,000 x 8 GPUs under ``fifo``, ``binpack``,
  ``kube-default`` and ``sds`` (seconds; in ``quick-data``, so the test suite runs it);
* ``large``: the production profiles on the built-in 1,000 x 8 GPU cluster and workload at
  load 1.1 (10,000 jobs; ``fair``, whose queue holds nearly every job there, 3,000), where
  the scheduler's arrays are a thousand nodes long (minutes; not part of the test suite).

    python benchmarks/job_checksums.py --set quick [--check | --write]
    python benchmarks/job_checksums.py --set all --write

Without ``--check`` or ``--write`` it prints the checksums. The committed
values are in tests/fixtures/job_checksums.json, computed on the code before
the speed-ups of issue 19 (tests/scenarios/test_job_checksums.py compares).
"""

from __future__ import annotations

import argparse
import hashlib
import json
import sys
import tempfile
import time
from collections.abc import Callable, Iterator
from pathlib import Path

import numpy as np

from loadmaster.config import load_cluster, load_profiles, load_workload
from loadmaster.model import JobTable
from loadmaster.scheduling import Bind, Scheduler
from loadmaster.sim import SimOptions
from loadmaster.sim.simulator import Simulator

ROOT = Path(__file__).resolve().parents[1]
HERE = Path(__file__).resolve().parent
FIXTURE = ROOT / "tests" / "fixtures" / "job_checksums.json"
PROFILES = ("kube-default", "fifo", "sds", "nsml", "slurm", "fair", "learned", "binpack")
"""The shipped production profiles, and the strict-FIFO baseline the speed targets compare with."""
QUICK_JOBS = 1200
OVERLOAD_JOBS = 6000
OVERLOAD_LOAD = 1.1
OVERLOAD_PROFILES = ("sds", "nsml", "slurm", "learned", "kube-default", "fair")
"""The profiles that look past a blocked head job, so whose cost grows with the queue."""
SETS = ("quick", "demo", "overload", "lublin", "lublin-quick", "fgd", "peer", "large")
PEER_PROFILES = ("fifo", "binpack", "kube-default", "sds")
"""Strict and non-strict, with and without backfill: the gang placements of ``peer``."""
LARGE_JOBS = {"fair": 3000}
"""Jobs of the ``large`` set per profile where not 10,000."""


class _Recording(Simulator):
    """The simulator, also hashing every bind as it is carried out."""

    def __init__(self, *args: object, **kwargs: object) -> None:
        super().__init__(*args, **kwargs)  # type: ignore[arg-type]
        self.binds = hashlib.sha256()

    def _bind(self, bind: Bind, now: float) -> None:
        for p in bind.placements:
            mig = (p.mig.gpu, p.mig.profile, p.mig.start) if p.mig is not None else None
            row = (bind.job_id, now, p.node, p.gpu_indices, p.gpu_milli, p.cpu_milli, p.memory_mib, mig)
            self.binds.update(repr(row).encode())
        self.binds.update(repr(bind.starts).encode())
        super()._bind(bind, now)


def table_digest(table: JobTable) -> str:
    """SHA-256 of the columns that record what the scheduler decided for each job."""
    digest = hashlib.sha256()
    columns = (
        table.job_id,
        table.start_s,
        table.end_s,
        table.nodes_used,
        table.node_names,
        table.preemptions,
        table.lost_gpu_s,
        table.held_idle_gpu_s,
        table.estimated_start_s,
        table.gpus,
        table.reason,
        table.wait_reason,
    )
    for column in columns:
        digest.update(repr(np.asarray(column).tolist()).encode())
    return digest.hexdigest()


def run_digest(simulator: _Recording) -> str:
    """Checksum of one run: its job table and its binds."""
    table = simulator.run().jobs
    return hashlib.sha256((table_digest(table) + simulator.binds.hexdigest()).encode()).hexdigest()[:32]


def _lab(
    jobs: int | None, load: float | None = None, names: tuple[str, ...] = PROFILES
) -> Iterator[tuple[str, Callable[[], str]]]:
    cluster = load_cluster("lab")
    workload = load_workload("lab", cluster, jobs=jobs, load=load)
    profiles = load_profiles()
    label = "demo" if jobs is None else f"lab-{jobs}"
    if load is not None:
        label = f"overload-{jobs}"
    for name in names:

        def one(name: str = name) -> str:
            return run_digest(
                _Recording(cluster.nodes, Scheduler(profiles[name]), workload.jobs, SimOptions())
            )

        yield f"{label}/{name}", one


def _large() -> Iterator[tuple[str, Callable[[], str]]]:
    cluster = load_cluster("large")
    profiles = load_profiles()
    for name in PROFILES:
        jobs = LARGE_JOBS.get(name, 10_000)

        def one(name: str = name, jobs: int = jobs) -> str:
            workload = load_workload("large", cluster, jobs=jobs, load=OVERLOAD_LOAD)
            return run_digest(
                _Recording(cluster.nodes, Scheduler(profiles[name]), workload.jobs, SimOptions())
            )

        yield f"large-{jobs}/{name}", one


def _lublin(data: Path, sequences: int) -> Iterator[tuple[str, Callable[[], str]]]:
    from loadmaster.validation import rlscheduler  # noqa: PLC0415 (only this set needs it)

    jobs = rlscheduler.read_jobs(data / "swf" / "lublin_256.swf")
    for backfill in (False, True):
        for policy in rlscheduler.POLICIES:
            for start in rlscheduler.SEQUENCE_STARTS[:sequences]:

                def one(policy: str = policy, backfill: bool = backfill, start: int = start) -> str:
                    sequence = jobs[start : start + rlscheduler.SEQUENCE_JOBS]
                    scheduler = Scheduler(rlscheduler.profile(policy, backfill))
                    sim = _Recording(rlscheduler.machine(), scheduler, sequence, rlscheduler.OPTIONS)
                    return run_digest(sim)

                mode = "backfill" if backfill else "no-backfill"
                yield f"lublin/{policy}/{mode}/{start}", one


def _fgd(data: Path) -> Iterator[tuple[str, Callable[[], str]]]:
    from loadmaster.validation import fgd  # noqa: PLC0415 (only this set needs it)

    openb = fgd.load_openb(
        data / "openb" / "openb_pod_list_default.csv", data / "openb" / "openb_node_list_gpu_node.csv"
    )
    for name in fgd.POLICIES:

        def one(name: str = name) -> str:
            run = fgd.run_seed(name, openb, 0)
            digest = hashlib.sha256()
            for array in (run.arrived_milli, run.allocated_milli):
                digest.update(array.tobytes())
            digest.update(str(run.failed).encode())
            return digest.hexdigest()[:32]

        yield f"fgd/{name}/seed0", one


def _peer(data: Path) -> Iterator[tuple[str, Callable[[], str]]]:
    if str(HERE) not in sys.path:
        sys.path.insert(0, str(HERE))  # the tests load this file by its path
    from peer_speed import scaled_trace  # noqa: PLC0415 (only this set needs it)

    cluster = load_cluster("large")
    profiles = load_profiles()
    with tempfile.TemporaryDirectory(prefix="peer-checksums-") as folder:
        trace = Path(folder) / "tiresias_7500.csv"
        trace.write_text(scaled_trace(data / "tiresias" / "60_job.csv"))
        spec = Path(folder) / "tiresias_7500.yaml"
        spec.write_text(f"kind: trace\npath: {trace}\nformat: tiresias\n")
        workload = load_workload(str(spec), cluster)
    for name in PEER_PROFILES:

        def one(name: str = name) -> str:
            scheduler = Scheduler(profiles[name])
            return run_digest(_Recording(cluster.nodes, scheduler, workload.jobs, SimOptions()))

        yield f"peer-7500/{name}", one


def cases(which: str, data: Path) -> Iterator[tuple[str, Callable[[], str]]]:
    """(name, function computing its checksum) for each case of set ``which``."""
    if which in {"quick", "all"}:
        yield from _lab(QUICK_JOBS)
    if which in {"demo", "all"}:
        yield from _lab(None)
    if which in {"overload", "all"}:
        yield from _lab(OVERLOAD_JOBS, OVERLOAD_LOAD, OVERLOAD_PROFILES)
    if which in {"lublin-quick", "quick-data"}:
        yield from _lublin(data, 1)
    if which in {"lublin", "all"}:
        yield from _lublin(data, 10)
    if which in {"fgd", "all", "quick-data"}:
        yield from _fgd(data)
    if which in {"peer", "all", "quick-data"}:
        yield from _peer(data)
    if which == "large":  # not in "all": minutes of a long queue on a thousand nodes
        yield from _large()


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--set", default="quick", choices=(*SETS, "all", "quick-data"))
    parser.add_argument(
        "--data", type=Path, default=ROOT / "data" / "reference", help="reference data folder (vendored)"
    )
    parser.add_argument("--only", default="", help="run only cases whose name contains this text")
    mode = parser.add_mutually_exclusive_group()
    mode.add_argument("--check", action="store_true", help="compare with the committed checksums")
    mode.add_argument("--write", action="store_true", help="add or replace them in the committed file")
    args = parser.parse_args()
    committed: dict[str, str] = json.loads(FIXTURE.read_text()) if FIXTURE.exists() else {}
    failed = []
    for name, compute in cases(args.set, args.data):
        if args.only not in name:
            continue
        started, cpu = time.perf_counter(), time.process_time()
        value = compute()
        verdict = ""
        if args.check:
            verdict = (
                "same" if committed.get(name) == value else f"DIFFERENT (committed {committed.get(name)})"
            )
            if verdict != "same":
                failed.append(name)
        committed[name] = value
        took = f"{time.perf_counter() - started:7.1f} s ({time.process_time() - cpu:.1f} s CPU)"
        print(f"{name:<44} {value}  {took}  {verdict}", flush=True)
    if args.write:
        FIXTURE.parent.mkdir(parents=True, exist_ok=True)
        FIXTURE.write_text(json.dumps(dict(sorted(committed.items())), indent=1) + "\n")
        print(f"wrote {FIXTURE.relative_to(ROOT)}")
    if failed:
        sys.exit(f"{len(failed)} case(s) differ: {', '.join(failed)}")


if __name__ == "__main__":
    main()
