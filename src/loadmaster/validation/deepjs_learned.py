"""A learned chooser for the DeepJS setup, its fair variant, FIFO, and the episodes that train it.

DeepJS scores every fitting (machine, task) pair with a small network and
starts one instance of the best pair (sampling from the softmax while it
trains). :class:`ScoredChooser` does the same with a loadmaster policy
checkpoint whose rows are :data:`PAIR_INPUTS` (``meta.inputs`` =
:data:`PAIRS`): greedy when serving, Gumbel-sampled when training.

Training reuses the ranking trainer (:mod:`loadmaster.rl.rank`):
:class:`DeepJSChunks` plays chunks of ``jobs.csv`` itself and records each
sampled decision as the pair rows in sampled order (the chosen pair first),
so a decision's log-probability is the softmax of its pick. The advantage is
the trainer's: bounded slowdown the chunk's tasks accrue after the decision,
against the other samples of the same chunk from the same moment.

Chunks 0 .. :data:`TEST_CHUNKS` - 1 (the reference's ten among them) are
never trained on; training and validation draw chunks from the rest.

:class:`FairChooser` is the production fix on top of any chooser: a task
that has not started yet, of a job that has waited :data:`FAIR_THRESHOLD` or
more, is served first, oldest job first. :class:`FifoChooser` starts the
oldest waiting task or nothing.
"""

from __future__ import annotations

from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from functools import cache
from importlib import resources
from pathlib import Path

import numpy as np
import numpy.typing as npt

from loadmaster.errors import ConfigError
from loadmaster.scheduling.observe import ObservationSpec
from loadmaster.scheduling.policy_net import JOBS, PolicyNet, read_policy
from loadmaster.validation.deepjs.chooser import Chooser, Decision, Snapshot, TaskView
from loadmaster.validation.deepjs.engine import BOUND_S, SEED, ChunkResult, evaluate, run_chunk
from loadmaster.validation.deepjs.heuristics import heuristics
from loadmaster.validation.deepjs.trace import (
    CHUNK_JOBS,
    MACHINE_CPU,
    MACHINE_MEMORY,
    BatchJob,
    chunk,
    read_jobs,
)

F32 = npt.NDArray[np.float32]
Layers = tuple[tuple[F32, F32], ...]

PAIRS = "deepjs-pairs/1"
"""``meta.inputs`` of a checkpoint that scores DeepJS (machine, task) pairs."""
PAIR_INPUTS = (
    "machine_cpu_free",
    "machine_memory_free",
    "log_cpu",
    "memory_pct",
    "log_duration",
    "log_waiting",
    "log_running",
    "log_waited",
    "log_work_left",
)
"""One row per fitting pair: the machine's free CPU and memory (fractions), the task's instance
CPU (log1p of cores) and memory (per cent of a machine), log1p of its instance duration, waiting and
running instances, of the time its job has waited, and of its waiting work (duration x waiting)."""
TEST_CHUNKS = 50
"""Chunks 0-49 are the evaluation chunks: never trained on."""
MAX_ROWS = 128
"""Rows kept per recorded decision, in sampled order: the tail is almost never drawn first."""
DECISIONS = 256
"""Decisions kept per training episode (a chunk makes thousands; a seeded sample of them trains)."""
FAIR_THRESHOLD = 25.0
"""Wait (trace time units) after which the fair variant serves a task that has not started yet:
of 10, 25, 50, 100, 150, 200 and 300 on training chunks (greedy validation stream), 25 gave the
lowest bounded slowdown, and it cut the largest wait from 228 to 33."""
SHIPPED = "learned-deepjs.npz"
"""The shipped DeepJS checkpoint, in ``loadmaster/data/models``."""


def pair_inputs(snapshot: Snapshot) -> tuple[F32, npt.NDArray[np.int64], npt.NDArray[np.int64]]:
    """Rows of :data:`PAIR_INPUTS` for every fitting pair, machine-major, with each row's
    machine and task index."""
    machines, tasks = snapshot.machines, snapshot.tasks
    if not tasks:
        empty = np.zeros(0, dtype=np.int64)
        return np.zeros((0, len(PAIR_INPUTS)), dtype=np.float32), empty, empty
    m = np.array([(x.cpu, x.memory, x.disk) for x in machines], dtype=np.float64)
    t = np.array([_task_row(x) for x in tasks], dtype=np.float64)
    fits = (
        (m[:, None, 0] >= t[None, :, 0]) & (m[:, None, 1] >= t[None, :, 1]) & (m[:, None, 2] >= t[None, :, 2])
    )
    mi, ti = np.nonzero(fits)
    rows = np.empty((len(mi), len(PAIR_INPUTS)), dtype=np.float32)
    rows[:, 0] = m[mi, 0] / MACHINE_CPU
    rows[:, 1] = m[mi, 1] / MACHINE_MEMORY
    rows[:, 2] = np.log1p(t[ti, 0])
    rows[:, 3] = 100.0 * t[ti, 1] / MACHINE_MEMORY
    rows[:, 4:] = np.log1p(t[ti, 3:])
    return rows, mi.astype(np.int64), ti.astype(np.int64)


def _task_row(task: TaskView) -> tuple[float, ...]:
    """cpu, memory, disk, then the values whose log1p is an input."""
    return (
        task.cpu,
        task.memory,
        task.disk,
        task.duration,
        task.waiting_instances,
        task.running_instances,
        max(task.waited, 0.0),
        task.duration * task.waiting_instances,
    )


@dataclass
class ScoredChooser:
    """The pair with the best score (DeepJS's policy); with ``explore`` > 0, sampled from
    ``softmax(score / explore)`` by Gumbel noise from ``noise``, each pick handed to ``recorder``."""

    net: PolicyNet
    name: str = "learned"
    explore: float = 0.0
    noise: np.random.Generator = field(default_factory=lambda: np.random.default_rng(0))
    recorder: Callable[[float, F32], None] | None = None
    """Receives (now, rows in sampled order, the pick first) for every decision among two or more."""

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The best-scored (or sampled) fitting pair; None when nothing fits."""
        rows, machine, task = pair_inputs(snapshot)
        if not len(rows):
            return None
        scores = self.net.score_inputs(rows)
        if self.explore > 0:
            gumbel = -np.log(-np.log(self.noise.uniform(1e-12, 1.0, len(rows))))
            scores = scores + self.explore * gumbel
        order = np.argsort(-scores, kind="stable")
        if self.recorder is not None and len(rows) > 1:
            self.recorder(snapshot.now, rows[order[:MAX_ROWS]])
        pick = int(order[0])
        return Decision(int(machine[pick]), int(task[pick]))


@dataclass(frozen=True)
class FairChooser:
    """``inner``'s pick, except that a task whose job has waited ``threshold`` or more and that has
    not started yet is served first (oldest job first, then file order) on the first machine it
    fits (the production fix). Once one instance runs, the task's wait is over, so its other
    instances take their turn with ``inner``."""

    inner: ScoredChooser
    threshold: float = FAIR_THRESHOLD
    name: str = "learned-fair"

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The oldest starving task that fits somewhere, else ``inner``'s pick."""
        for task in sorted(snapshot.tasks, key=lambda t: (t.submit, t.index)):
            if task.waited < self.threshold:
                break
            if task.waiting_instances < task.instances:
                continue  # it has started: its wait is over, its other instances take their turn
            found = _first_machine(snapshot, task)
            if found is not None:
                return Decision(found, task.index)
        return self.inner.choose(snapshot, rng)


@dataclass(frozen=True)
class FifoChooser:
    """First come, first served: the oldest waiting task on the first machine it fits, or nothing
    (the tasks behind it wait)."""

    name: str = "FIFO"

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        """The head of the queue, if it fits somewhere."""
        if not snapshot.tasks:
            return None
        head = min(snapshot.tasks, key=lambda t: (t.submit, t.index))
        found = _first_machine(snapshot, head)
        return None if found is None else Decision(found, head.index)


def _first_machine(snapshot: Snapshot, task: TaskView) -> int | None:
    for machine in snapshot.machines:
        if machine.cpu >= task.cpu and machine.memory >= task.memory and machine.disk >= task.disk:
            return machine.index
    return None


def pair_policy(data: bytes, source: str) -> PolicyNet:
    """A checkpoint that scores :data:`PAIR_INPUTS` rows; any other is refused by name."""
    policy = read_policy(data, source)[0]
    inputs = policy.meta.get("inputs", JOBS)
    if inputs != PAIRS:
        raise ConfigError(source, "meta.inputs", f"scores {inputs!r} rows; a DeepJS chooser needs {PAIRS!r}")
    width = policy.layers[0][0].shape[0]
    if width != len(PAIR_INPUTS):
        raise ConfigError(
            source, "score.0.weight", f"takes {width} inputs; {PAIRS} rows have {len(PAIR_INPUTS)}"
        )
    return policy


def load_chooser(checkpoint: str | None = None, name: str = "learned") -> ScoredChooser:
    """The greedy chooser of ``checkpoint`` (a ``.npz`` path; None: the shipped one)."""
    if checkpoint is None:
        data = (resources.files("loadmaster.data") / "models" / SHIPPED).read_bytes()
        return ScoredChooser(pair_policy(data, f"builtin checkpoint {SHIPPED!r}"), name)
    try:
        data = Path(checkpoint).read_bytes()
    except OSError as err:
        raise ConfigError(checkpoint, "checkpoint", f"cannot read: {err.strerror}") from err
    return ScoredChooser(pair_policy(data, checkpoint), name)


@dataclass(frozen=True, eq=False)
class Recorded:
    """One training episode, as the ranking trainer reads it (per task, per decision)."""

    bsld: float
    submit: npt.NDArray[np.float64]
    end: npt.NDArray[np.float64]
    rate: npt.NDArray[np.float64]
    rows: list[F32]
    positions: list[int]
    times: list[float]


@cache
def _jobs(path: str) -> tuple[BatchJob, ...]:
    return read_jobs(Path(path))


@dataclass(frozen=True, slots=True)
class DeepJSChunks:
    """Training episodes: chunks of ``jobs_csv`` drawn at seeded random from ``TEST_CHUNKS`` on,
    each played by a :class:`ScoredChooser` of the weights being trained."""

    jobs_csv: str

    @property
    def width(self) -> int:
        return len(PAIR_INPUTS)

    @property
    def warm_column(self) -> int:
        return PAIR_INPUTS.index("log_duration")

    @property
    def inputs_meta(self) -> dict[str, object]:
        return {"inputs": PAIRS, "input_width": len(PAIR_INPUTS)}

    def chunks(self) -> int:
        """Whole chunks in the file; a :class:`ConfigError` if none is left beyond the test chunks."""
        count = len(_jobs(self.jobs_csv)) // CHUNK_JOBS
        if count <= TEST_CHUNKS:
            raise ConfigError(
                self.jobs_csv,
                "jobs",
                f"{count} chunks of {CHUNK_JOBS} jobs; training needs chunks beyond the {TEST_CHUNKS} "
                "held out for evaluation",
            )
        return count

    def chunk_index(self, stream: int, index: int) -> int:
        """The chunk of episode ``index`` of ``stream`` (deterministic, never a test chunk)."""
        return int(np.random.default_rng([stream, index]).integers(TEST_CHUNKS, self.chunks()))

    def play(self, layers: Layers, stream: int, index: int, explore: float, noise: int) -> Recorded:
        jobs = chunk(_jobs(self.jobs_csv), self.chunk_index(stream, index))
        times: list[float] = []
        rows: list[F32] = []

        def record(now: float, picked: F32) -> None:
            times.append(now)
            rows.append(picked)

        generator = np.random.default_rng([stream, index, noise])
        chooser = ScoredChooser(
            PolicyNet(layers, ObservationSpec(), {}),
            explore=explore,
            noise=generator,
            recorder=record if explore > 0 else None,
        )
        result = run_chunk(jobs, chooser, SEED)
        kept = np.sort(generator.permutation(len(rows))[:DECISIONS]) if rows else np.zeros(0, dtype=np.int64)
        return Recorded(
            bsld=result.avg_bounded_slowdown,
            submit=_tasks(result, "submit"),
            end=_tasks(result, "last_end"),
            rate=1.0 / np.maximum(_tasks(result, "duration"), BOUND_S),
            rows=[rows[i] for i in kept],
            positions=[1] * len(kept),
            times=[times[i] for i in kept],
        )


def _tasks(result: ChunkResult, attribute: str) -> npt.NDArray[np.float64]:
    return np.array([float(getattr(t, attribute)) for t in result.tasks], dtype=np.float64)


def compare_choosers(
    jobs_csv: Path,
    count: int = TEST_CHUNKS,
    checkpoint: str | None = None,
    progress: Callable[[str], None] | None = None,
) -> dict[str, dict[str, float]]:
    """The learned chooser (``checkpoint``; None: the shipped one), learned-fair and FIFO, then
    CloudSimPy's heuristics and SJF, on evaluation chunks 0 .. count - 1: chooser -> metric
    (:data:`loadmaster.validation.deepjs.METRICS`) -> mean over the chunks. ``progress`` hears
    each chooser's name when it is done."""
    learned = load_chooser(checkpoint)
    choosers: list[Chooser] = [learned, FairChooser(learned), FifoChooser(), *heuristics()]
    runs = evaluation_runs(jobs_csv, count)
    out: dict[str, dict[str, float]] = {}
    for chooser in choosers:
        out[chooser.name] = evaluate(chooser, runs).mean()
        if progress is not None:
            progress(chooser.name)
    return out


def evaluation_runs(jobs_csv: Path, count: int = TEST_CHUNKS) -> list[tuple[int, Sequence[BatchJob]]]:
    """The evaluation chunks 0 .. count - 1."""
    jobs = _jobs(str(jobs_csv))
    return [(k, chunk(jobs, k)) for k in range(count)]
