"""``loadmaster kube``: run as a Kubernetes scheduler, show what it would do, snapshot the cluster."""

from __future__ import annotations

import os
import socket
import time
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer
import yaml
from rich.table import Table

from loadmaster.cli.output import console
from loadmaster.config import BUILTIN_PROFILES
from loadmaster.errors import ConfigError
from loadmaster.kube.api import LeaderElector
from loadmaster.kube.cluster import KubeCluster, StepReport
from loadmaster.kube.profiles import ProfileScheduler
from loadmaster.kube.queues import DEFAULT_CONFIGMAP, load_profile
from loadmaster.kube.snapshot import take_snapshot
from loadmaster.kube.translate import SCHEDULER_NAME, KubeError
from loadmaster.scheduling import Scheduler
from loadmaster.traces.trace import write_parquet

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

app = typer.Typer(
    no_args_is_help=True, help="Schedule pods on a Kubernetes cluster (schedulerName: loadmaster)."
)

Kubeconfig = Annotated[
    Path | None, typer.Option(help="Kubeconfig file (default: the in-cluster service account)")
]
ProfileName = Annotated[str, typer.Option(help="Profile to schedule with")]
ProfilesFile = Annotated[str, typer.Option(help="Profiles file (default: the built-in profiles)")]
SchedulerNames = Annotated[
    list[str] | None,
    typer.Option(
        "--scheduler-name",
        help="NAME=PROFILE: schedule pods whose spec.schedulerName is NAME with PROFILE; repeat for several "
        "profiles in one process (default: loadmaster=the --profile)",
    ),
]
QueuesConfigMap = Annotated[
    str, typer.Option(help="NAMESPACE/NAME of the queues ConfigMap ('' for none); absent is fine")
]


def _cluster(  # noqa: PLR0917 - the options of the commands, passed on
    kubeconfig: Path | None,
    profile: str,
    profiles_file: str,
    queues: str,
    lease_ns: str,
    names: list[str] | None = None,
) -> KubeCluster:
    api = _api(kubeconfig)
    chosen = {
        name: Scheduler(load_profile(api, wanted, profiles_file, queues or None))
        for name, wanted in scheduler_profiles(names or [], profile).items()
    }
    identity = os.environ.get("POD_NAME") or socket.gethostname()
    lease = LeaderElector(api, identity, namespace=lease_ns)
    scheduler = ProfileScheduler(chosen) if names else next(iter(chosen.values()))
    return KubeCluster(api, scheduler, identity, lease=lease)


def scheduler_profiles(names: list[str], profile: str) -> dict[str, str]:
    """``--scheduler-name NAME=PROFILE`` options as schedulerName -> profile (none: loadmaster -> profile)."""
    if not names:
        return {SCHEDULER_NAME: profile}
    found: dict[str, str] = {}
    for text in names:
        name, sep, wanted = text.partition("=")
        if not sep or not name or not wanted:
            raise ConfigError("--scheduler-name", text, "expected NAME=PROFILE, like loadmaster-batch=slurm")
        if name in found:
            raise ConfigError(
                "--scheduler-name", name, "is given twice; each schedulerName takes one profile"
            )
        found[name] = wanted
    return found


@app.command("run")
def run(  # noqa: PLR0917 - typer maps each option to a parameter
    kubeconfig: Kubeconfig = None,
    profile: ProfileName = "binpack",
    profiles_file: ProfilesFile = BUILTIN_PROFILES,
    queues: QueuesConfigMap = DEFAULT_CONFIGMAP,
    interval: Annotated[float, typer.Option(help="Seconds between scheduling cycles")] = 1.0,
    lease_namespace: Annotated[str, typer.Option(help="Namespace of the leader Lease")] = "loadmaster",
    max_steps: Annotated[int, typer.Option(help="Stop after this many cycles (0: run until killed)")] = 0,
    scheduler_name: SchedulerNames = None,
) -> None:
    """Watch pods naming loadmaster, nodes and PodGroups; bind, evict and explain every INTERVAL s."""
    cluster = _cluster(kubeconfig, profile, profiles_file, queues, lease_namespace, scheduler_name)
    cluster.start(renew_in_background=True)
    try:
        deadline = time.monotonic() + 60
        while not cluster.listed():
            if time.monotonic() > deadline:
                raise KubeError("could not list nodes, pods and PodGroups within 60 s")
            time.sleep(0.05)
        steps = 0
        while max_steps == 0 or steps < max_steps:
            report = cluster.step()
            steps += 1
            if report.bound or report.evicted or report.rolled_back:
                console.print(
                    f"cycle {steps}: bound {len(report.bound)}, evicted {len(report.evicted)}, "
                    f"rolled back {len(report.rolled_back)}, waiting {len(report.waiting)}"
                    + ("" if report.leader else " (not the leader)")
                )
            if max_steps == 0 or steps < max_steps:
                time.sleep(interval)
    finally:
        cluster.stop()


@app.command("dry-run")
def dry_run(
    kubeconfig: Kubeconfig = None,
    profile: ProfileName = "binpack",
    profiles_file: ProfilesFile = BUILTIN_PROFILES,
    queues: QueuesConfigMap = DEFAULT_CONFIGMAP,
    scheduler_name: SchedulerNames = None,
) -> None:
    """One cycle on the live cluster, writing nothing: what would bind, be evicted, and why others wait."""
    cluster = _cluster(kubeconfig, profile, profiles_file, queues, "loadmaster", scheduler_name)
    cluster.list_now()
    _print_plan(cluster.step(dry_run=True))


def _print_plan(report: StepReport) -> None:
    table = Table(title="What loadmaster would do now (nothing was written)")
    for column in ("action", "pod or job", "node or reason"):
        table.add_column(column)
    for key, node in report.planned_binds:
        table.add_row("bind", key, node)
    for key in report.planned_evictions:
        table.add_row("evict", key, "")
    for job_id, reason in sorted(report.waiting.items()):
        table.add_row("wait", job_id, reason)
    console.print(table)


@app.command("snapshot")
def snapshot(
    out: Annotated[Path, typer.Option("-o", "--out", help="Folder for cluster.yaml and jobs.parquet")],
    kubeconfig: Kubeconfig = None,
    name: Annotated[str, typer.Option(help="Name of the cluster spec")] = "live",
) -> None:
    """Write the live cluster as a cluster spec (cluster.yaml) and its jobs as a trace (jobs.parquet)."""
    api = _api(kubeconfig)
    cluster = KubeCluster(api, Scheduler(load_profile(api, "binpack", configmap=None)), "snapshot")
    cluster.list_now()
    taken = take_snapshot(cluster.state, name)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster.yaml").write_text(yaml.safe_dump(taken.cluster, sort_keys=False))
    write_parquet(taken.trace, out / "jobs.parquet")
    console.print(
        f"Wrote {out / 'cluster.yaml'} and {out / 'jobs.parquet'} ({len(taken.trace)} jobs). Replay: "
        f"loadmaster simulate --cluster {out / 'cluster.yaml'} --trace {out / 'jobs.parquet'}"
    )


def _api(kubeconfig: Path | None) -> ApiClient:
    """The API client, or a usage error naming --kubeconfig when there is no cluster to talk to.

    Without --kubeconfig the client needs the in-cluster service account (KUBERNETES_SERVICE_HOST
    and _PORT, set only inside a pod); outside one the client's ConfigException is a long
    traceback that never names the option that fixes it.
    """
    from kubernetes.config.config_exception import ConfigException  # noqa: PLC0415 - with the client

    from loadmaster.kube.api import api_client  # noqa: PLC0415 - the client loads only when a command runs

    if kubeconfig is not None and not kubeconfig.is_file():
        raise ConfigError(str(kubeconfig), "--kubeconfig", "no such file")
    try:
        return api_client(kubeconfig=str(kubeconfig) if kubeconfig else None)
    except ConfigException as exc:
        if kubeconfig is not None:
            raise ConfigError(str(kubeconfig), "--kubeconfig", f"not a usable kubeconfig: {exc}") from None
        home = Path.home() / ".kube" / "config"
        hint = (
            f"--kubeconfig {home}" if home.is_file() else "--kubeconfig FILE (a kubeconfig for your cluster)"
        )
        raise ConfigError(
            "loadmaster kube",
            "--kubeconfig",
            f"not given, and this is not a pod with a service account ({exc}); pass {hint}",
        ) from None
