"""``loadmaster rl train`` and ``loadmaster rl eval``: the learned scheduler's training and evaluation.

Training needs PyTorch (the ``rl`` extra); it is imported only here, inside
the commands, so the rest of the tool (and the ``learned`` plugin, which runs
on numpy) works without it.
"""

from __future__ import annotations

import csv
import dataclasses
import json
import shlex
import sys
from collections.abc import Callable
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any

import typer
from rich.table import Table

from loadmaster.cli.output import console, count_progress
from loadmaster.config import load_cluster
from loadmaster.errors import ConfigError
from loadmaster.rl.env import EnvConfig
from loadmaster.rl.evaluate import (
    METRICS,
    aggregate,
    best_production,
    comparison_profiles,
    evaluate,
    learned_profiles,
)
from loadmaster.scheduling.policy_net import JOB_INPUTS, WITH_HISTORY
from loadmaster.validation.deepjs.heuristics import heuristics
from loadmaster.validation.deepjs_learned import TEST_CHUNKS, DeepJSChunks, compare_choosers
from loadmaster.validation.rlscheduler import (
    MACHINE_PROCS,
    POLICIES,
    SEQUENCE_STARTS,
    SHIPPED_CHECKPOINTS,
    TraceWindows,
    compare_learned,
    read_reference,
)

if TYPE_CHECKING:
    from loadmaster.rl.rank.episodes import Source

app = typer.Typer(no_args_is_help=True, help="The learned scheduler: train it with PPO, evaluate it.")


def _command(name: str) -> str:
    """The command line as typed, for the checkpoint's record."""
    return shlex.join(["loadmaster", "rl", *sys.argv[2:]]) if len(sys.argv) > 2 else f"loadmaster rl {name}"


def _wrote(final: Path, out: Path) -> None:
    console.print(
        f"Wrote {final} ({final.stat().st_size / 1024:.0f} KiB), {out / 'curve.csv'}, {out / 'curve.png'}"
    )


def _with_progress(
    updates: int, label: str, field: str, out: Path, train: Callable[[Callable[[Any], None]], Path]
) -> None:
    """Run ``train`` (given the per-update callback) under a bar of ``updates`` PPO updates whose
    description shows each log's ``field`` formatted by ``label``; then say what it wrote."""
    with count_progress(34) as progress:
        task = progress.add_task("PPO updates", total=updates)

        def show(log: Any) -> None:
            value = getattr(log, field, float("nan"))
            progress.update(task, advance=1, description=f"PPO updates ({label.format(value)})")

        final = train(show)
    _wrote(final, out)


def _existing(trace: Path) -> None:
    """A ConfigError naming ``--trace`` when the file is not there."""
    if not trace.is_file():
        raise ConfigError(str(trace), "--trace", "no such file")


def _torch_missing(command: str) -> ConfigError:
    return ConfigError(f"rl {command}", "torch", "PyTorch is needed: pip install 'loadmaster[rl]'")


def _floats(text: str, option: str) -> tuple[float, ...]:
    try:
        values = tuple(float(x) for x in text.split(",") if x.strip())
    except ValueError as err:
        raise ConfigError(option, option, f"comma-separated numbers, got {text!r}") from err
    if not values or any(not v > 0 for v in values):
        raise ConfigError(option, option, f"one or more numbers > 0, got {text!r}")
    return values


def _seeds(text: str) -> tuple[int, ...]:
    """``10000-10004`` or ``1,2,3``."""
    try:
        if "-" in text:
            first, last = (int(x) for x in text.split("-", 1))
            return tuple(range(first, last + 1))
        return tuple(int(x) for x in text.split(","))
    except ValueError as err:
        raise ConfigError(
            "--seeds", "--seeds", f"a range like 10000-10004 or a list like 1,2,3; got {text!r}"
        ) from err


@app.command("train")
def train(  # noqa: PLR0917 - typer maps each option to a parameter
    out: Annotated[Path, typer.Option(help="Folder for policy.npz, checkpoints/, curve.csv and curve.png")],
    updates: Annotated[int, typer.Option(help="PPO updates")] = 60,
    steps: Annotated[int, typer.Option(help="Decisions with a real choice per update")] = 2048,
    seed: Annotated[int, typer.Option(help="Seed of torch, the episodes and the minibatches")] = 0,
    jobs: Annotated[int, typer.Option(help="Jobs per training episode")] = 256,
    loads: Annotated[
        str | None, typer.Option(help="Training loads, one environment each (default 0.9,1.1)")
    ] = None,
    fairness_weight: Annotated[
        float, typer.Option(help="Weight of the max-wait penalty (learned-fair)")
    ] = 0.0,
    warm_start: Annotated[str, typer.Option(help="Heuristic imitated first: sjf, fifo or none")] = "sjf",
    cluster: Annotated[str, typer.Option(help="Cluster spec file or built-in")] = "lab",
    workload: Annotated[str, typer.Option(help="Workload spec file or built-in")] = "lab",
    family: Annotated[
        str | None,
        typer.Option(
            help="Draw every episode's load and workload parameters from this family (lab) "
            "instead of --workload at --loads"
        ),
    ] = None,
    validation: Annotated[
        int,
        typer.Option(help="Validation windows per check; the best check is the policy (0: the last update)"),
    ] = 0,
    validate_every: Annotated[int, typer.Option(help="Updates between validation checks")] = 1,
    every: Annotated[int, typer.Option(help="Write a checkpoint every this many updates")] = 10,
    ray: Annotated[
        str | None,
        typer.Option(help="Run the rollouts on Ray: auto, local or a cluster ADDRESS (same result as local)"),
    ] = None,
) -> None:
    """Train the learned scheduler with PPO in the simulator (CPU; seeded)."""
    try:
        from loadmaster.rl.ppo import TrainConfig  # noqa: PLC0415 (torch is an optional extra)
        from loadmaster.rl.run import train_to  # noqa: PLC0415
    except ModuleNotFoundError as err:
        raise _torch_missing("train") from err
    if family is not None and (loads is not None or workload != "lab"):
        raise ConfigError(
            "--family", "--family", "a family draws the loads and the workload: drop --loads/--workload"
        )
    env = EnvConfig(
        cluster=cluster, workload=workload, jobs=jobs, fairness_weight=fairness_weight, allow_wait=False
    )
    config = TrainConfig(
        env=env,
        loads=_floats(loads or "0.9,1.1", "--loads"),
        family=family,
        validation=validation,
        validate_every=validate_every,
        seed=seed,
        updates=updates,
        steps=steps,
        warm_start=warm_start,  # type: ignore[arg-type]  # TrainConfig checks the value
    )
    command = _command("train")
    _with_progress(
        updates,
        "episode bsld {:.3f}",
        "mean_bsld",
        out,
        lambda show: train_to(config, out, every=every, command=command, on_update=show, ray=ray),
    )


@app.command("rank-train")
def rank_train(  # noqa: PLR0917 - typer maps each option to a parameter
    out: Annotated[Path, typer.Option(help="Folder for policy.npz, checkpoints/, curve.csv and curve.png")],
    setup: Annotated[
        str,
        typer.Option(
            help="lublin: the RLScheduler protocol on an SWF trace; lab: lab cluster + EASY "
            "(--family: drawn from a training family); lab-habits: the same on the workload whose "
            "users keep habits; deepjs: the DeepJS chunks (--trace: CloudSimPy's jobs.csv)"
        ),
    ] = "lublin",
    trace: Annotated[
        Path | None, typer.Option(help="lublin: the SWF trace to draw windows from; deepjs: jobs.csv")
    ] = None,
    before: Annotated[
        int | None, typer.Option(help="lublin: use only the trace's jobs before this index (held-out rest)")
    ] = None,
    backfill: Annotated[
        bool, typer.Option(help="lublin: train with the protocol's EASY backfilling")
    ] = False,
    jobs: Annotated[int, typer.Option(help="lublin, lab: jobs per training sequence")] = 256,
    family: Annotated[
        str | None,
        typer.Option(
            help="lab: draw every sequence's load and workload parameters from this training "
            "family (lab); validation windows from its own validation stream"
        ),
    ] = None,
    updates: Annotated[int, typer.Option(help="PPO updates")] = 60,
    sequences: Annotated[int, typer.Option(help="Workloads per update")] = 4,
    samples: Annotated[int, typer.Option(help="Noisy plays of each workload")] = 8,
    explore: Annotated[float, typer.Option(help="Gumbel noise scale (softmax temperature)")] = 0.3,
    lr: Annotated[float, typer.Option(help="Adam learning rate")] = 1e-3,
    seed: Annotated[int, typer.Option(help="Seed of torch and the episode stream")] = 0,
    workers: Annotated[int, typer.Option(help="Rollout processes")] = 2,
    init: Annotated[
        str | None, typer.Option(help="lublin, lab: start from this checkpoint (shipped name or .npz)")
    ] = None,
    ray: Annotated[
        str | None,
        typer.Option(help="Run the rollouts on Ray: auto, local or a cluster ADDRESS (same result as local)"),
    ] = None,
    history: Annotated[
        bool, typer.Option(help="lublin, lab: also read each job's user's recent run time over limit")
    ] = False,
) -> None:
    """Train the learned order by PPO over rankings, in the profile it will serve in (CPU; seeded)."""
    try:
        from loadmaster.rl.rank.config import RankConfig  # noqa: PLC0415 (torch is optional)
        from loadmaster.rl.rank.episodes import FamilyEpisodes, LabEpisodes  # noqa: PLC0415
        from loadmaster.rl.run import rank_to  # noqa: PLC0415
    except ModuleNotFoundError as err:
        raise _torch_missing("rank-train") from err
    episodes: Source
    if family is not None and setup != "lab":
        raise ConfigError("rl rank-train", "--family", f"applies to the lab setup only, not {setup!r}")
    if setup in {"lublin", "deepjs"}:
        if trace is None:
            raise ConfigError("rl rank-train", "--trace", f"the {setup} setup needs a trace file")
        _existing(trace)
        if setup == "deepjs":
            if before is not None or backfill:
                raise ConfigError("rl rank-train", "--before/--backfill", "apply to the lublin setup only")
            if init is not None or history:
                raise ConfigError(
                    "rl rank-train", "--init/--history", "apply to job-ranking policies (lublin, lab)"
                )
            episodes = DeepJSChunks(str(trace.resolve()))
            episodes.chunks()  # reads and checks the file now, not in a worker after the run began
        else:
            episodes = TraceWindows(str(trace.resolve()), jobs=jobs, backfill=backfill, before=before)
    elif setup in {"lab", "lab-habits"}:
        if family is not None:
            episodes = FamilyEpisodes(family, jobs=jobs)
        else:
            episodes = LabEpisodes(jobs=jobs, workload=setup)
    else:
        raise ConfigError("rl rank-train", "--setup", f"lublin, lab, lab-habits or deepjs, got {setup!r}")
    config = RankConfig(
        seed=seed,
        updates=updates,
        sequences=sequences,
        samples=samples,
        explore=explore,
        lr=lr,
        workers=workers,
        init=init,
        job_inputs=WITH_HISTORY if history else JOB_INPUTS,
    )
    command = _command("rank-train")
    _with_progress(
        updates,
        "validation bsld {:.2f}",
        "validation_bsld",
        out,
        lambda show: rank_to(config, episodes, out, command=command, on_update=show, ray=ray),
    )


@app.command("eval-rlscheduler")
def eval_rlscheduler(  # noqa: PLR0917 - typer maps each option to a parameter
    trace: Annotated[Path, typer.Option(help="Lublin-1 (lublin_256.swf) or another SWF trace")],
    checkpoint: Annotated[str, typer.Option(help="Shipped name or a policy .npz (both modes)")] = "",
    sequences: Annotated[int, typer.Option(help="How many of the protocol's ten sequences to run")] = 10,
    policies: Annotated[str, typer.Option(help=f"Heuristics beside it: {', '.join(POLICIES)}")] = "SJF,F1",
    reference: Annotated[
        Path | None, typer.Option(help="Per-sequence reference JSON: its starts, and its values beside ours")
    ] = None,
    entry: Annotated[str, typer.Option(help="Entry of the reference JSON (default: the trace's name)")] = "",
    procs: Annotated[int, typer.Option(help="Processors of the machine")] = MACHINE_PROCS,
) -> None:
    """The learned order against published heuristics (default SJF and F1) on the RLScheduler
    protocol's sequences, without and with backfilling (default checkpoints: lublin,
    lublin-backfill). With ``--reference``, each heuristic's cell reads ours / published."""
    _existing(trace)
    names = [p.strip() for p in policies.split(",") if p.strip()]
    unknown = [p for p in names if p not in POLICIES]
    if unknown or not names:
        raise ConfigError(
            "rl eval-rlscheduler", "--policies", f"one or more of {', '.join(POLICIES)}, got {policies!r}"
        )
    if procs < 1:
        raise ConfigError("rl eval-rlscheduler", "--procs", f"at least 1, got {procs}")
    published = read_reference(reference, entry or trace.name) if reference is not None else None
    starts = published.starts if published is not None else SEQUENCE_STARTS
    if not 1 <= sequences <= len(starts):
        raise ConfigError("rl eval-rlscheduler", "--sequences", f"1 to {len(starts)}, got {sequences}")
    chosen = {False: checkpoint, True: checkpoint} if checkpoint else SHIPPED_CHECKPOINTS
    table = compare_learned(trace, chosen, starts[:sequences], policies=names, procs=procs)
    title = f"RLScheduler protocol on {trace.name}: mean bounded slowdown over {sequences} sequences"
    if published is not None:
        title += " (ours / published)"
    view = Table(title=title)
    for column in ("mode", "learned", *names):
        view.add_column(column)
    for backfill in (False, True):
        mode = "backfill" if backfill else "no backfill"
        row = table[mode]
        cells = [f"{row['learned']:.2f}"]
        for name in names:
            cell = f"{row[name]:.2f}"
            if published is not None:
                theirs = published.cells[name, backfill].bsld[:sequences]
                cell += f" / {sum(theirs) / len(theirs):.2f}"
            cells.append(cell)
        view.add_row(mode, *cells)
    console.print(view)


@app.command("eval-deepjs")
def eval_deepjs(
    trace: Annotated[Path, typer.Option(help="CloudSimPy's jobs.csv (the DeepJS setup's trace)")],
    checkpoint: Annotated[str, typer.Option(help="A DeepJS chooser .npz (default: the shipped one)")] = "",
    chunks: Annotated[int, typer.Option(help="Evaluation chunks 0 .. N-1 (training never uses 0-49)")] = 50,
) -> None:
    """The learned DeepJS chooser and its fair variant against FIFO, SJF, Random, FirstFit and
    Tetris on the DeepJS chunks: per task, in the trace's time units."""
    _existing(trace)
    if not 1 <= chunks <= TEST_CHUNKS:
        raise ConfigError(
            "rl eval-deepjs", "--chunks", f"1 to {TEST_CHUNKS} (held out from training), got {chunks}"
        )
    with count_progress() as progress:
        task = progress.add_task("choosers", total=len(heuristics()) + 3)
        table = compare_choosers(trace, chunks, checkpoint or None, lambda _: progress.advance(task))
    view = Table(title=f"DeepJS setup, chunks 0-{chunks - 1} of {trace.name}: means per task")
    for column in ("chooser", "bounded slowdown", "makespan", "Jain", "max wait", "mean wait"):
        view.add_column(column)
    for name, m in table.items():
        view.add_row(
            name,
            f"{m['avg_bounded_slowdown']:.3f}",
            f"{m['makespan']:.1f}",
            f"{m['fairness']:.3f}",
            f"{m['max_wait']:.1f}",
            f"{m['avg_wait']:.1f}",
        )
    console.print(view)


@app.command("eval")
def eval_(  # noqa: PLR0917 - typer maps each option to a parameter
    checkpoint: Annotated[str, typer.Option(help="Shipped name (lab) or a policy .npz")] = "lab",
    fair_checkpoint: Annotated[str, typer.Option(help="Checkpoint of learned-fair")] = "lab-fair",
    loads: Annotated[str, typer.Option(help="Loads of the held-out workloads")] = "0.7,0.9,1.1",
    seeds: Annotated[str, typer.Option(help="Held-out workload seeds: 10000-10004 or 1,2,3")] = "10000-10004",
    jobs: Annotated[int, typer.Option(help="Jobs per held-out workload")] = 1024,
    cluster: Annotated[str, typer.Option(help="Cluster spec file or built-in")] = "lab",
    workload: Annotated[str, typer.Option(help="Workload spec file or built-in")] = "lab",
    out: Annotated[Path | None, typer.Option(help="Write eval.csv and eval.json here")] = None,
) -> None:
    """Compare learned and learned-fair with FIFO, SJF, first-fit, random, Tetris and production profiles."""
    spec = load_cluster(cluster)
    profiles = comparison_profiles(learned_profiles(checkpoint, fair_checkpoint))
    load_values, seed_values = _floats(loads, "--loads"), _seeds(seeds)
    total = len(profiles) * len(load_values) * len(seed_values)
    with count_progress(34) as progress:
        task = progress.add_task("simulating", total=total)
        rows = evaluate(
            spec,
            profiles,
            workload=workload,
            loads=load_values,
            seeds=seed_values,
            jobs=jobs,
            progress=lambda what: progress.update(task, advance=1, description=what),
        )
    table = aggregate(rows)
    for load, per in table.items():
        best = best_production(per)
        view = Table(
            title=f"load {load:g}: mean over seeds {seeds} ({jobs} jobs each); best production: {best}"
        )
        for column in ("policy", "mean bsld", "makespan h", "Jain", "max wait h", "mean wait h"):
            view.add_column(column)
        for name, metrics in per.items():
            view.add_row(name, *(f"{metrics[m]:.3f}" for m in METRICS))
        console.print(view)
    if out is not None:
        out.mkdir(parents=True, exist_ok=True)
        with (out / "eval.csv").open("w", newline="", encoding="utf-8") as fh:
            writer = csv.writer(fh)
            writer.writerow([f.name for f in dataclasses.fields(rows[0])])
            writer.writerows(dataclasses.astuple(r) for r in rows)
        (out / "eval.json").write_text(json.dumps({str(k): v for k, v in table.items()}, indent=2) + "\n")
        console.print(f"Wrote {out / 'eval.csv'} and {out / 'eval.json'}")
