"""The DeepJS setup (CloudSimPy Non_DAG): the loop by hand, the choosers, bad input, golden runs.

The golden test reruns CloudSimPy's Random, FirstFit and Tetris on the 10
reference chunks of data/reference/cloudsimpy/jobs.csv and compares makespan,
avg_completion and avg_slowdown with reference_runs_heuristics.json (about
5 s on two cores). See docs/deepjs.md for the semantics checked here.
"""

from __future__ import annotations

from dataclasses import dataclass
from pathlib import Path

import numpy as np
import pytest

from conftest import reference_data
from loadmaster.errors import ModelError, SimulationError
from loadmaster.traces import TraceError
from loadmaster.validation.deepjs.chooser import Chooser, Decision, MachineView, Snapshot, TaskView
from loadmaster.validation.deepjs.engine import METRICS, ChunkResult, evaluate, run_chunk
from loadmaster.validation.deepjs.heuristics import FirstFitChooser, RandomChooser, SJFChooser, TetrisChooser
from loadmaster.validation.deepjs.reference import TOLERANCE, Comparison, compare, read_reference, reproduce
from loadmaster.validation.deepjs.trace import REFERENCE_CHUNKS, BatchJob, BatchTask, chunk, read_jobs

# ---------------------------------------------------------------- builders


def task(
    instances: int = 1, cpu: float = 1.0, duration: float = 10.0, memory: float = 0.0, task_id: int = 1
) -> BatchTask:
    return BatchTask(task_id, instances, cpu, memory, 0.0, duration)


def job(job_id: int, submit: int, *tasks: BatchTask) -> BatchJob:
    return BatchJob(job_id, submit, tasks)


def machines(*free_cpu: float, memory: float = 1.0) -> tuple[MachineView, ...]:
    return tuple(MachineView(i, cpu, memory, 1.0) for i, cpu in enumerate(free_cpu))


def tasks(*specs: tuple[float, float], memory: float = 0.0) -> tuple[TaskView, ...]:
    """Waiting tasks from (cpu, duration) pairs."""
    return tuple(
        TaskView(i, 1, i, cpu, memory, 0.0, duration, 1, 1, 0, 0, 0.0)
        for i, (cpu, duration) in enumerate(specs)
    )


FIRST_FIT = FirstFitChooser()


# ---------------------------------------------------------------- the loop, by hand


def test_the_first_job_waits_for_the_next_tick_and_the_makespan_is_a_tick() -> None:
    # tick 0 runs before the job submitted at 0 arrives; start at 1, end at 3.5, first tick seeing it done: 4
    result = run_chunk([job(1, 0, task(cpu=1, duration=2.5))], FIRST_FIT)
    assert result.makespan == 4.0
    assert (result.avg_completion, result.avg_slowdown) == (2.5, 1.0)
    assert (result.avg_wait, result.max_wait, result.avg_response) == (1.0, 1.0, 3.5)
    assert result.avg_bounded_slowdown == 1.0


@pytest.mark.parametrize(
    ("duration", "makespan"),
    [
        (1.0, 3.0),  # ends at 2, but tick 2 was queued (at t=1) before the end (at the start's wake-up)
        (2.0, 3.0),  # ends at 3, queued at t=1, before tick 3 (queued at t=2): tick 3 sees it done
        (2.5, 4.0),
    ],
)
def test_an_instance_ending_on_a_tick_is_seen_in_simpy_order(duration: float, makespan: float) -> None:
    assert run_chunk([job(1, 0, task(duration=duration))], FIRST_FIT).makespan == makespan


def test_queueing_before_a_tasks_first_start_is_not_in_the_reference_metrics() -> None:
    # 5 machines of 64 CPU. Job 1: 5 whole-machine instances of 10 (ticks 1 -> 11).
    # Job 2 (also submitted at 0): one whole-machine instance of 5, waits until 11, ends at 16.
    chunk_jobs = [job(1, 0, task(instances=5, cpu=64, duration=10)), job(2, 0, task(cpu=64, duration=5))]
    result = run_chunk(chunk_jobs, FIRST_FIT)
    assert result.makespan == 16.0
    assert (result.avg_completion, result.avg_slowdown) == (7.5, 1.0)
    assert (result.avg_wait, result.max_wait, result.avg_response) == (6.0, 11.0, 13.5)
    assert result.avg_bounded_slowdown == pytest.approx((11 / 10 + 16 / 10) / 2)
    assert result.fairness == pytest.approx((1.1 + 1.6) ** 2 / (2 * (1.1**2 + 1.6**2)))


def test_instances_beyond_the_machines_run_in_a_second_wave() -> None:
    # 6 whole-machine instances: 5 at tick 1, the sixth at tick 11 when the first wave ends.
    result = run_chunk([job(1, 0, task(instances=6, cpu=64, duration=10))], FIRST_FIT)
    assert result.makespan == 21.0
    assert (result.avg_completion, result.avg_slowdown) == (20.0, 2.0)


@pytest.mark.parametrize(
    ("second_submit", "second_start"),
    [
        (3, 3.0),  # its arrival was queued at t=0, before the tick at 3 (queued at t=2)
        (2, 2.0),  # queued at t=0, before the tick at 2 (queued at t=1)
        (1, 2.0),  # queued at t=0 after the tick at 1 (queued by the tick at 0): seen a tick late
        (0, 1.0),
    ],
)
def test_a_later_job_is_seen_by_the_tick_in_simpy_order(second_submit: int, second_start: float) -> None:
    result = run_chunk([job(1, 0, task(duration=2.5)), job(2, second_submit, task(duration=2.5))], FIRST_FIT)
    assert {t.job_id: t.first_start for t in result.tasks} == {1: 1.0, 2: second_start}


def test_a_chunk_rebases_submit_times_to_its_first_job() -> None:
    jobs = [job(1, 100, task()), job(2, 150, task()), job(3, 170, task()), job(4, 171, task())]
    assert [j.submit for j in chunk(jobs, 1, size=2)] == [0, 1]
    assert [j.job_id for j in chunk(jobs, 1, size=3)] == [4]  # the last chunk may be short
    with pytest.raises(ModelError, match="chunk 2 of 2 jobs"):
        chunk(jobs, 2, size=2)


@pytest.mark.parametrize("submits", [(5, 3), (-1, 0)])
def test_a_chunk_must_be_in_submit_order_from_zero(submits: tuple[int, int]) -> None:
    with pytest.raises(ModelError, match="non-decreasing"):
        run_chunk([job(i, submit, task()) for i, submit in enumerate(submits)], FIRST_FIT)


def test_same_seed_same_run_and_the_mean_is_over_chunks() -> None:
    runs = [(0, [job(1, 0, task(instances=40, cpu=16, duration=3.5), task(8, 32, 7.25, task_id=2))])]
    runs.append((1, [job(2, 0, task(instances=30, cpu=20, duration=1.5)), job(3, 2, task(9, 40, 4.0))]))
    first, second = evaluate(RandomChooser(), runs), evaluate(RandomChooser(), runs)
    assert first == second
    for name in METRICS:
        assert first.mean()[name] == pytest.approx(np.mean([r.metrics()[name] for r in first.chunks]))


# ---------------------------------------------------------------- the choosers


@pytest.mark.parametrize(
    ("chooser", "free_cpu", "waiting", "expected"),
    [
        # FirstFit's quirk: the last machine with room wins; the first task that fits there
        (FIRST_FIT, (64, 0.2, 64, 0.2, 0.2), ((1, 5), (0.1, 5)), Decision(4, 1)),
        (FIRST_FIT, (64, 0.2, 64, 0.5, 0.2), ((1, 5), (0.1, 5)), Decision(4, 1)),
        (FIRST_FIT, (64, 0.2, 64, 0.05, 0.05), ((1, 5), (0.1, 5)), Decision(2, 0)),
        (FIRST_FIT, (0.5, 0.5), ((1, 5),), None),
        # Tetris: largest free . demand; on ties the first pair
        (TetrisChooser(), (10, 64), ((1, 5),), Decision(1, 0)),
        (TetrisChooser(), (64, 64), ((1, 5), (2, 5)), Decision(0, 1)),
        (TetrisChooser(), (0.5,), ((1, 5),), None),
        # SJF: shortest that fits anywhere, first fit; a misfit does not block
        (SJFChooser(), (4, 64), ((1, 5), (1, 2), (1, 3)), Decision(0, 1)),
        (SJFChooser(), (4, 64), ((1, 5), (8, 2), (1, 3)), Decision(1, 1)),
        (SJFChooser(), (4, 4), ((1, 5), (8, 2), (1, 3)), Decision(0, 2)),
        (SJFChooser(), (0.5,), ((1, 5),), None),
    ],
)
def test_a_chooser_picks_the_pair_its_rule_says(
    chooser: Chooser,
    free_cpu: tuple[float, ...],
    waiting: tuple[tuple[float, float], ...],
    expected: Decision | None,
) -> None:
    snapshot = Snapshot(0.0, machines(*free_cpu), tasks(*waiting))
    assert chooser.choose(snapshot, np.random.RandomState(0)) == expected


def test_tetris_scores_memory_too() -> None:
    snapshot = Snapshot(
        0.0, (MachineView(0, 10, 0.2, 1), MachineView(1, 10, 0.9, 1)), tasks((1, 5), memory=0.1)
    )
    assert TetrisChooser().choose(snapshot, np.random.RandomState(0)) == Decision(1, 0)


def test_random_with_no_draw_over_the_threshold_picks_uniformly_after_one_draw_per_pair() -> None:
    snapshot = Snapshot(
        0.0, machines(64, 0.5, 64), tasks((1, 5), (0.5, 5))
    )  # pairs: (0,0) (0,1) (1,1) (2,0) (2,1)
    pairs = [Decision(0, 0), Decision(0, 1), Decision(1, 1), Decision(2, 0), Decision(2, 1)]
    rng, mirror = np.random.RandomState(7), np.random.RandomState(7)
    mirror.rand(len(pairs))
    assert RandomChooser(threshold=1.0).choose(snapshot, rng) == pairs[mirror.randint(0, len(pairs))]
    assert rng.rand() == mirror.rand()  # the same number of draws


def test_random_takes_the_last_machines_first_pair_when_every_draw_passes() -> None:
    snapshot = Snapshot(0.0, machines(64, 0.5, 64, 0.1), tasks((1, 5), (0.5, 5)))
    rng = np.random.RandomState(7)
    assert RandomChooser(threshold=-1.0).choose(snapshot, rng) == FIRST_FIT.choose(snapshot, rng)


@dataclass(frozen=True)
class Scripted:
    """A chooser that returns a fixed decision, to check that the loop refuses bad ones."""

    decision: Decision | None
    name: str = "scripted"

    def choose(self, snapshot: Snapshot, rng: np.random.RandomState) -> Decision | None:
        return self.decision if snapshot.tasks else None


@pytest.mark.parametrize(
    ("decision", "message"),
    [
        (Decision(5, 0), "out of range"),
        (Decision(0, 1), "out of range"),
        (None, "nothing running or due"),
    ],
)
def test_the_loop_refuses_a_decision_that_cannot_be_carried_out(
    decision: Decision | None, message: str
) -> None:
    with pytest.raises(SimulationError, match=message):
        run_chunk([job(1, 0, task())], Scripted(decision))


def test_the_loop_refuses_a_pair_that_does_not_fit() -> None:
    big = [job(1, 0, task(instances=2, cpu=40))]
    with pytest.raises(SimulationError, match="does not fit machine 0 at t=1"):
        run_chunk(big, Scripted(Decision(0, 0)))


# ---------------------------------------------------------------- input

HEADER = ",submit_time,duration,cpu,memory,job_id,task_id,instances_num,disk\n"


def write(tmp_path: Path, *rows: str, header: str = HEADER) -> Path:
    path = tmp_path / "jobs.csv"
    path.write_text(header + "".join(row + "\n" for row in rows))
    return path


def test_jobs_are_grouped_by_first_row_take_the_last_submit_and_sort_stably(tmp_path: Path) -> None:
    path = write(
        tmp_path,
        "0,50,10.0,0.5,0.01,7,1,2,0",
        "1,60,5.0,1.0,0.02,8,1,1,0",
        "2,40,3.0,0.5,0.01,7,2,3,0",  # job 7 now submits at 40
        "3,40,1.0,0.5,0.01,9,1,1,0",
    )
    jobs = read_jobs(path)
    assert [(j.job_id, j.submit) for j in jobs] == [(7, 40), (9, 40), (8, 60)]
    assert jobs[0].tasks == (BatchTask(1, 2, 0.5, 0.01, 0.0, 10.0), BatchTask(2, 3, 0.5, 0.01, 0.0, 3.0))


@pytest.mark.parametrize(
    ("rows", "header", "where"),
    [
        ((), "", ":1: header: empty file"),
        (
            ("0,1,2.0,0.5,0.1,1,1,1",),
            ",submit_time,duration,cpu,memory,job_id,task_id,instances_num\n",
            ":1: header",
        ),
        (("0,1,2.0,0.5,0.1,1,1,1",), HEADER, ":2: 8 fields"),
        (("0,1,2.0,0.5,0.1,1,1,x,0",), HEADER, ":2: instances_num: 'x' is not an integer"),
        (("0,1,2.0,0.5,0.1,1,1,0,0",), HEADER, ":2: instances_num: 0 is below the minimum 1"),
        (("0,1,2.0,0.5,0.1,1,1,1,0", "1,1,0,0.5,0.1,1,2,1,0"), HEADER, ":3: duration: '0' is not allowed"),
        (("0,1,2.0,65,0.1,1,1,1,0",), HEADER, ":2: cpu: '65' is not allowed; must be >= 0 and <= 64"),
        (("0,1,2.0,1,nan,1,1,1,0",), HEADER, ":2: memory: 'nan' is not allowed"),
        (("0,1.5,2.0,1,0.1,1,1,1,0",), HEADER, ":2: submit_time: '1.5' is not an integer"),
        (
            ("0,1,2.0,1,0.1,1,1,1,0", "1,1,2.0,1,0.1,1,1,1,0"),
            HEADER,
            ":3: task_id: task 1 of job 1 is listed twice",
        ),
    ],
)
def test_bad_input_names_the_file_line_and_field(
    tmp_path: Path, rows: tuple[str, ...], header: str, where: str
) -> None:
    path = write(tmp_path, *rows, header=header)
    with pytest.raises(TraceError) as caught:
        read_jobs(path)
    assert str(caught.value).startswith(str(path))
    assert where in str(caught.value)


def test_a_missing_file_is_a_trace_error(tmp_path: Path) -> None:
    with pytest.raises(TraceError, match="cannot read"):
        read_jobs(tmp_path / "absent.csv")


@pytest.mark.parametrize(
    ("text", "where"),
    [
        ("{", "not JSON"),
        ('{"runs": []}', "runs: expected a non-empty list"),
        (
            '{"runs": [{"chunk": 0, "policy": "Random", "avg_completion": 1, "avg_slowdown": 1}]}',
            "runs[0].makespan",
        ),
        (
            '{"runs": [{"chunk": 0, "policy": 3, "makespan": 1, "avg_completion": 1, "avg_slowdown": 1}]}',
            "policy",
        ),
    ],
)
def test_a_bad_reference_file_names_the_entry(tmp_path: Path, text: str, where: str) -> None:
    path = tmp_path / "reference.json"
    path.write_text(text)
    with pytest.raises(TraceError, match=f"{path}: .*{where}".replace("[", r"\[").replace("]", r"\]")):
        read_reference(path)


# ---------------------------------------------------------------- golden: CloudSimPy's own runs


POLICIES = ("Random", "FirstFit", "Tetris")


@pytest.fixture(scope="module")
def golden() -> dict[tuple[int, str], tuple[ChunkResult, Comparison]]:
    jobs_csv = reference_data("cloudsimpy/jobs.csv")
    reference = read_reference(reference_data("cloudsimpy/reference_runs_heuristics.json"))
    evaluations = reproduce(jobs_csv, (RandomChooser(), FirstFitChooser(), TetrisChooser()))
    results = {(r.chunk, r.chooser): r for e in evaluations for r in e.chunks}
    return {(c.chunk, c.policy): (results[c.chunk, c.policy], c) for c in compare(evaluations, reference)}


@pytest.mark.parametrize("policy", POLICIES)
@pytest.mark.parametrize("index", range(REFERENCE_CHUNKS))
def test_every_reference_run_is_reproduced(
    golden: dict[tuple[int, str], tuple[ChunkResult, Comparison]], index: int, policy: str
) -> None:
    result, comparison = golden[index, policy]
    reference = comparison.reference
    assert result.makespan == reference.makespan
    assert result.avg_completion == pytest.approx(reference.avg_completion, abs=TOLERANCE, rel=0)
    assert result.avg_slowdown == pytest.approx(reference.avg_slowdown, abs=TOLERANCE, rel=0)
