"""The live-mode row of dashboard_scale.py: 10,000 GPUs with a real Prometheus as the telemetry source.

The cluster side is the 10,000-GPU demo's simulated cluster handed to :class:`LiveDashboard` as its
feed (what ``kube run``'s informers hand it in a real deployment); the telemetry side is a real
``prometheus`` binary scraping a dcgm-exporter-format endpoint with every GPU's latest values,
labelled with its pod and namespace as dcgm-exporter labels them. ``LiveDashboard`` maps GPUs to jobs
from those labels and reads every value back from Prometheus, as ``serve --config`` does.

    python benchmarks/dashboard_scale.py --live   # needs `prometheus` on PATH
"""

from __future__ import annotations

import json
import shutil
import signal
import subprocess
import sys
import tempfile
import time
from dataclasses import dataclass
from pathlib import Path
from typing import Any

import httpx

from loadmaster.model import ClusterSnapshot
from loadmaster.serve.demo import Demo
from loadmaster.telemetry.exposition import LatestValues, render
from loadmaster.telemetry.schema import FIELDS
from loadmaster.telemetry.store import Series

NAMESPACE = "demo"
SCRAPE_S = 15
REDISCOVER_S = 600.0
"""As ``serve --config`` lists Prometheus's series (loadmaster.cli.serve.REDISCOVER_S)."""


@dataclass(frozen=True)
class _Feed:
    time_s: float
    snapshot: ClusterSnapshot
    reasons: dict[str, str]
    pods: dict[str, str]


class DemoFeed:
    """The demo's cluster as a live feed: one pod per job, named after the job, in NAMESPACE."""

    def __init__(self, demo: Demo) -> None:
        self.demo = demo

    def feed(self) -> _Feed:
        sim = self.demo.sim
        with self.demo.lock:
            snapshot = sim.cluster.snapshot(sim.now_s)
            reasons = {}
            for job_id, pending in sim.cluster.pending.items():
                status = sim.status(pending)
                reasons[job_id] = status.reason if status is not None else ""
            jobs = [*sim.cluster.running, *sim.cluster.pending]
        return _Feed(time.time(), snapshot, reasons, {f"{NAMESPACE}/{j}": j for j in jobs})


def labelled(demo: Demo) -> LatestValues:
    """Every GPU series with its latest values, labelled with its job's pod as dcgm-exporter does."""
    with demo.lock:
        series = []
        for s in demo.store.series():
            job = s.labels.get("job")
            extra = {"pod": job, "namespace": NAMESPACE, "container": "main"} if job else {}
            kept = {k: v for k, v in s.labels.items() if k not in ("job", "user")}
            series.append(Series(s.id, s.scope, kept | extra))
        stored = set(demo.options.fields or (f.key for f in FIELDS))
        values = {f: demo.store.latest(f) for f in FIELDS if f.key in stored}
    return LatestValues(series, values)


def start_exporter(demo: Demo, port: int, workdir: Path) -> subprocess.Popen[bytes]:
    """The exporter of every GPU, in its own process as dcgm-exporter runs on its own nodes: the text
    exposition of the demo's latest values (they hold still: nothing steps the demo here), rendered
    once and served as a file at ``/metrics`` by Python's http.server (Prometheus 2 reads a body of
    an unknown content type as the text format)."""
    folder = workdir / "exporter"
    folder.mkdir()
    (folder / "metrics").write_bytes(render(labelled(demo)))
    return subprocess.Popen(
        [sys.executable, "-m", "http.server", str(port), "--bind", "127.0.0.1", "--directory", str(folder)],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def start_prometheus(target_port: int, port: int, workdir: Path) -> subprocess.Popen[bytes]:
    binary = shutil.which("prometheus")
    if binary is None:
        raise SystemExit("--live needs the prometheus binary on PATH (apt-get install prometheus)")
    config = workdir / "prometheus.yml"
    config.write_text(
        f"global: {{scrape_interval: {SCRAPE_S}s, scrape_timeout: 14s}}\n"
        "scrape_configs:\n  - job_name: gpus\n"
        f"    static_configs: [{{targets: ['127.0.0.1:{target_port}']}}]\n"
    )
    return subprocess.Popen(
        [binary, f"--config.file={config}", f"--storage.tsdb.path={workdir / 'data'}",
         f"--web.listen-address=127.0.0.1:{port}", "--log.level=warn"],
        stdout=subprocess.DEVNULL, stderr=subprocess.DEVNULL,
    )  # fmt: skip


def wait_for_series(url: str, gpus: int, timeout_s: float = 300.0) -> float:
    """Seconds until Prometheus holds a GPU_UTIL sample of every GPU."""
    started = time.monotonic()
    while time.monotonic() - started < timeout_s:
        try:
            query = {"query": "count(DCGM_FI_DEV_GPU_UTIL)"}
            got = httpx.get(f"{url}/api/v1/query", params=query, timeout=10)
            result = got.json()["data"]["result"]
            if result and int(float(result[0]["value"][1])) >= gpus:
                return time.monotonic() - started
        except (httpx.HTTPError, KeyError, ValueError):
            pass
        time.sleep(2)
    raise SystemExit(f"Prometheus did not hold {gpus} GPUs' series within {timeout_s:.0f} s")


def serve_live(gpus: int, port: int, ready_file: Path) -> None:
    """Child: demo cluster + exporter + Prometheus + LiveDashboard over them, served until killed."""
    import uvicorn  # noqa: PLC0415 - only the child serves

    from loadmaster.serve import DemoOptions, build_demo, create_app  # noqa: PLC0415
    from loadmaster.serve.livecluster import LiveDashboard, LiveTiming  # noqa: PLC0415
    from loadmaster.telemetry.prometheus import PrometheusStore  # noqa: PLC0415

    # the parent ends this child with SIGTERM: turn it into SystemExit so `finally` stops Prometheus
    signal.signal(signal.SIGTERM, lambda *_: sys.exit(0))
    started = time.perf_counter()
    demo = build_demo(DemoOptions(gpus=gpus, days=2.0, history_s=1800.0))
    workdir = Path(tempfile.mkdtemp(prefix="dashboard-live-"))
    exporter_port = _free_port()
    exporter = start_exporter(demo, exporter_port, workdir)
    prom_port = _free_port()
    prometheus = start_prometheus(exporter_port, prom_port, workdir)
    url = f"http://127.0.0.1:{prom_port}"
    try:
        ingest_s = wait_for_series(url, demo.index.size)
        # series discovery lists every GPU x field (about 140,000 series at 10,000 GPUs): longer than the
        # store's default 10 s timeout on a 2-core machine, so the benchmark allows 120 s and reports it
        store = PrometheusStore(url, lookback_s=1800.0, timeout_s=120.0, rediscover_s=REDISCOVER_S)
        discovered = time.perf_counter()
        board = LiveDashboard(DemoFeed(demo), store, demo.tokens, cluster_name="live-10k",
                              options=LiveTiming(float(SCRAPE_S), 1800.0))  # fmt: skip
        discovery_s = time.perf_counter() - discovered
        held = sum(1 for o in board.index.flat(board.sim.owner) if o >= 0)
        users = [p.name for _, p in demo.tokens.principals() if not p.is_operator]
        ready_file.write_text(json.dumps({
            "build_s": time.perf_counter() - started, "ingest_s": ingest_s, "first_refresh_s": discovery_s,
            "gpus": board.index.size,
            "nodes": len(board.sim.nodes), "running_jobs": len(board.sim.cluster.running),
            "gpus_mapped_to_jobs": held, "operator": demo.tokens.token_of("operator"),
            "user": demo.tokens.token_of(users[0]),
        }))  # fmt: skip
        app = create_app(board, step_interval_s=SCRAPE_S / 3)
        uvicorn.run(app, host="127.0.0.1", port=port, log_level="warning")
    finally:
        prometheus.terminate()
        prometheus.wait(timeout=30)
        exporter.terminate()
        exporter.wait(timeout=30)
        shutil.rmtree(workdir, ignore_errors=True)


def _free_port() -> int:
    import socket  # noqa: PLC0415

    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def live_row(
    info: dict[str, Any], m: dict[str, float], p99_target_ms: float, render_target_s: float
) -> dict[str, Any]:
    """The live row of the results file, with its targets."""
    return {
        "setup": f"{info['gpus']:,} GPUs ({info['nodes']} nodes), {info['running_jobs']} running jobs; "
        "cluster "
        f"from the demo's simulator as the live feed, telemetry from a real Prometheus scraping every "
        f"{SCRAPE_S} s ({info['gpus_mapped_to_jobs']:,} GPUs mapped to their jobs by pod labels)",
        "prometheus_ingest_s": round(info["ingest_s"], 1),
        "live_dashboard_first_refresh_s": round(info["first_refresh_s"], 1),
        "measured": {k: round(v, 3) for k, v in m.items()},
        "targets": {
            "api_p99_ms": {
                "target": f"<= {p99_target_ms:g}",
                "measured": round(m["snapshot_p99_ms"], 3),
                "pass": m["snapshot_p99_ms"] <= p99_target_ms,
            },
            "first_render_s": {
                "target": f"<= {render_target_s:g}",
                "measured": round(m["first_render_s"], 3),
                "pass": m["first_render_s"] <= render_target_s,
            },
        },
    }
