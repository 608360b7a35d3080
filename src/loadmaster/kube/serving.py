"""``/healthz``, ``/readyz`` and ``/metrics`` of ``loadmaster kube run``, on a port of its own.

The answers follow kube-apiserver's and kube-scheduler's health endpoints:
``200 ok`` or ``500`` with one line per failed check, and with ``?verbose``
one ``[+]name ok`` / ``[-]name failed: why`` line per check.

* ``/healthz`` (liveness): the scheduling loop is alive: it finished a step
  within ``liveness_timeout_s`` (before its first step: since it started). A
  loop stuck in a call is restarted by the kubelet; a slow API server is not
  a reason to restart, so the timeout is generous.
* ``/readyz`` (readiness): every informer has listed its kind and heard from
  the API server within ``stale_after_s``, and the replica knows its role:
  ``leader`` or ``standby`` (it read the Lease within the lease duration). A
  standby is ready: it serves metrics and takes over when the leader goes. A
  replica that could not read the Lease for longer is ``unknown``, not ready.
* ``/metrics``: :class:`~loadmaster.kube.metrics.SchedulerMetrics` in the
  Prometheus text format.
"""

from __future__ import annotations

import logging
import threading
import time
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from http.server import BaseHTTPRequestHandler, ThreadingHTTPServer
from typing import Any
from urllib.parse import urlparse

from loadmaster.kube.metrics import CONTENT_TYPE, SchedulerMetrics

log = logging.getLogger(__name__)

ROLES = ("leader", "standby")
"""The roles a ready replica may have; anything else (``unknown``: the Lease could not be read) is not."""


@dataclass
class Health:
    """What the loop last saw, read by the probes (all times from ``clock``, in seconds)."""

    liveness_timeout_s: float = 60.0
    """``/healthz`` fails when no step finished for this long (a stuck loop)."""
    stale_after_s: float = 120.0
    """``/readyz`` fails when an informer has not heard from the API server for this long."""
    clock: Callable[[], float] = time.monotonic
    started_s: float = field(init=False)
    last_step_s: float | None = None
    synced: bool = False
    role: str = "unknown"
    staleness_s: dict[str, float] = field(default_factory=dict)
    _lock: threading.Lock = field(init=False, default_factory=threading.Lock)

    def __post_init__(self) -> None:
        self.started_s = self.clock()

    def stepped(self, synced: bool, role: str, staleness_s: Mapping[str, float]) -> None:
        """Record one finished step of the loop."""
        with self._lock:
            self.last_step_s = self.clock()
            self.synced, self.role, self.staleness_s = synced, role, dict(staleness_s)

    def live(self) -> dict[str, str | None]:
        """Check name -> None when it passes, else why it fails."""
        with self._lock:
            since = self.clock() - (self.last_step_s if self.last_step_s is not None else self.started_s)
        late = since > self.liveness_timeout_s
        what = "step" if self.last_step_s is not None else "first step (since start)"
        return {"loop": f"no {what} for {since:.0f} s (> {self.liveness_timeout_s:g} s)" if late else None}

    def ready(self) -> dict[str, str | None]:
        checks = self.live()
        with self._lock:
            stale = {k: v for k, v in self.staleness_s.items() if v > self.stale_after_s}
            checks["informers"] = (
                "not listed yet" if not self.synced
                else "stale: " + ", ".join(f"{k} {v:.0f} s" for k, v in sorted(stale.items())) if stale
                else None
            )  # fmt: skip
            checks["leader-election"] = (
                None if self.role in ROLES else f"role {self.role!r}: the Lease could not be read"
            )
        return checks


class HealthServer:
    """The HTTP front end of :class:`Health` and :class:`SchedulerMetrics`, on its own daemon thread."""

    def __init__(
        self, health: Health, metrics: SchedulerMetrics, host: str = "0.0.0.0", port: int = 0
    ) -> None:
        handler = type("Handler", (_Handler,), {"health": health, "metrics": metrics})
        self._server = _Server((host, port), handler)
        self._server.daemon_threads = True
        self._thread = threading.Thread(target=self._server.serve_forever, daemon=True, name="health")

    @property
    def port(self) -> int:
        return int(self._server.server_address[1])

    def start(self) -> None:
        self._thread.start()
        log.info("serving /healthz, /readyz and /metrics", extra={"port": self.port})

    def stop(self) -> None:
        self._server.shutdown()
        self._server.server_close()


class _Server(ThreadingHTTPServer):
    allow_reuse_address = True


class _Handler(BaseHTTPRequestHandler):
    health: Health
    metrics: SchedulerMetrics
    protocol_version = "HTTP/1.1"

    def log_message(self, format: str, *args: Any) -> None:
        """Quiet: probes and scrapes come every few seconds."""

    def do_GET(self) -> None:
        url = urlparse(self.path)
        if url.path == "/metrics":
            self._answer(200, self.metrics.exposition(), CONTENT_TYPE)
            return
        checks = {"/healthz": self.health.live, "/livez": self.health.live, "/readyz": self.health.ready}
        probe = checks.get(url.path)
        if probe is None:
            self._answer(404, b"404 page not found\n", "text/plain; charset=utf-8")
            return
        results = probe()
        failed = {name: why for name, why in results.items() if why is not None}
        if "verbose" in url.query or failed:
            lines = [f"[+]{n} ok" if w is None else f"[-]{n} failed: {w}" for n, w in results.items()]
            verdict = f"{url.path[1:]} check failed" if failed else f"{url.path[1:]} check passed"
            text = "\n".join([*lines, verdict]) + "\n"
        else:
            text = "ok"
        self._answer(500 if failed else 200, text.encode(), "text/plain; charset=utf-8")

    def _answer(self, code: int, body: bytes, content_type: str) -> None:
        self.send_response(code)
        self.send_header("Content-Type", content_type)
        self.send_header("Content-Length", str(len(body)))
        self.end_headers()
        self.wfile.write(body)
