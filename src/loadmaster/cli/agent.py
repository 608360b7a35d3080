"""``loadmaster agent``: serve this node's GPU metrics at /metrics, as dcgm-exporter does."""

from __future__ import annotations

from typing import Annotated

import typer

from loadmaster.cli.output import console
from loadmaster.telemetry.agent import Agent, FakeReader, GpuReader, NvmlReader
from loadmaster.telemetry.exposition import MetricsServer


def agent(
    port: Annotated[int, typer.Option(help="Port to serve /metrics on (dcgm-exporter uses 9400)")] = 9400,
    interval: Annotated[float, typer.Option(help="Seconds between two reads of the GPUs")] = 1.0,
    host: Annotated[str, typer.Option(help="Address to listen on")] = "0.0.0.0",
    hostname: Annotated[str | None, typer.Option(help="Hostname label (default: this host's name)")] = None,
    fake_gpus: Annotated[
        int, typer.Option(help="Serve this many fake busy GPUs instead of NVML (to try it without a GPU)")
    ] = 0,
) -> None:
    """Read the GPUs through NVML and serve dcgm-exporter-compatible metrics for Prometheus."""
    if interval <= 0:
        raise typer.BadParameter(f"--interval must be > 0 seconds, got {interval}")
    reader: GpuReader = FakeReader.busy(fake_gpus) if fake_gpus > 0 else NvmlReader()
    node = Agent(reader, hostname=hostname, interval_s=interval)
    try:
        server = MetricsServer(node.latest, host=host, port=port)
    except OSError as exc:
        raise typer.BadParameter(f"cannot listen on {host}:{port}: {exc}") from exc
    console.print(
        f"serving {len(node.series)} GPU(s) of {node.hostname} at http://{host}:{server.port}/metrics"
    )
    try:
        server.serve_forever()
    except KeyboardInterrupt:
        pass
    finally:
        server.close()
