"""The researcher's commands: ``submit``, ``queue``, ``jobs``, ``status``, ``cancel``, ``logs``.

Slurm-like flags (``-n/--tasks``, ``-N/--nodes``, ``--gpus-per-task``,
``-p/--queue``, ``-t/--time``, ``-J/--name``) or a job file; who submits comes
from the identity file (docs/researchers.md). The Kubernetes side lives in
:mod:`loadmaster.kube.submit` and :mod:`loadmaster.kube.jobs`, imported only
when a command runs, so that ``loadmaster --help`` stays fast.
"""

from __future__ import annotations

import json
import os
import re
import sys
import time
from dataclasses import asdict
from pathlib import Path
from typing import TYPE_CHECKING, Annotated, Any
from urllib.parse import quote

import typer
import yaml
from rich.table import Table

from loadmaster.cli.output import console
from loadmaster.config.jobspec import Identity, JobSpec, job_from_flags, load_identity, load_job_file
from loadmaster.errors import ConfigError

if TYPE_CHECKING:
    from kubernetes import client

    from loadmaster.kube.jobs import JobView
    from loadmaster.kube.submit import Submission

Kubeconfig = Annotated[
    Path | None,
    typer.Option(help="Kubeconfig file (default: the identity file's, $KUBECONFIG, then ~/.kube/config)"),
]
AsJson = Annotated[bool, typer.Option("--json", help="Print JSON instead of a table")]


def register(app: typer.Typer) -> None:
    """Add the commands to the ``loadmaster`` app."""
    app.command("submit", context_settings={"allow_extra_args": True, "ignore_unknown_options": False})(
        submit
    )
    app.command("queue")(queue)
    app.command("jobs")(jobs)
    app.command("status")(status)
    app.command("cancel")(cancel)
    app.command("logs")(logs)


def _api(kubeconfig: Path | None, who: Identity) -> client.ApiClient:
    from loadmaster.kube.api import api_client  # noqa: PLC0415 - the Kubernetes client loads only when used

    chosen = str(kubeconfig) if kubeconfig else who.kubeconfig or os.environ.get("KUBECONFIG")
    chosen = os.path.expanduser(chosen) if chosen else None  # the identity file may say ~/.kube/...
    default = Path.home() / ".kube" / "config"
    if chosen is None and default.exists():
        chosen = str(default)
    return api_client(kubeconfig=chosen)


def submit(  # noqa: PLR0917 - typer maps each option to a parameter
    ctx: typer.Context,
    args: Annotated[
        list[str] | None, typer.Argument(help="[JOB_FILE.yaml] [-- COMMAND ARGS...]", show_default=False)
    ] = None,
    tasks: Annotated[
        int | None, typer.Option("--tasks", "-n", "--ntasks", help="Tasks (pods): torchrun's nodes")
    ] = None,
    nodes: Annotated[int | None, typer.Option("--nodes", "-N", help="Same as --tasks")] = None,
    gpus_per_task: Annotated[int | None, typer.Option(help="GPUs per task")] = None,
    cpus_per_task: Annotated[str | None, typer.Option(help="CPU per task (Kubernetes quantity)")] = None,
    mem_per_task: Annotated[str | None, typer.Option(help="Memory per task (e.g. 64Gi)")] = None,
    queue_name: Annotated[str | None, typer.Option("--queue", "-p", help="Queue (Slurm's partition)")] = None,
    time_limit: Annotated[
        str | None, typer.Option("--time", "-t", help="Time limit: 90 (minutes), 4:00:00, 1-00:00:00, 4h")
    ] = None,
    priority: Annotated[str | None, typer.Option(help="PriorityClass name")] = None,
    image: Annotated[str | None, typer.Option(help="Container image")] = None,
    env: Annotated[list[str] | None, typer.Option("--env", "-e", help="KEY=VALUE, repeatable")] = None,
    name: Annotated[str | None, typer.Option("--name", "-J", help="Job name (default: generated)")] = None,
    pool: Annotated[str | None, typer.Option(help="Pool (node label loadmaster.io/pool)")] = None,
    resource_type: Annotated[str | None, typer.Option("--type", help="Resource type")] = None,
    cuda: Annotated[str | None, typer.Option(help="CUDA release the image was built with (12.4)")] = None,
    cuda_compat: Annotated[
        bool | None, typer.Option("--cuda-compat", help="The image carries NVIDIA's cuda-compat package")
    ] = None,
    interactive: Annotated[
        bool, typer.Option("--interactive", help="A notebook (or --shell) session in the interactive pool")
    ] = False,
    shell: Annotated[
        bool, typer.Option("--shell", help="With --interactive: a shell, not a notebook")
    ] = False,
    mig: Annotated[
        str | None, typer.Option(help="MIG profile per task (1g.10gb) instead of whole GPUs")
    ] = None,
    dry_run: Annotated[
        bool, typer.Option("--dry-run", help="Print the manifests (validated); create nothing")
    ] = False,
    no_image_lookup: Annotated[
        bool, typer.Option("--no-image-lookup", help="Do not read the image's CUDA_VERSION from its registry")
    ] = False,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Submit a job: flags like Slurm's, or a job file; the command follows `--`."""
    positional = [*(args or []), *ctx.args]
    job_file = Path(positional.pop(0)) if positional and positional[0].endswith((".yaml", ".yml")) else None
    fields: dict[str, Any] = {
        "tasks": tasks or nodes,
        "gpus_per_task": gpus_per_task,
        "cpu_per_task": cpus_per_task,
        "memory_per_task": mem_per_task,
        "queue": queue_name,
        "time": time_limit,
        "priority": priority,
        "image": image,
        "name": name,
        "pool": pool,
        "resource_type": resource_type,
        "cuda": cuda,
        "cuda_compat": cuda_compat,
        "mig": mig,
        "env": _env(env) if env else None,
        "command": positional or None,
        "interactive": interactive or None,
    }
    given = {k: v for k, v in fields.items() if v is not None}
    if tasks and nodes and tasks != nodes:
        raise ConfigError(
            "command line",
            "--nodes",
            f"{nodes} differs from --tasks {tasks}; a task is a node of the job, give one of them",
        )
    who = load_identity()
    if interactive:
        given = _interactive_defaults(given, shell)
    spec = load_job_file(job_file, given) if job_file else job_from_flags(given)
    if no_image_lookup:
        who = who.model_copy(update={"image_lookup": False})
    _submit(spec, who, dry_run, kubeconfig, shell)


def _env(pairs: list[str]) -> dict[str, str]:
    out = {}
    for pair in pairs:
        key, sep, value = pair.partition("=")
        if not sep:
            raise ConfigError("command line", "--env", f"{pair!r} is not KEY=VALUE")
        out[key] = value
    return out


def _interactive_defaults(given: dict[str, Any], shell: bool) -> dict[str, Any]:
    from loadmaster.kube import submit as sb  # noqa: PLC0415

    defaults: dict[str, Any] = {"pool": sb.INTERACTIVE_POOL, "time": sb.INTERACTIVE_TIME, "tasks": 1}
    if shell:
        defaults["command"] = ["sleep", "infinity"]
    else:
        defaults["image"] = sb.NOTEBOOK_IMAGE
        defaults["command"] = [
            "start-notebook.py",
            "--ServerApp.ip=0.0.0.0",
            f"--ServerApp.port={sb.NOTEBOOK_PORT}",
        ]
        defaults["port"] = sb.NOTEBOOK_PORT
    return {**defaults, **given}


def _submit(spec: JobSpec, who: Identity, dry_run: bool, kubeconfig: Path | None, shell: bool) -> None:
    from loadmaster.kube import submit as sb  # noqa: PLC0415

    notes: list[str] = []
    spec = _image_cuda(spec, who, notes)
    api = None if dry_run else _api(kubeconfig, who)
    if api is not None and spec.interactive and spec.mig is None and spec.gpus_per_task != 0:
        slice_ = sb.smallest_mig(api, spec.pool or sb.INTERACTIVE_POOL)
        if slice_ is not None:
            spec = spec.model_copy(update={"mig": slice_})
            notes.append(f"a MIG slice {slice_}: the {spec.pool} pool has MIG (give --mig to choose another)")
    submission = sb.build(spec, who, sb.job_name(spec, who), notes)
    problems = sb.schema_problems(submission)
    if problems:
        raise sb.SubmitError("the manifests break the Kubernetes schema: " + "; ".join(problems))
    if api is None:
        print(yaml.safe_dump_all(submission.manifests, sort_keys=False), end="")
        for note in submission.notes:
            console.print(f"# note: {note}", style="dim", markup=False)
        console.print(
            f"# valid against the Kubernetes {sb.SCHEMA_VERSION} schemas; nothing was created", style="dim"
        )
        return
    verdict = sb.never_fits(api, submission)
    if verdict:
        raise sb.SubmitError(f"job {submission.name} cannot run on any node of this cluster: {verdict}")
    sb.create(api, submission)
    _print_submitted(submission, spec, shell)


def _image_cuda(spec: JobSpec, who: Identity, notes: list[str]) -> JobSpec:
    """The spec with the CUDA release its image declares (tag, else registry) when none was given."""
    from loadmaster.kube.registry import RegistryError, cuda_from_registry  # noqa: PLC0415
    from loadmaster.model.cuda import cuda_from_image  # noqa: PLC0415

    if spec.cuda is not None or "CUDA_VERSION" in spec.env:
        return spec
    if (found := cuda_from_image(spec.image)) is not None:
        notes.append(f"CUDA {found} read from the image tag")
    elif who.image_lookup:
        try:
            found = cuda_from_registry(spec.image)
        except RegistryError as exc:
            print(f"note: CUDA release not read from the image's registry: {exc}", file=sys.stderr)
            return spec
        notes.append(f"CUDA {found} read from the image's configuration (CUDA_VERSION)")
    return spec if found is None else spec.model_copy(update={"cuda": str(found)})


def _print_submitted(submission: Submission, spec: JobSpec, shell: bool) -> None:
    from loadmaster.kube import submit as sb  # noqa: PLC0415

    what = f"{spec.tasks} task(s) x " + (f"MIG {spec.mig}" if spec.mig else f"{spec.gpus_per_task} GPU(s)")
    console.print(f"Submitted [bold]{submission.namespace}/{submission.name}[/]: {what}, queue {spec.queue}")
    for note in submission.notes:
        console.print(f"  note: {note}")
    pod = f"$(kubectl -n {submission.namespace} get pod -l {sb.JOB_LABEL}={submission.name} -o name)"
    if spec.interactive and shell:
        console.print(
            f"Connect when it runs: kubectl -n {submission.namespace} exec -it {pod} -- bash", markup=False
        )
    elif spec.interactive:
        forward = f"kubectl -n {submission.namespace} port-forward {pod} {spec.port}:{spec.port}"
        console.print(f"Connect when it runs: {forward}", markup=False)
        console.print(
            f"then open http://localhost:{spec.port} (the token is in: loadmaster logs {submission.name})",
            markup=False,
        )
        console.print(f"The session ends after {spec.time}; idle sessions are reclaimed first.", markup=False)
    console.print(f"Follow it: loadmaster status {submission.name}", markup=False)


def _jobs(kubeconfig: Path | None) -> tuple[Any, Identity]:
    from loadmaster.kube.jobs import Jobs  # noqa: PLC0415

    who = load_identity()
    return Jobs(_api(kubeconfig, who), who), who


def _when(epoch_s: float | None) -> str:
    if epoch_s is None:
        return "-"
    return time.strftime("%Y-%m-%d %H:%M", time.localtime(epoch_s))


def _readable(reason: str) -> str:
    """The reason with the scheduler's epoch times (``t=1700003600s``) as local times, for people."""
    return re.sub(r"\bt=(\d+(?:\.\d+)?)s\b", lambda m: _when(float(m[1])), reason)


def _wait(view: JobView, now: float) -> str:
    minutes = max(now - view.submitted_s, 0) / 60
    return f"{minutes:.0f}m" if minutes < 120 else f"{minutes / 60:.1f}h"


def queue(
    me: Annotated[bool, typer.Option("--me", help="Only your jobs")] = False,
    as_json: AsJson = False,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Waiting jobs per queue, in order (like squeue): place, wait, why, estimated start."""
    from loadmaster.kube.jobs import visible  # noqa: PLC0415

    reader, who = _jobs(kubeconfig)
    waiting = [v for v in reader.all_jobs(everywhere=not me) if v.position is not None]
    shown = [v if visible(v, who) else v.anonymous() for v in waiting if not me or visible(v, who)]
    if as_json:
        print(json.dumps({"jobs": [v.to_json() for v in shown], "scope": reader.scope_note or "cluster"}))
        return
    now = time.time()
    table = Table(title="Waiting jobs by queue (others' jobs shown as (other), as on the dashboard)")
    for column in ("queue", "#", "job", "user", "GPUs", "waited", "why it waits", "est. start"):
        table.add_column(column, overflow="fold")
    for view in sorted(shown, key=lambda v: (v.queue, v.position or 0)):
        table.add_row(
            view.queue,
            str(view.position),
            view.id,
            view.user,
            str(view.gpus),
            _wait(view, now),
            _readable(view.reason),
            _when(view.estimated_start_s),
        )
    console.print(table)
    if reader.scope_note:
        console.print(f"note: {reader.scope_note}")


def jobs(as_json: AsJson = False, kubeconfig: Kubeconfig = None) -> None:
    """Your jobs, all states."""
    from loadmaster.kube.jobs import visible  # noqa: PLC0415

    reader, who = _jobs(kubeconfig)
    mine = [v for v in reader.all_jobs() if visible(v, who)]
    if as_json:
        print(json.dumps({"jobs": [v.to_json() for v in mine]}))
        return
    table = Table(title=f"Jobs of {who.user} in {who.home}")
    for column in ("job", "state", "queue", "tasks", "GPUs", "submitted", "started"):
        table.add_column(column)
    if any(v.reclaim for v in mine):
        table.add_column("reclaim (idle GPUs)")
    for view in mine:
        table.add_row(
            view.name,
            view.state,
            view.queue,
            str(view.tasks),
            str(view.gpus),
            _when(view.submitted_s),
            _when(view.started_s),
            *([view.reclaim] if any(v.reclaim for v in mine) else []),
        )
    console.print(table)


def dashboard_link(base: str, job_id: str) -> str:
    """The dashboard's page of one job: ``#job=ID`` opens it once the reader has signed in."""
    return f"{base.rstrip('/')}/#job={quote(job_id, safe='')}"


def status(
    job: Annotated[str, typer.Argument(help="Job name (or NAMESPACE/NAME)")],
    as_json: AsJson = False,
    prometheus: Annotated[
        str | None, typer.Option(help="Prometheus scraping dcgm-exporter (default: the identity file's)")
    ] = None,
    kubeconfig: Kubeconfig = None,
) -> None:
    """One job: state, why it waits and until when, its tasks and GPUs, their use, and where to look next."""
    reader, who = _jobs(kubeconfig)
    view = reader.get(job)
    link = dashboard_link(who.dashboard, view.id) if who.dashboard else None
    usage, note = _usage(view, prometheus or who.prometheus)
    if as_json:
        print(json.dumps({**view.to_json(), "dashboard": link, "usage": usage, "usage_note": note}))
        return
    console.print(
        f"[bold]{view.id}[/]  {view.state}  queue {view.queue}  {view.tasks} x {view.gpus_per_task} GPU"
    )
    if view.position is not None:
        console.print(
            f"  waits: #{view.position} in queue {view.queue}: {_readable(view.reason)}", markup=False
        )
        unknown = "" if view.estimated_start_s else " (no reservation holds GPUs for it yet)"
        console.print(f"  estimated start: {_when(view.estimated_start_s)}{unknown}")
    if view.reclaim:
        console.print(f"  reclaim: {view.reclaim}", markup=False)
    if view.cuda:
        console.print(f"  CUDA {view.cuda}: nodes must run a compatible driver (docs/cuda.md)")
    for task in view.task_views:
        where = f"{task.node} GPUs {task.gpus or '-'}" if task.node else "not placed"
        detail = f" ({task.detail})" if task.detail else ""
        console.print(f"  rank {task.rank}: {task.pod} {task.phase} {where}{detail}", markup=False)
    if usage is not None:
        console.print(
            f"  GPU utilisation: {usage['mean_util_pct']:.0f}% on average over its run, "
            f"{usage['latest_util_pct']:.0f}% now, on {usage['gpus']} GPU(s)",
            markup=False,
        )
        if usage["idle_gpus"]:
            console.print(f"  idle GPUs: {', '.join(usage['idle_gpus'])}", markup=False)
        for finding in usage["findings"]:
            console.print(f"  finding: {finding}", markup=False)
        if usage["diagnostics_note"]:
            console.print(f"  {usage['diagnostics_note']}", markup=False)
    elif note:
        console.print(f"  {note}", markup=False)
    if link:
        console.print(f"  dashboard: {link}", markup=False)
    console.print(f"  logs: loadmaster logs {view.name} [--rank N] [--follow]", markup=False)


def _usage(view: JobView, prometheus: str | None) -> tuple[dict[str, Any] | None, str]:
    """The job's GPU use and findings from Prometheus, or why there are none."""
    if view.state not in {"running", "starting"}:
        return None, ""
    if prometheus is None:
        return None, "GPU use: set prometheus in the identity file (or --prometheus) to see it"
    from loadmaster.errors import TelemetryError  # noqa: PLC0415
    from loadmaster.kube.usage import job_usage  # noqa: PLC0415 - telemetry and diagnostics only when asked for
    from loadmaster.telemetry.prometheus import PrometheusStore  # noqa: PLC0415

    try:
        with PrometheusStore(prometheus) as store:
            found = job_usage(store, view, time.time())
    except TelemetryError as exc:
        return None, f"GPU use: unavailable ({exc})"
    if found is None:
        return None, f"GPU use: Prometheus has no GPU series of the job's pods (namespace {view.namespace})"
    return asdict(found), ""


def cancel(
    job: Annotated[str, typer.Argument(help="Job name (or NAMESPACE/NAME)")], kubeconfig: Kubeconfig = None
) -> None:
    """Cancel a job: delete its Job, pods, Service and PodGroup."""
    reader, _ = _jobs(kubeconfig)
    deleted = reader.cancel(job)
    console.print(f"Cancelled {job}: deleted {', '.join(deleted) or 'nothing (already gone)'}", markup=False)


def logs(
    job: Annotated[str, typer.Argument(help="Job name (or NAMESPACE/NAME)")],
    rank: Annotated[int, typer.Option(help="Which task (its completion index)")] = 0,
    follow: Annotated[bool, typer.Option("--follow", "-f", help="Keep printing while it runs")] = False,
    kubeconfig: Kubeconfig = None,
) -> None:
    """Print a task's log."""
    reader, _ = _jobs(kubeconfig)
    for chunk in reader.logs(job, rank=rank, follow=follow):
        sys.stdout.write(chunk)
        sys.stdout.flush()
