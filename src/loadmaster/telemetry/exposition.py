"""Latest values as Prometheus text exposition, in dcgm-exporter's shape.

A scrape of loadmaster's ``/metrics`` (the agent, the demo) reads like a scrape
of dcgm-exporter: one family per field named as DCGM names it
(``DCGM_FI_DEV_GPU_UTIL``), ``HELP`` and ``TYPE`` lines, and the labels
``gpu``, ``UUID``, ``device``, ``modelName``, ``Hostname`` (plus MIG and
Kubernetes labels when set, and loadmaster's ``job`` and ``user``). Node
fields (``LOADMASTER_NODE_IB_*``) carry only ``Hostname``. Counters keep their
DCGM names (no ``_total`` suffix), as dcgm-exporter writes them.
"""

from __future__ import annotations

import math
import threading
from collections.abc import Callable, Iterable, Mapping, Sequence
from dataclasses import dataclass
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer

from loadmaster.telemetry.schema import FIELDS, LABELS, Field
from loadmaster.telemetry.store import Series, TelemetryStore

CONTENT_TYPE = "text/plain; version=0.0.4; charset=utf-8"
"""The HTTP Content-Type of the text exposition."""


@dataclass(frozen=True)
class Gauge:
    """One unlabelled sample about the exporter itself (``loadmaster_agent_sample_age_seconds``)."""

    name: str
    doc: str
    value: float
    kind: str = "gauge"
    """``gauge`` or ``counter`` (a counter's name ends in ``_total``)."""


@dataclass(frozen=True)
class LatestValues:
    """What one scrape shows: the series and, per field, the latest value of each series by id;
    ``extra`` are the exporter's own samples, written after the GPU fields."""

    series: Sequence[Series]
    values: Mapping[Field, Mapping[int, float]]
    extra: Sequence[Gauge] = ()


def latest_values(
    store: TelemetryStore, at_s: float | None = None, fields: Iterable[Field] = FIELDS
) -> LatestValues:
    """Every series of a store with each field's latest value at ``at_s`` (default: the store's now)."""
    return LatestValues(store.series(), {f: store.latest(f, at_s) for f in fields})


def render(latest: LatestValues) -> bytes:
    """The text exposition (UTF-8) of ``latest``: one family per field with values, series by id.

    Written here rather than by prometheus-client, whose writer renames a
    counter family ``<name>_total``; dcgm-exporter keeps DCGM's names.
    """
    by_id = {s.id: s for s in latest.series}
    lines: list[str] = []
    for f in FIELDS:
        values = latest.values.get(f) or {}
        samples = [(by_id[i], v) for i, v in sorted(values.items()) if i in by_id]
        if not samples:
            continue
        lines += [f"# HELP {f.name} {_escape_help(f.doc)} ({f.unit}).", f"# TYPE {f.name} {f.kind.value}"]
        lines += [f"{f.name}{_labels(series)} {_number(value)}" for series, value in samples]
    for g in latest.extra:
        lines += [f"# HELP {g.name} {_escape_help(g.doc)}", f"# TYPE {g.name} {g.kind}"]
        lines.append(f"{g.name} {_number(g.value)}")
    return ("\n".join(lines) + "\n").encode() if lines else b""


def _labels(series: Series) -> str:
    pairs = [f'{k}="{_escape_value(series.labels[k])}"' for k in LABELS if k in series.labels]
    return "{" + ",".join(pairs) + "}" if pairs else ""


def _escape_value(value: str) -> str:
    return value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n")


def _escape_help(text: str) -> str:
    return text.replace("\\", "\\\\").replace("\n", "\\n")


def _number(value: float) -> str:
    if math.isnan(value):
        return "NaN"
    if math.isinf(value):
        return "+Inf" if value > 0 else "-Inf"
    return repr(float(value))


Health = Callable[[], tuple[bool, str]]
"""Whether the exporter is healthy, and a line saying why (``/healthz``)."""


class MetricsServer:
    """A small HTTP server answering ``GET /metrics`` with ``render(source())``; ``port=0`` picks a free one.

    ``GET /healthz`` answers 200 or 503 with ``health()``'s line (always 200 without one). Runs in a
    daemon thread; ``close`` stops it. Any other path is 404.
    """

    def __init__(
        self,
        source: Callable[[], LatestValues],
        host: str = "0.0.0.0",
        port: int = 9400,
        health: Health | None = None,
    ) -> None:
        handler = _handler(source, health)
        self._server = ThreadingHTTPServer((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, name="metrics", daemon=True)

    @property
    def port(self) -> int:
        """The port it listens on."""
        return int(self._server.server_address[1])

    def start(self) -> MetricsServer:
        """Start serving in the background; returns itself."""
        self._thread.start()
        return self

    def serve_forever(self) -> None:
        """Serve in this thread until interrupted."""
        self._server.serve_forever()

    def close(self) -> None:
        """Stop serving and release the port."""
        if self._thread.is_alive():
            self._server.shutdown()
        self._server.server_close()


def _handler(source: Callable[[], LatestValues], health: Health | None) -> type[BaseHTTPRequestHandler]:
    class Handler(BaseHTTPRequestHandler):
        def do_GET(self) -> None:
            path = self.path.split("?")[0]
            if path == "/healthz":
                ok, why = health() if health is not None else (True, "ok")
                self._send(200 if ok else 503, (why + "\n").encode(), "text/plain; charset=utf-8")
                return
            if path != "/metrics":
                self.send_error(404, "only /metrics is served here")
                return
            try:
                body = render(source())
            except Exception as exc:  # a failed read must reach the scraper as an error, not kill the server
                self.send_error(500, f"reading telemetry failed: {exc}")
                return
            self._send(200, body, CONTENT_TYPE)

        def _send(self, status: int, body: bytes, content_type: str) -> None:
            self.send_response(status)
            self.send_header("Content-Type", content_type)
            self.send_header("Content-Length", str(len(body)))
            self.end_headers()
            self.wfile.write(body)

        def log_message(self, format: str, *args: object) -> None:
            """Quiet: a scrape every few seconds must not flood the terminal."""

    return Handler
