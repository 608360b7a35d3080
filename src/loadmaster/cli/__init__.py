"""The ``loadmaster`` command line.

Each command lives in its own module and is imported only when it runs:
``loadmaster --help`` and ``loadmaster version`` must print at once, without
loading numpy, pandas, the plotting libraries, the web server or the
Kubernetes client (and the scheduler must run where plotting libraries are
absent). :data:`COMMANDS` lists every command with the one-line help that
``--help`` shows; ``tests/unit/test_cli_startup.py`` checks that each line
matches the command's own help and that the listing imports nothing heavy.
"""

from __future__ import annotations

import importlib
import sys
from dataclasses import dataclass
from difflib import get_close_matches
from typing import Any

import typer
from typer.core import TyperCommand, TyperGroup

from loadmaster import __version__
from loadmaster.errors import LoadmasterError


@dataclass(frozen=True)
class LazyCommand:
    """Where a command is defined, and the line ``--help`` shows for it without importing it."""

    module: str
    attribute: str
    """A ``typer.Typer`` (a command group) or a function (one command)."""
    help: str
    context_settings: tuple[tuple[str, bool], ...] = ()
    """Click context settings of a function command, as (name, value) pairs."""


COMMANDS: dict[str, LazyCommand] = {
    "simulate": LazyCommand(
        "loadmaster.cli.simulate",
        "simulate",
        "Run every profile on the same cluster and jobs; print a comparison and write a report.",
    ),
    "profiles": LazyCommand(
        "loadmaster.cli.simulate",
        "list_profiles",
        "List the profiles of a file (validating it) and the plugins they may use.",
    ),
    "trace": LazyCommand("loadmaster.cli.trace", "app", "Read, convert and inspect job traces."),
    "workload": LazyCommand(
        "loadmaster.cli.workload", "app", "Fit workload models to traces and sample jobs from them."
    ),
    "mig": LazyCommand("loadmaster.cli.mig", "app", "MIG layouts: plan them for a demand mix."),
    "rl": LazyCommand("loadmaster.cli.rl", "app", "The learned scheduler: train it with PPO, evaluate it."),
    "serve": LazyCommand(
        "loadmaster.cli.serve",
        "serve",
        "Serve the GPU dashboard and its JSON API, over a simulated or a live Kubernetes cluster.",
    ),
    "agent": LazyCommand(
        "loadmaster.cli.agent",
        "agent",
        "Read the GPUs through NVML and serve dcgm-exporter-compatible metrics for Prometheus.",
    ),
    "diagnose": LazyCommand("loadmaster.cli.diagnose", "app", "Diagnose a training job from GPU telemetry."),
    "sweep": LazyCommand(
        "loadmaster.cli.sweep",
        "sweep",
        "Run every cell of a sweep not yet done; write the table, the report and the paired comparison.",
    ),
    # The researcher's commands (docs/researchers.md); Kubernetes is imported when they run.
    "submit": LazyCommand(
        "loadmaster.cli.jobs",
        "submit",
        "Submit a job: flags like Slurm's, or a job file; the command follows `--`.",
        (("allow_extra_args", True), ("ignore_unknown_options", False)),
    ),
    "queue": LazyCommand(
        "loadmaster.cli.jobs",
        "queue",
        "Waiting jobs per queue, in order (like squeue): place, wait, why, estimated start.",
    ),
    "jobs": LazyCommand("loadmaster.cli.jobs", "jobs", "Your jobs, all states."),
    "status": LazyCommand(
        "loadmaster.cli.jobs",
        "status",
        "One job: state, why it waits and until when, its tasks and GPUs, their use, and where to look next.",
    ),
    "cancel": LazyCommand(
        "loadmaster.cli.jobs", "cancel", "Cancel a job: delete its Job, pods, Service and PodGroup."
    ),
    "logs": LazyCommand("loadmaster.cli.jobs", "logs", "Print a task's log."),
    "kube": LazyCommand(
        "loadmaster.cli.kube", "app", "Schedule pods on a Kubernetes cluster (schedulerName: loadmaster)."
    ),
}


def _root() -> None:
    """The root's callback: with one, typer builds a group although only ``version`` is defined here."""


def load_command(name: str) -> Any:
    """Import command ``name``'s module and build its click command (a group for a sub-app)."""
    entry = COMMANDS[name]
    target = getattr(importlib.import_module(entry.module), entry.attribute)
    # Registered on a throwaway root exactly as add_typer/command would have registered it eagerly.
    root = typer.Typer(add_completion=False)
    root.callback()(_root)
    if isinstance(target, typer.Typer):
        root.add_typer(target, name=name)
    else:
        root.command(name, context_settings=dict(entry.context_settings) or None)(target)
    group = typer.main.get_command(root)
    assert isinstance(group, TyperGroup)
    return group.commands[name]


class LazyGroup(TyperGroup):
    """The root group: commands of :data:`COMMANDS` are imported when invoked, not when listed."""

    _listing = False

    def list_commands(self, ctx: Any) -> list[str]:
        """The lazy commands first, in :data:`COMMANDS` order, then those defined here."""
        return [*COMMANDS, *(name for name in super().list_commands(ctx) if name not in COMMANDS)]

    def get_command(self, ctx: Any, cmd_name: str) -> Any:
        """A placeholder carrying the help line while ``--help`` lists; the real command otherwise."""
        if cmd_name not in COMMANDS or cmd_name in self.commands:
            return super().get_command(ctx, cmd_name)
        if self._listing:
            return TyperCommand(name=cmd_name, help=COMMANDS[cmd_name].help)
        command = load_command(cmd_name)
        self.commands[cmd_name] = command
        return command

    def resolve_command(self, ctx: Any, args: list[str]) -> Any:
        """An unknown command suggests the close names among all commands, lazy ones included."""
        known = self.list_commands(ctx)
        if args and not args[0].startswith("-") and args[0] not in known:
            matches = get_close_matches(args[0], known)
            hint = f" Did you mean {', '.join(repr(m) for m in matches)}?" if matches else ""
            ctx.fail(f"No such command {args[0]!r}.{hint}")
        return super().resolve_command(ctx, args)

    def format_help(self, ctx: Any, formatter: Any) -> None:
        """List the commands from their help lines alone (nothing heavy is imported)."""
        self._listing = True
        try:
            super().format_help(ctx, formatter)
        finally:
            self._listing = False


app = typer.Typer(
    cls=LazyGroup,
    add_completion=False,
    no_args_is_help=True,
    help="Schedule, simulate and study GPU clusters.",
)
app.callback()(_root)


@app.command()
def version() -> None:
    """Print loadmaster's version."""
    print(__version__)


def main() -> None:
    """Entry point: run the app; the project's own errors print as one clear line, exit code 2."""
    try:
        app()
    except LoadmasterError as exc:
        # Plain print: rich would wrap a long path across lines, and the message must stay greppable.
        print(f"error: {exc}", file=sys.stderr)
        raise SystemExit(2) from None
    except ModuleNotFoundError as exc:
        extra = missing_extra(exc.name)
        if extra is None:
            raise  # not an optional dependency: a real bug, shown whole
        print(
            f"error: this command needs {exc.name!r}, from loadmaster's {extra!r} extra: "
            f"pip install 'loadmaster[{extra}]'",
            file=sys.stderr,
        )
        raise SystemExit(2) from None


EXTRA_OF_MODULE = {
    "matplotlib": "report",
    "plotly": "report",
    "fastapi": "serve",
    "uvicorn": "serve",
    "duckdb": "serve",
    "kubernetes": "kube",
    "kubernetes_validate": "submit",
    "prometheus_client": "kube",
    "pynvml": "agent",
    "grpc": "agent",
    "google": "agent",
    "torch": "rl",
    "gymnasium": "rl",
    "ray": "ray",
}
"""Top-level module -> the pyproject extra that installs it (an install of the core alone lacks them)."""


def missing_extra(module: str | None) -> str | None:
    """The extra that provides ``module`` (a dotted name: its top level counts), or None."""
    return EXTRA_OF_MODULE.get((module or "").split(".")[0])
