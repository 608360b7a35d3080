"""``loadmaster kube``: run as a Kubernetes scheduler, show what it would do, snapshot the cluster."""

from __future__ import annotations

import os
import signal
import socket
import threading
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Annotated

import typer

from loadmaster.cli.logs import LogFormat, LogLevel, configure
from loadmaster.errors import ConfigError

if TYPE_CHECKING:
    from kubernetes.client import ApiClient

    from loadmaster.kube.api import LeaderElector
    from loadmaster.kube.checkpoint import UsageCheckpoint
    from loadmaster.kube.cluster import KubeCluster, StepReport
    from loadmaster.kube.reclaim import KubeReclaimer
    from loadmaster.scheduling import Profile, Scheduler

# The kube commands import the kubernetes client, the scheduler and the config loaders only when they
# run: `loadmaster kube run` must start fast and import nothing it does not use (no plotting code:
# the image has a read-only root filesystem and no plotting libraries).
BUILTIN_PROFILES = "builtin"
"""= loadmaster.config.BUILTIN_PROFILES (tests/kube/test_image.py checks)."""
DEFAULT_QUEUES = "loadmaster/loadmaster-queues"
"""= loadmaster.kube.queues.DEFAULT_CONFIGMAP (tests/kube/test_image.py checks)."""
SCHEDULER_NAME = "loadmaster"
"""= loadmaster.kube.translate.SCHEDULER_NAME (tests/kube/test_image.py checks)."""
DEFAULT_CHECKPOINT = "loadmaster/loadmaster-fairshare"
"""= loadmaster.kube.checkpoint.DEFAULT_CHECKPOINT (tests/kube/test_image.py checks)."""

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
CheckpointConfigMap = Annotated[
    str,
    typer.Option(
        help="NAMESPACE/NAME of the ConfigMap that keeps fair-share usage across restarts, read at start "
        "and written by the leader ('' for none: usage lives in memory); absent is fine"
    ),
]


def _cluster(  # noqa: PLR0917 - the options of the commands, passed on
    kubeconfig: Path | None,
    profile: str,
    profiles_file: str,
    queues: str,
    lease_ns: str,
    names: list[str] | None = None,
    checkpoint: str = "",
) -> KubeCluster:
    from loadmaster.kube.cluster import KubeCluster  # noqa: PLC0415 - lazy: see the note above `app`
    from loadmaster.kube.queues import load_profile  # noqa: PLC0415

    api = _api(kubeconfig)
    wanted = scheduler_profiles(names or [], profile)
    profiles = {p: load_profile(api, p, profiles_file, queues or None) for p in set(wanted.values())}
    return KubeCluster(
        api,
        _scheduler(wanted, profiles, bool(names)),
        _identity(),
        lease=_lease(api, lease_ns),
        checkpoint=_checkpoint(api, checkpoint),
    )


def _checkpoint(api: ApiClient, configmap: str) -> UsageCheckpoint | None:
    from loadmaster.kube.checkpoint import UsageCheckpoint  # noqa: PLC0415 - lazy: see the note above `app`

    if not configmap:
        return None
    if "/" not in configmap:
        raise ConfigError(
            "--fairshare-checkpoint", configmap, f"expected NAMESPACE/NAME, like {DEFAULT_CHECKPOINT}"
        )
    return UsageCheckpoint(api, configmap)


def _identity() -> str:
    return os.environ.get("POD_NAME") or socket.gethostname()


def _lease(api: ApiClient, namespace: str) -> LeaderElector:
    from loadmaster.kube.api import LeaderElector  # noqa: PLC0415

    return LeaderElector(api, _identity(), namespace=namespace)


def _scheduler(wanted: Mapping[str, str], profiles: Mapping[str, Profile], several: bool) -> Scheduler:
    """One Scheduler per schedulerName (a ProfileScheduler when ``--scheduler-name`` was given)."""
    from loadmaster.kube.profiles import ProfileScheduler  # noqa: PLC0415
    from loadmaster.scheduling import Scheduler  # noqa: PLC0415

    chosen = {name: Scheduler(profiles[p]) for name, p in wanted.items()}
    return ProfileScheduler(chosen) if several else next(iter(chosen.values()))


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
    queues: QueuesConfigMap = DEFAULT_QUEUES,
    fairshare_checkpoint: CheckpointConfigMap = DEFAULT_CHECKPOINT,
    interval: Annotated[float, typer.Option(help="Seconds between scheduling cycles")] = 1.0,
    lease_namespace: Annotated[str, typer.Option(help="Namespace of the leader Lease")] = "loadmaster",
    max_steps: Annotated[int, typer.Option(help="Stop after this many cycles (0: run until killed)")] = 0,
    scheduler_name: SchedulerNames = None,
    http_port: Annotated[
        int, typer.Option(help="Port of /healthz, /readyz and /metrics (0: do not serve; deploy/ uses 10251)")
    ] = 0,
    http_address: Annotated[str, typer.Option(help="Address the health and metrics port binds")] = "0.0.0.0",
    log_format: Annotated[LogFormat, typer.Option(help="Log lines as plain text or JSON")] = LogFormat.plain,
    log_level: Annotated[LogLevel, typer.Option(help="Least severe level logged")] = LogLevel.info,
    reclaim: Annotated[
        Path | None,
        typer.Option(
            help="serve.yaml whose reclaim policies, prometheus and state (the ledger) to act on: notify "
            "the owners of idle jobs, then evict or mark them after the grace (dry run unless a policy says)"
        ),
    ] = None,
) -> None:
    """Watch pods naming loadmaster, nodes and PodGroups; bind, evict and explain every INTERVAL s.

    Logs every cycle that changed something (standard error), re-reads the
    queues ConfigMap every 10 s, serves health and Prometheus metrics on
    HTTP_PORT, and stops cleanly on SIGTERM. With --reclaim it also closes the
    reclaim loop (docs/diagnostics.md).
    """
    from loadmaster.kube.cluster import KubeCluster  # noqa: PLC0415 - lazy: see the note above `app`
    from loadmaster.kube.metrics import SchedulerMetrics  # noqa: PLC0415
    from loadmaster.kube.queues import QueuesReloader, load_profile  # noqa: PLC0415
    from loadmaster.kube.runner import run_loop, wait_listed  # noqa: PLC0415
    from loadmaster.kube.serving import Health, HealthServer  # noqa: PLC0415

    configure(log_level, log_format)
    api = _api(kubeconfig)
    wanted = scheduler_profiles(scheduler_name or [], profile)
    several = bool(scheduler_name)
    reloader = QueuesReloader(api, sorted(set(wanted.values())), profiles_file, queues) if queues else None
    profiles = (
        reloader.load()
        if reloader is not None
        else {p: load_profile(api, p, profiles_file, None) for p in set(wanted.values())}
    )
    cluster = KubeCluster(
        api,
        _scheduler(wanted, profiles, several),
        _identity(),
        lease=_lease(api, lease_namespace),
        checkpoint=_checkpoint(api, fairshare_checkpoint),
    )
    reclaimer = _reclaimer(cluster, reclaim) if reclaim is not None else None

    def reload() -> None:
        changed = reloader.poll() if reloader is not None else None
        if changed is not None:
            cluster.scheduler = _scheduler(wanted, changed, several)

    metrics = SchedulerMetrics(next(iter(wanted.values())))
    health = Health(liveness_timeout_s=max(60.0, 10 * interval))
    server = HealthServer(health, metrics, http_address, http_port) if http_port else None
    stop = threading.Event()
    previous = _stop_on_sigterm(stop)
    cluster.start(renew_in_background=True)
    if server is not None:
        server.start()
    try:
        wait_listed(cluster, 60.0, stop)
        run_loop(
            cluster,
            interval_s=interval,
            max_steps=max_steps,
            metrics=metrics,
            health=health,
            stop=stop,
            before_step=reload,
            reclaim=reclaimer,
        )
    finally:
        cluster.stop()
        if server is not None:
            server.stop()
        if previous is not None:
            signal.signal(signal.SIGTERM, previous)


def _reclaimer(cluster: KubeCluster, path: Path) -> KubeReclaimer:
    """The reclaim loop of serve.yaml at ``path``: its policies, its Prometheus, its ledger (state.path)."""
    from loadmaster.kube.reclaim import KubeReclaimer, PrometheusIdle  # noqa: PLC0415
    from loadmaster.scheduling.reclaim import ReclaimTracker  # noqa: PLC0415
    from loadmaster.serve.config import load_serve_config  # noqa: PLC0415
    from loadmaster.serve.reclaimloop import policies_from_config  # noqa: PLC0415
    from loadmaster.serve.state import StateStore  # noqa: PLC0415
    from loadmaster.telemetry.prometheus import PrometheusStore  # noqa: PLC0415

    settings = load_serve_config(path)
    if settings.reclaim is None or settings.prometheus is None:
        missing = "reclaim" if settings.reclaim is None else "prometheus"
        raise ConfigError(str(path), missing, "--reclaim needs the reclaim and prometheus sections")
    prometheus = settings.prometheus
    store = PrometheusStore(prometheus.url, lookback_s=prometheus.history_s)
    idle = PrometheusIdle(store, step_s=prometheus.step_s, lookback_s=prometheus.history_s)
    tracker = ReclaimTracker(policies_from_config(settings.reclaim))
    return KubeReclaimer(cluster, tracker, idle, StateStore(settings.state.path), settings.reclaim.interval_s)


def _stop_on_sigterm(stop: threading.Event) -> signal.Handlers | Callable[..., object] | int | None:
    """SIGTERM (the kubelet stopping the pod) ends the loop after the current step, not in the middle of it.

    Returns the handler it replaced (None off the main thread, where signals cannot be handled).
    """
    if threading.current_thread() is not threading.main_thread():
        return None
    return signal.signal(signal.SIGTERM, lambda signum, frame: stop.set())


@app.command("dry-run")
def dry_run(  # noqa: PLR0917 - typer maps each option to a parameter
    kubeconfig: Kubeconfig = None,
    profile: ProfileName = "binpack",
    profiles_file: ProfilesFile = BUILTIN_PROFILES,
    queues: QueuesConfigMap = DEFAULT_QUEUES,
    scheduler_name: SchedulerNames = None,
    fairshare_checkpoint: CheckpointConfigMap = DEFAULT_CHECKPOINT,
) -> None:
    """One cycle on the live cluster, writing nothing: what would bind, be evicted, and why others wait.

    Fair-share usage is read from the checkpoint the scheduler writes, so the order is the one
    the running scheduler would take."""
    cluster = _cluster(
        kubeconfig, profile, profiles_file, queues, "loadmaster", scheduler_name, fairshare_checkpoint
    )
    cluster.list_now()
    _print_plan(cluster.step(dry_run=True))


def _print_plan(report: StepReport) -> None:
    from rich.table import Table  # noqa: PLC0415 - lazy: see the note above `app`

    from loadmaster.cli.output import console  # noqa: PLC0415

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
    out: Annotated[
        Path, typer.Option("-o", "--out", help="Folder for cluster.yaml, jobs.parquet and usage.json")
    ],
    kubeconfig: Kubeconfig = None,
    name: Annotated[str, typer.Option(help="Name of the cluster spec")] = "live",
    fairshare_checkpoint: CheckpointConfigMap = DEFAULT_CHECKPOINT,
) -> None:
    """Write the live cluster as a cluster spec (cluster.yaml), its jobs as a trace (jobs.parquet) and
    its fair-share usage and run-time history (usage.json), for a replay in the simulator."""
    import yaml  # noqa: PLC0415 - lazy: see the note above `app`

    from loadmaster.cli.output import console  # noqa: PLC0415
    from loadmaster.config.usage import render_past_usage  # noqa: PLC0415
    from loadmaster.kube.cluster import KubeCluster  # noqa: PLC0415
    from loadmaster.kube.queues import load_profile  # noqa: PLC0415
    from loadmaster.kube.snapshot import past_usage_of, take_snapshot  # noqa: PLC0415
    from loadmaster.kube.translate import KubeError  # noqa: PLC0415
    from loadmaster.scheduling import Scheduler  # noqa: PLC0415
    from loadmaster.traces.trace import write_parquet  # noqa: PLC0415

    api = _api(kubeconfig)
    scheduler = Scheduler(load_profile(api, "binpack", configmap=None))
    cluster = KubeCluster(api, scheduler, "snapshot", checkpoint=_checkpoint(api, fairshare_checkpoint))
    cluster.list_now()
    now = cluster.clock()
    if not cluster.read_history(now):
        raise KubeError(
            f"cannot read the fair-share checkpoint ConfigMap {fairshare_checkpoint} (see the log)"
        )
    taken = take_snapshot(cluster.state, name)
    out.mkdir(parents=True, exist_ok=True)
    (out / "cluster.yaml").write_text(yaml.safe_dump(taken.cluster, sort_keys=False))
    write_parquet(taken.trace, out / "jobs.parquet")
    past = past_usage_of(cluster.history, taken.trace, now)
    (out / "usage.json").write_text(render_past_usage(past) + "\n")
    console.print(
        f"Wrote {out / 'cluster.yaml'}, {out / 'jobs.parquet'} ({len(taken.trace)} jobs) and "
        f"{out / 'usage.json'} ({len(past.usage_gpu_s)} users and groups with usage). Replay: "
        f"loadmaster simulate --cluster {out / 'cluster.yaml'} --trace {out / 'jobs.parquet'} "
        f"--past-usage {out / 'usage.json'}"
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
