"""``loadmaster serve``: the dashboard and its API, over a live simulated cluster (``--demo``)."""

from __future__ import annotations

import time
from pathlib import Path
from typing import Annotated

import typer

from loadmaster.cli.output import console, working
from loadmaster.errors import ConfigError
from loadmaster.serve import DemoOptions, build_demo, create_app
from loadmaster.serve.config import load_serve_config
from loadmaster.serve.identity import Authenticator
from loadmaster.serve.state import StateStore


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
    tokens_file: Annotated[Path, typer.Option(help="Where to write the demo users' tokens (JSON)")] = Path(
        "out/serve-tokens.json"
    ),
    config: Annotated[
        Path | None,
        typer.Option(help="serve.yaml: sign-in (hashed tokens, trusted proxy), identities, state file"),
    ] = None,
) -> None:
    """Serve the GPU dashboard and its JSON API; with --demo, over a live simulated cluster."""
    if not demo:
        raise ConfigError(
            "loadmaster serve", "--demo", "only the demo cluster can be served so far; pass --demo"
        )
    import uvicorn  # noqa: PLC0415 - the server is only needed by this command

    settings = load_serve_config(config) if config is not None else None
    auth = Authenticator(settings.auth) if settings is not None and settings.auth is not None else None
    state = StateStore(settings.state.path) if settings is not None else None

    started = time.perf_counter()
    options = DemoOptions(cluster=cluster, gpus=cluster_gpus, profile=profile, speed=speed, seed=seed)
    size = f"about {cluster_gpus:,} GPUs" if cluster_gpus else f"cluster {cluster}"
    with working(f"Building the demo ({size}) and simulating its warm-up"):
        running = build_demo(options)
    nodes = running.sim.nodes
    console.print(
        f"[bold]{running.cluster_name}[/]: {len(nodes)} nodes, {nodes.total_gpus:,} GPUs, profile "
        f"[bold]{profile}[/], {speed:g}x; ready in {time.perf_counter() - started:.1f} s"
    )
    if state is not None:
        console.print(f"State (layouts, settings, reclaim ledger): {state.path}, schema v{state.version}")
    if auth is None:
        running.tokens.write(tokens_file)
        for token, who in running.tokens.principals():
            console.print(f"  {who.role.value:<8} {who.name:<9} http://{host}:{port}/#token={token}")
        console.print(f"Tokens written to {tokens_file}")
    else:
        console.print(f"Sign-in from {config}: the demo's generated tokens are not used")
    uvicorn.run(create_app(running, auth=auth, state=state), host=host, port=port, log_level="warning")
