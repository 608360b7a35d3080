"""``loadmaster serve``: the dashboard and its API, over a live simulated cluster (``--demo``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer
from fastapi import FastAPI

from loadmaster.cli.output import console, working
from loadmaster.errors import ConfigError
from loadmaster.serve import DemoOptions, build_demo, create_app
from loadmaster.serve.config import ServeConfig, load_serve_config
from loadmaster.serve.demo import DEMO_LOAD
from loadmaster.serve.identity import Authenticator
from loadmaster.serve.livecluster import LiveDashboard, LiveTiming
from loadmaster.serve.reclaimloop import ReclaimLoop, loop_from_config
from loadmaster.serve.state import StateStore
from loadmaster.telemetry.prometheus import PrometheusStore


def serve(  # noqa: PLR0917 - typer maps each option to a parameter
    demo: Annotated[
        bool, typer.Option("--demo", help="Serve a live simulated cluster with sample users")
    ] = False,
    host: Annotated[str, typer.Option(help="Address to listen on")] = "127.0.0.1",
    port: Annotated[int, typer.Option(help="Port to listen on")] = 8000,
    profile: Annotated[str, typer.Option(help="Scheduling profile of the demo cluster")] = "sds",
    speed: Annotated[float, typer.Option(min=0.001, help="Simulated seconds per wall second")] = 60.0,
    cluster: Annotated[str, typer.Option(help="Demo cluster: built-in name or spec file")] = "lab",
    cluster_gpus: Annotated[
        int | None, typer.Option(min=8, help="Instead, the lab cluster scaled to about this many GPUs")
    ] = None,
    seed: Annotated[int, typer.Option(help="Seed of the workload, scheduler and telemetry")] = 0,
    load: Annotated[
        float,
        typer.Option(
            min=0.01, max=10, help="Offered load of the demo's workload (1.1: a queue from the start)"
        ),
    ] = DEMO_LOAD,
    tokens_file: Annotated[Path, typer.Option(help="Where to write the demo users' tokens (JSON)")] = Path(
        "out/serve-tokens.json"
    ),
    config: Annotated[
        Path | None,
        typer.Option(help="serve.yaml: sign-in (hashed tokens, trusted proxy), identities, state file"),
    ] = None,
) -> None:
    """Serve the GPU dashboard and its JSON API, over a simulated or a live Kubernetes cluster.

    With --demo it serves a live simulated cluster; with --config alone, the Kubernetes cluster
    and the Prometheus that serve.yaml names."""
    import uvicorn  # noqa: PLC0415 - the server is only needed by this command

    settings = load_serve_config(config) if config is not None else None
    auth = Authenticator(settings.auth) if settings is not None and settings.auth is not None else None
    state = StateStore(settings.state.path) if settings is not None else None
    reclaim = (
        loop_from_config(settings.reclaim, state)
        if settings is not None and settings.reclaim is not None and state is not None
        else None
    )
    if state is not None:
        console.print(f"State (layouts, settings, reclaim ledger): {state.path}, schema v{state.version}")
    if not demo:
        if settings is None or auth is None:
            raise ConfigError(
                "loadmaster serve", "--config", "serve a live cluster with --config serve.yaml (with auth, "
                "cluster and prometheus sections), or the simulated one with --demo",
            )  # fmt: skip
        if reclaim is not None:  # the scheduler acts; serve records the operators' actions it reads back
            console.print(
                "Reclaim: carried out by `loadmaster kube run --reclaim` on this serve.yaml's ledger"
            )
        app = _live_app(settings, auth, state, None)
        uvicorn.run(app, host=host, port=port, log_level="warning")
        return
    started = time.perf_counter()
    options = DemoOptions(
        cluster=cluster, gpus=cluster_gpus, profile=profile, speed=speed, seed=seed, load=load
    )
    size = f"about {cluster_gpus:,} GPUs" if cluster_gpus else f"cluster {cluster}"
    with working(f"Building the demo ({size}) and simulating its warm-up"):
        running = build_demo(options)
    nodes = running.sim.nodes
    console.print(
        f"[bold]{running.cluster_name}[/]: {len(nodes)} nodes, {nodes.total_gpus:,} GPUs, profile "
        f"[bold]{profile}[/], {speed:g}x; ready in {time.perf_counter() - started:.1f} s"
    )
    if auth is None:
        running.tokens.write(tokens_file)
        for token, who in running.tokens.principals():
            console.print(f"  {who.role.value:<8} {who.name:<9} http://{host}:{port}/#token={token}")
        console.print(f"Tokens written to {tokens_file}")
    else:
        console.print(f"Sign-in from {config}: the demo's generated tokens are not used")
    app = create_app(running, auth=auth, state=state, reclaim=reclaim)
    uvicorn.run(app, host=host, port=port, log_level="warning")


REDISCOVER_S = 600.0
"""Seconds between two full listings of Prometheus's series in live mode (see PrometheusStore)."""


def _live_app(
    settings: ServeConfig, auth: Authenticator, state: StateStore | None, reclaim: ReclaimLoop | None
) -> FastAPI:
    """The app over the cluster and Prometheus of serve.yaml: the informers of kube run, read-only."""
    from loadmaster.kube.api import api_client  # noqa: PLC0415 - the kubernetes client only in live mode
    from loadmaster.kube.watch import ClusterWatch  # noqa: PLC0415

    if settings.cluster is None or settings.prometheus is None:
        missing = "cluster" if settings.cluster is None else "prometheus"
        raise ConfigError("serve config", missing, "live mode needs the cluster and prometheus sections")
    kubeconfig = str(settings.cluster.kubeconfig) if settings.cluster.kubeconfig is not None else None
    watch = ClusterWatch(api_client(kubeconfig=kubeconfig))
    watch.list_now()
    watch.start()
    prometheus = settings.prometheus
    # the dashboard reads every live series' newest values each scrape, so Prometheus's full series
    # listing (seconds at 10,000 GPUs) is needed only now and then, for series that ended unseen
    store = PrometheusStore(prometheus.url, lookback_s=prometheus.history_s, rediscover_s=REDISCOVER_S)
    timing = LiveTiming(prometheus.step_s, prometheus.history_s)
    board = LiveDashboard(watch, store, auth, cluster_name=settings.cluster.name, options=timing,
                          series_refresh_s=prometheus.step_s)  # fmt: skip
    nodes = board.sim.nodes
    console.print(
        f"[bold]{board.cluster_name}[/]: {len(nodes)} nodes, {nodes.total_gpus:,} GPUs, "
        f"{len(board.sim.cluster.running)} jobs running; telemetry from {prometheus.url}"
    )
    step = max(1.0, prometheus.step_s / 3)
    return create_app(board, step_interval_s=step, auth=auth, state=state, reclaim=reclaim)
