"""``loadmaster sweep SWEEP.yaml``: run a grid of simulations, resumably, locally or on Ray.

The heavy modules (the simulator, pyarrow, plotting, Ray) are imported inside
the command, so that ``loadmaster --help`` does not pay for them.
"""

from __future__ import annotations

import logging
import os
import shutil
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from loadmaster.cli.output import console

if TYPE_CHECKING:
    from loadmaster.sweep import Progress as SweepProgress


def _eta(seconds: float | None) -> str:
    if seconds is None:
        return "ETA -"
    minutes, secs = divmod(int(seconds), 60)
    hours, minutes = divmod(minutes, 60)
    return f"ETA {hours}:{minutes:02d}:{secs:02d}"


def sweep(
    spec: Annotated[Path, typer.Argument(help="The sweep file (YAML; see docs/sweeps.md)")],
    out: Annotated[
        Path | None, typer.Option(help="Folder of results (default: out/sweeps/NAME); reruns resume it")
    ] = None,
    workers: Annotated[int, typer.Option(help="Local worker processes (default: CPU count)")] = 0,
    ray: Annotated[
        str | None,
        typer.Option(
            help="Run on Ray: auto (Ray's default), local (a new local instance) or a cluster ADDRESS"
        ),
    ] = None,
    report_only: Annotated[
        bool, typer.Option(help="Only rebuild the table and report from stored cells")
    ] = False,
) -> None:
    """Run every cell of a sweep not yet done; write the table, the report and the paired comparison."""
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn  # noqa: PLC0415

    from loadmaster.parallel import open_executor  # noqa: PLC0415
    from loadmaster.sweep import Store, load_sweep, run_sweep, write_report  # noqa: PLC0415

    plan = load_sweep(spec)
    folder = out or Path("out") / "sweeps" / plan.name
    folder.mkdir(parents=True, exist_ok=True)
    shutil.copyfile(spec, folder / "sweep.yaml")
    _log_to(folder / "sweep.log")
    store = Store(folder)
    unique = len({c.key for c in plan.cells})
    console.print(f"[bold]{plan.name}[/]: {len(plan.cells)} cells ({unique} distinct) -> {folder}")
    if not report_only:
        with open_executor(workers or os.cpu_count() or 1, ray) as executor:
            console.print(f"running on {executor.describe}")
            columns = (
                TextColumn("cells"),
                BarColumn(),
                TextColumn("{task.completed}/{task.total} done, {task.fields[running]} running, "),
                TextColumn("[red]{task.fields[failed]} failed[/], {task.fields[eta]}"),
                TimeElapsedColumn(),
            )
            with Progress(*columns, console=console) as bar:
                task = bar.add_task("cells", total=unique, running=0, failed=0, eta=_eta(None))

                def show(p: SweepProgress) -> None:
                    bar.update(task, completed=p.done, running=p.running, failed=p.failed, eta=_eta(p.eta_s))

                outcome = run_sweep(plan, store, executor, on_progress=show)
        console.print(
            f"ran {outcome.ran} cells in {outcome.wall_s:.1f} s, {outcome.skipped} done before, "
            f"{len(outcome.failed)} failed"
        )
        for key, error in outcome.failed.items():
            last = error.strip().splitlines()[-1]
            console.print(f"[red]failed[/] {key}: {last}", markup=True, highlight=False)
    paths = write_report(plan, store, folder)
    console.print(f"Table: {paths['table']}  comparison: {paths['comparison']}  report: {paths['report']}")


def _log_to(path: Path) -> None:
    """Every action and failure of the sweep goes to ``path`` (appended across runs)."""
    handler = logging.FileHandler(path, encoding="utf-8")
    handler.setFormatter(logging.Formatter("%(asctime)s %(levelname)s %(name)s: %(message)s"))
    for name in ("loadmaster.sweep", "loadmaster.parallel"):
        logger = logging.getLogger(name)
        logger.setLevel(logging.INFO)
        if not any(getattr(h, "baseFilename", None) == handler.baseFilename for h in logger.handlers):
            logger.addHandler(handler)
        else:
            handler.close()
