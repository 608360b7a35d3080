"""The DeepJS learned chooser: pair inputs, the choosers built on them, the training episodes, and
the checkpoint guard between job-scoring and pair-scoring policies."""

from __future__ import annotations

import io
from pathlib import Path

import numpy as np
import pytest
from typer.testing import CliRunner

from conftest import reference_data
from loadmaster.cli import app
from loadmaster.errors import ConfigError
from loadmaster.rl.agent import Agent
from loadmaster.scheduling.observe import ObservationSpec
from loadmaster.scheduling.policy_net import PolicyNet, load_policy, save_policy
from loadmaster.validation.deepjs.chooser import Decision, MachineView, Snapshot, TaskView
from loadmaster.validation.deepjs.engine import evaluate, run_chunk
from loadmaster.validation.deepjs.heuristics import SJFChooser
from loadmaster.validation.deepjs.trace import BatchJob, BatchTask
from loadmaster.validation.deepjs_learned import (
    DECISIONS,
    PAIR_INPUTS,
    PAIRS,
    TEST_CHUNKS,
    DeepJSChunks,
    FairChooser,
    FifoChooser,
    ScoredChooser,
    evaluation_runs,
    load_chooser,
    pair_inputs,
    pair_policy,
)

RNG = np.random.RandomState(0)


def linear(column: str, sign: float = -1.0) -> ScoredChooser:
    """A chooser whose score is ``sign`` x one input."""
    weight = np.zeros((len(PAIR_INPUTS), 1), dtype=np.float32)
    weight[PAIR_INPUTS.index(column), 0] = sign
    net = PolicyNet(((weight, np.zeros(1, dtype=np.float32)),), ObservationSpec(), {"inputs": PAIRS})
    return ScoredChooser(net, "linear")


def view(
    index: int, cpu: float, duration: float, submit: int = 0, waited: float = 0.0, started: bool = False
) -> TaskView:
    """A task of 4 instances, one of them running if ``started``."""
    return TaskView(index, index, 1, cpu, 0.01, 0.0, duration, 4, 4 - started, int(started), submit, waited)


def snapshot(*tasks: TaskView, free: tuple[float, ...] = (64.0, 1.0)) -> Snapshot:
    machines = tuple(MachineView(i, cpu, 1.0, 1.0) for i, cpu in enumerate(free))
    return Snapshot(10.0, machines, tasks)


def test_pair_rows_are_the_fitting_pairs_machine_major() -> None:
    snap = snapshot(view(0, 2.0, 9.0, waited=5.0, started=True), view(1, 0.5, 100.0))
    rows, machine, task = pair_inputs(snap)
    assert machine.tolist() == [0, 0, 1] and task.tolist() == [0, 1, 1]  # 2 cores do not fit machine 1
    first = dict(zip(PAIR_INPUTS, rows[0].tolist(), strict=True))
    assert first["machine_cpu_free"] == pytest.approx(1.0)
    assert first["log_duration"] == pytest.approx(np.log1p(9.0))
    assert first["log_waited"] == pytest.approx(np.log1p(5.0))
    assert first["log_work_left"] == pytest.approx(np.log1p(9.0 * 3))
    assert rows[2, PAIR_INPUTS.index("machine_cpu_free")] == pytest.approx(1.0 / 64)


def test_nothing_fits_nothing_is_chosen() -> None:
    assert linear("log_duration").choose(snapshot(view(0, 99.0, 1.0)), RNG) is None
    assert FifoChooser().choose(snapshot(), RNG) is None


def test_scoring_minus_the_duration_is_sjf_on_a_chunk() -> None:
    jobs = [
        BatchJob(1, 0, (BatchTask(1, 40, 8.0, 0.01, 0.0, 30.0), BatchTask(2, 10, 4.0, 0.01, 0.0, 5.0))),
        BatchJob(2, 3, (BatchTask(1, 60, 2.0, 0.02, 0.0, 12.5),)),
    ]
    ours = run_chunk(jobs, linear("log_duration"))
    sjf = run_chunk(jobs, SJFChooser())
    assert ours.makespan == sjf.makespan
    assert [t.last_end for t in ours.tasks] == [t.last_end for t in sjf.tasks]


def test_sampling_records_the_pick_first_and_is_seeded() -> None:
    picked: list[np.ndarray] = []
    chooser = linear("log_duration")
    chooser.explore, chooser.recorder = 5.0, lambda now, rows: picked.append(rows)
    snap = snapshot(view(0, 1.0, 9.0), view(1, 1.0, 100.0), view(2, 1.0, 3.0))
    decisions = [chooser.choose(snap, RNG) for _ in range(50)]
    assert len({(d.machine, d.task) for d in decisions if d}) > 1  # explores
    _, machine, task = pair_inputs(snap)
    rows = pair_inputs(snap)[0]
    for decision, recorded in zip(decisions, picked, strict=True):
        assert decision is not None
        k = int(np.flatnonzero((machine == decision.machine) & (task == decision.task))[0])
        assert np.array_equal(recorded[0], rows[k])


def test_fair_serves_the_oldest_starving_task_first_else_the_inner_pick() -> None:
    fair = FairChooser(linear("log_duration"), threshold=100.0)
    young = snapshot(view(0, 1.0, 500.0, submit=5, waited=50.0), view(1, 1.0, 1.0, submit=9, waited=40.0))
    assert fair.choose(young, RNG) == Decision(0, 1)  # nobody starves: shortest first
    old = snapshot(
        view(0, 1.0, 500.0, submit=5, waited=150.0),
        view(1, 99.0, 500.0, submit=1, waited=160.0),  # starving longest, fits nowhere: skipped
        view(2, 1.0, 1.0, submit=9, waited=40.0),
    )
    assert fair.choose(old, RNG) == Decision(0, 0)
    running = snapshot(
        view(0, 1.0, 500.0, submit=5, waited=150.0, started=True),  # its wait ended when it started
        view(2, 1.0, 1.0, submit=9, waited=40.0),
    )
    assert fair.choose(running, RNG) == Decision(0, 1)


def test_fifo_starts_the_head_or_nothing() -> None:
    head_fits = snapshot(view(0, 1.0, 9.0, submit=4), view(1, 1.0, 1.0, submit=2))
    assert FifoChooser().choose(head_fits, RNG) == Decision(0, 1)
    blocked = snapshot(view(0, 1.0, 9.0, submit=4), view(1, 99.0, 1.0, submit=2))
    assert FifoChooser().choose(blocked, RNG) is None


def test_episodes_skip_the_test_chunks_and_keep_a_seeded_sample_of_decisions() -> None:
    source = DeepJSChunks(str(reference_data("cloudsimpy/jobs.csv")))
    picks = {source.chunk_index(s, i) for s in range(3) for i in range(200)}
    assert min(picks) >= TEST_CHUNKS
    layers = linear("log_duration").net.layers
    a = source.play(layers, 0, 1, 1.0, 7)
    b = source.play(layers, 0, 1, 1.0, 7)
    assert 0 < len(a.rows) <= DECISIONS and a.positions == [1] * len(a.rows)
    assert a.bsld == b.bsld and all(np.array_equal(x, y) for x, y in zip(a.rows, b.rows, strict=True))
    assert a.times == sorted(a.times)
    assert len(a.submit) == len(a.end) == len(a.rate) > 0
    greedy = source.play(layers, 0, 1, 0.0, 7)
    assert greedy.rows == []


def test_a_pair_checkpoint_is_not_a_job_policy_and_back(tmp_path: Path) -> None:
    weight = np.zeros((len(PAIR_INPUTS), 1), dtype=np.float32)
    meta = {"inputs": PAIRS, "input_width": len(PAIR_INPUTS)}
    path = tmp_path / "pairs.npz"
    with path.open("wb") as fh:
        save_policy(fh, [(weight, np.zeros(1, dtype=np.float32))], ObservationSpec(), meta)
    assert load_chooser(str(path)).net.meta["inputs"] == PAIRS
    with pytest.raises(ConfigError, match="learned plugin needs 'jobs'"):
        load_policy(str(path))
    buffer = io.BytesIO()
    lab = load_policy("lab")
    save_policy(buffer, list(lab.layers), lab.spec, {})
    with pytest.raises(ConfigError, match="DeepJS chooser needs"):
        pair_policy(buffer.getvalue(), "lab.npz")
    with pytest.raises(ConfigError, match="cannot read"):
        load_chooser(str(tmp_path / "missing.npz"))


def test_the_shipped_chooser_runs_the_evaluation_chunks() -> None:
    runs = evaluation_runs(reference_data("cloudsimpy/jobs.csv"), 2)
    assert [k for k, _ in runs] == [0, 1]
    result = evaluate(load_chooser(), runs)
    assert result.chooser == "learned" and len(result.chunks) == 2


def test_cli_rank_train_on_deepjs_chunks_writes_a_pair_policy(tmp_path: Path) -> None:
    out = tmp_path / "run"
    trace = reference_data("cloudsimpy/jobs.csv")
    args = ["rl", "rank-train", "--setup", "deepjs", "--trace", str(trace), "--out", str(out)]
    small = ["--updates", "1", "--sequences", "1", "--samples", "2", "--workers", "1"]
    result = CliRunner().invoke(app, [*args, *small])
    assert result.exit_code == 0, result.output
    chooser = load_chooser(str(out / "policy.npz"))
    assert chooser.net.meta["trainer"] == "rank" and chooser.net.meta["input_width"] == len(PAIR_INPUTS)


def test_cli_eval_deepjs_prints_every_chooser() -> None:
    trace = reference_data("cloudsimpy/jobs.csv")
    result = CliRunner().invoke(app, ["rl", "eval-deepjs", "--trace", str(trace), "--chunks", "1"])
    assert result.exit_code == 0, result.output
    for name in ("learned-fair", "FIFO", "SJF", "Random", "FirstFit", "Tetris"):
        assert name in result.output
    bad = CliRunner().invoke(app, ["rl", "eval-deepjs", "--trace", str(trace), "--chunks", "51"])
    assert isinstance(bad.exception, ConfigError) and "--chunks" in str(bad.exception)


def test_rank_train_on_deepjs_refuses_lublin_options_and_a_file_too_short(tmp_path: Path) -> None:
    trace = reference_data("cloudsimpy/jobs.csv")
    args = ["rl", "rank-train", "--setup", "deepjs", "--out", str(tmp_path / "run")]
    result = CliRunner().invoke(app, [*args, "--trace", str(trace), "--backfill"])
    assert isinstance(result.exception, ConfigError) and "--backfill" in str(result.exception)
    short = tmp_path / "jobs.csv"
    lines = trace.read_text().splitlines()[:40]
    short.write_text("\n".join(lines) + "\n")
    result = CliRunner().invoke(app, [*args, "--trace", str(short)])
    assert isinstance(result.exception, ConfigError)
    assert str(short.resolve()) in str(result.exception) and "chunks" in str(result.exception)


def test_a_pair_checkpoint_of_the_wrong_width_is_refused_and_one_of_the_right_width_resumes() -> None:
    buffer = io.BytesIO()
    wide = np.zeros((len(PAIR_INPUTS) + 1, 1), dtype=np.float32)
    meta = {"inputs": PAIRS, "input_width": len(PAIR_INPUTS) + 1}
    save_policy(buffer, [(wide, np.zeros(1, dtype=np.float32))], ObservationSpec(), meta)
    with pytest.raises(ConfigError, match="takes 10 inputs"):
        pair_policy(buffer.getvalue(), "wide.npz")
    agent = Agent(ObservationSpec(), hidden=8, width=len(PAIR_INPUTS))
    saved = io.BytesIO()
    agent.save(saved, {"inputs": PAIRS, "input_width": len(PAIR_INPUTS)})
    again = Agent.load(saved.getvalue(), "pairs.npz")
    assert again.width == len(PAIR_INPUTS) and pair_policy(saved.getvalue(), "pairs.npz").layers
