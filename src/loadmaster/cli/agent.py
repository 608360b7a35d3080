"""``loadmaster agent``: serve this node's GPU metrics at /metrics, as dcgm-exporter does."""

from __future__ import annotations

import logging
import os
from pathlib import Path
from typing import Annotated

import typer

from loadmaster.cli.output import console
from loadmaster.errors import TelemetryError
from loadmaster.telemetry.agent import Agent, FakeReader, GpuReader, NvmlReader
from loadmaster.telemetry.exposition import MetricsServer
from loadmaster.telemetry.pods import POD_RESOURCES_SOCKET, PodResourcesClient, PodSource


def agent(  # noqa: PLR0917 - typer maps each option to a parameter
    port: Annotated[int, typer.Option(help="Port to serve /metrics on (dcgm-exporter uses 9400)")] = 9400,
    interval: Annotated[float, typer.Option(help="Seconds between two reads of the GPUs")] = 1.0,
    host: Annotated[str, typer.Option(help="Address to listen on")] = "0.0.0.0",
    hostname: Annotated[
        str | None, typer.Option(help="Hostname label (default: $NODE_NAME, else this host's name)")
    ] = None,
    pod_resources_socket: Annotated[
        str,
        typer.Option(help="The kubelet's pod-resources socket, to label GPUs with pods ('' to turn off)"),
    ] = POD_RESOURCES_SOCKET,
    fake_gpus: Annotated[
        int, typer.Option(help="Serve this many fake busy GPUs instead of NVML (to try it without a GPU)")
    ] = 0,
    fake_values: Annotated[
        Path | None,
        typer.Option(help='With --fake-gpus: JSON {"0": {"XID_ERRORS": 79}} laid over every read'),
    ] = None,
    fake_host_tag: Annotated[
        int, typer.Option(help="With --fake-gpus: a number put in the fake UUIDs (one per fake node)")
    ] = 0,
) -> None:
    """Read the GPUs through NVML and serve dcgm-exporter-compatible metrics for Prometheus."""
    if interval <= 0:
        raise typer.BadParameter(f"--interval must be > 0 seconds, got {interval}")
    logging.basicConfig(level=logging.INFO, format="%(asctime)s %(levelname)s %(name)s: %(message)s")
    reader: GpuReader = (
        FakeReader.busy(fake_gpus, host_tag=fake_host_tag, values_file=fake_values)
        if fake_gpus > 0
        else NvmlReader()
    )
    node = Agent(reader, hostname=hostname or os.environ.get("NODE_NAME"), interval_s=interval,
                 pods=_pods(pod_resources_socket))  # fmt: skip
    try:
        server = MetricsServer(node.latest, host=host, port=port, health=node.health)
    except OSError as exc:
        raise typer.BadParameter(f"cannot listen on {host}:{port}: {exc}") from exc
    node.start()
    console.print(
        f"serving {len(node.series)} GPU series of {node.hostname} at http://{host}:{server.port}/metrics"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        node.stop()
        server.close()


def _pods(socket_path: str) -> PodSource | None:
    """The kubelet's pod-resources client, or None (with a line saying why) when there is no socket."""
    if not socket_path:
        return None
    if not os.path.exists(socket_path):
        console.print(f"no pod-resources socket at {socket_path}: GPUs are not labelled with pods")
        return None
    try:
        return PodResourcesClient(socket_path)
    except TelemetryError as exc:
        raise typer.BadParameter(str(exc)) from exc
