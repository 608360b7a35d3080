"""A training run on disk: checkpoints, the learning curve as CSV and PNG, the final policy.

Layout of ``out_dir``::

    policy.npz              the final checkpoint (what ``learned`` loads)
    checkpoints/update-N.npz  every ``every`` updates
    curve.csv               one row per update (see UpdateLog)
    curve.png               mean bounded slowdown of the training episodes per update, per load
    config.json             the TrainConfig, for the record
"""

from __future__ import annotations

import csv
import dataclasses
import json
import math
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

import matplotlib

matplotlib.use("Agg")
import matplotlib.pyplot as plt
from matplotlib.axes import Axes
from matplotlib.figure import Figure
from matplotlib.ticker import FormatStrFormatter

from loadmaster.rl.agent import Agent
from loadmaster.rl.ppo import TrainConfig, UpdateLog, train
from loadmaster.rl.rank.config import RankConfig, RankLog
from loadmaster.rl.rank.episodes import ChoiceEpisodes, Source
from loadmaster.rl.rank.train import train_ranking

CURVE_COLUMNS = (
    "update",
    "decisions",
    "episodes",
    "mean_bsld",
    "policy_loss",
    "value_loss",
    "entropy",
    "approx_kl",
    "elapsed_s",
    "validation_bsld",
)


def config_record(config: TrainConfig) -> dict[str, Any]:
    """The training settings as JSON-ready data (stored in every checkpoint's meta)."""
    record: dict[str, Any] = json.loads(json.dumps(dataclasses.asdict(config)))
    return record


def train_to(
    config: TrainConfig,
    out_dir: Path,
    *,
    every: int = 10,
    command: str = "",
    on_update: Callable[[UpdateLog], None] | None = None,
    ray: str | None = None,
) -> Path:
    """Train and write the run into ``out_dir``; returns the final checkpoint's path (``ray``: the
    environments in Ray actors, see :func:`loadmaster.rl.ppo.train`). The final checkpoint is the
    last update's, or with ``config.validation`` the best-validated update's; its meta records the
    update, the wall and the CPU seconds of training."""
    (out_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    record = config_record(config)
    (out_dir / "config.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    meta = {"train": record, "command": command}
    logs: list[UpdateLog] = []
    curve = out_dir / "curve.csv"
    loads = [] if config.family else sorted(config.loads)
    with curve.open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow([*CURVE_COLUMNS, *(f"mean_bsld_load_{x:g}" for x in loads)])

        def record_update(log: UpdateLog, agent: Agent) -> None:
            logs.append(log)
            row = [getattr(log, c) for c in CURVE_COLUMNS]
            writer.writerow([*row, *(log.mean_bsld_by_load.get(x, float("nan")) for x in loads)])
            fh.flush()
            if log.update % every == 0 or log.update == config.updates:
                with (out_dir / "checkpoints" / f"update-{log.update:04d}.npz").open("wb") as ckpt:
                    agent.save(ckpt, {**meta, "update": log.update})
            if on_update is not None:
                on_update(log)

        started, cpu = time.perf_counter(), time.process_time()
        start: list[float] = []
        agent = train(config, record_update, ray=ray, on_start=start.append)
        seconds = round(time.perf_counter() - started, 1)
        cpu_seconds = round(time.process_time() - cpu, 1)
    best = config.updates
    if start:
        # The starting network (update 0) is kept unless a check validated strictly better.
        scores = [(start[0], 0)] + [(log.validation_bsld, log.update) for log in logs]
        best = min((item for item in scores if item[0] == item[0]), key=lambda item: item[0])[1]
    final = out_dir / "policy.npz"
    with final.open("wb") as out:
        agent.save(out, {**meta, "update": best, "train_seconds": seconds, "train_cpu_seconds": cpu_seconds})
    plot_curve(logs, loads, out_dir / "curve.png")
    return final


def plot_curve(logs: list[UpdateLog], loads: list[float], path: Path) -> None:
    """Mean bounded slowdown of the training episodes per update, one line per load (all of them
    together where there are no loads: a family), and of the validation windows where checked."""
    fig, ax = plt.subplots(figsize=(7, 4))
    lines = {f"load {x:g}": [(g.update, g.mean_bsld_by_load.get(x, math.nan)) for g in logs] for x in loads}
    if not loads:
        lines["training episodes"] = [(g.update, g.mean_bsld) for g in logs]
    lines["greedy, validation windows"] = [(g.update, g.validation_bsld) for g in logs]
    for label, points in lines.items():
        kept = [(x, y) for x, y in points if not math.isnan(y)]
        if kept:
            xs, ys = zip(*kept, strict=True)
            ax.plot(xs, ys, marker=".", label=label)
    _finish(fig, ax, "mean bounded slowdown", "Learned scheduler: learning curve", path)


def _finish(fig: Figure, ax: Axes, ylabel: str, title: str, path: Path) -> None:
    """Label a learning-curve plot, write it to ``path`` and close it."""
    ax.set_xlabel("PPO update")
    ax.set_ylabel(ylabel)
    ax.set_title(title)
    ax.grid(alpha=0.3)
    ax.legend()
    fig.tight_layout()
    fig.savefig(path, dpi=100)
    plt.close(fig)


RANK_COLUMNS = (
    "update",
    "decisions",
    "sampled_bsld",
    "validation_bsld",
    "policy_loss",
    "approx_kl",
    "clip_fraction",
    "elapsed_s",
)


def rank_to(
    config: RankConfig,
    episodes: Source,
    out_dir: Path,
    *,
    command: str = "",
    on_update: Callable[[RankLog], None] | None = None,
    ray: str | None = None,
) -> Path:
    """Train by ranking (:mod:`loadmaster.rl.rank`) and write the run into ``out_dir`` (the same
    layout as :func:`train_to`; the policy is the update with the best validation score)."""
    (out_dir / "checkpoints").mkdir(parents=True, exist_ok=True)
    record = {**json.loads(json.dumps(dataclasses.asdict(config))), "episodes": repr(episodes)}
    (out_dir / "config.json").write_text(json.dumps(record, indent=2) + "\n", encoding="utf-8")
    meta: dict[str, object] = {"train": record, "command": command, "trainer": "rank"}
    if isinstance(episodes, ChoiceEpisodes):
        meta.update(episodes.inputs_meta)
    logs: list[RankLog] = []
    with (out_dir / "curve.csv").open("w", newline="", encoding="utf-8") as fh:
        writer = csv.writer(fh)
        writer.writerow(RANK_COLUMNS)

        def record_update(log: RankLog, agent: Agent) -> None:
            logs.append(log)
            writer.writerow([getattr(log, c) for c in RANK_COLUMNS])
            fh.flush()
            with (out_dir / "checkpoints" / f"update-{log.update:04d}.npz").open("wb") as ckpt:
                agent.save(ckpt, {**meta, "update": log.update})
            if on_update is not None:
                on_update(log)

        started = time.perf_counter()
        start: list[float] = []
        agent = train_ranking(config, episodes, record_update, start.append, ray=ray)
        seconds = round(time.perf_counter() - started, 1)
    # The starting network (update 0) is kept unless an update validated strictly better.
    scores = [(start[0], 0)] + [(log.validation_bsld, log.update) for log in logs]
    best = min(scores, key=lambda item: item[0])[1]
    final = out_dir / "policy.npz"
    with final.open("wb") as out:
        agent.save(out, {**meta, "update": best, "train_seconds": seconds})
    plot_rank_curve(logs, out_dir / "curve.png")
    return final


def plot_rank_curve(logs: list[RankLog], path: Path) -> None:
    """Sampled (exploring) and greedy validation bounded slowdown per update."""
    fig, ax = plt.subplots(figsize=(7, 4))
    updates = [log.update for log in logs]
    ax.plot(updates, [log.sampled_bsld for log in logs], marker=".", alpha=0.6, label="sampled (exploring)")
    ax.plot(updates, [log.validation_bsld for log in logs], marker=".", label="greedy, validation sequences")
    ax.set_yscale("log")
    ax.yaxis.set_major_formatter(FormatStrFormatter("%g"))
    ax.yaxis.set_minor_formatter(FormatStrFormatter("%g"))
    _finish(fig, ax, "mean bounded slowdown", "Learned order trained by ranking: learning curve", path)
