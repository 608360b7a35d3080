"""Dashboard at scale: a 10,000-GPU demo cluster served by a real uvicorn, read by 20 clients and Chromium.

Measures the cluster snapshot's payload size, the API's p50/p99 latency with
20 concurrent clients (threads with httpx) while the demo keeps stepping, and
the time to the first full render of every GPU tile in Chromium (Playwright,
Debian's /usr/bin/chromium). Targets (issue 6): payload <= 300 KB, API p99 <=
100 ms, first render <= 2 s. Because machines are noisy, the same clients
also time ``/api/health`` (no work) and the result reports the snapshot's
latency as a ratio to it.

The server runs in a child process, so the clients do not share its GIL.

    python benchmarks/dashboard_scale.py [--gpus 10000] [--clients 20] [--requests 50]
    python benchmarks/dashboard_scale.py --live    # the live-mode row (dashboard_live.py): a real
                                                   # Prometheus as the source; API p99 <= 150 ms

Prints a table and writes benchmarks/results/dashboard_scale.json.
"""

from __future__ import annotations

import argparse
import gzip
import json
import os
import platform
import socket
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path
from typing import Any

import httpx
import numpy as np

from results_io import provenance, write_results

ROOT = Path(__file__).resolve().parent.parent
RESULTS = ROOT / "benchmarks" / "results" / "dashboard_scale.json"
CHROMIUM = "/usr/bin/chromium"
TARGET_PAYLOAD_KB = 300.0
TARGET_P99_MS = 100.0
TARGET_RENDER_S = 2.0
TARGET_LIVE_P99_MS = 150.0


def serve(gpus: int, port: int, ready_file: Path) -> None:
    """Child: build the demo, write its tokens and build time, serve until killed."""
    import uvicorn  # noqa: PLC0415 - only the child serves

    from loadmaster.serve import DemoOptions, build_demo, create_app  # noqa: PLC0415

    started = time.perf_counter()
    demo = build_demo(DemoOptions(gpus=gpus, days=2.0, history_s=1800.0))
    built = time.perf_counter() - started
    users = [p.name for _, p in demo.tokens.principals() if not p.is_operator]
    ready_file.write_text(
        json.dumps(
            {
                "build_s": built,
                "gpus": demo.sim.nodes.total_gpus,
                "nodes": len(demo.sim.nodes),
                "running_jobs": len(demo.sim.cluster.running),
                "operator": demo.tokens.token_of("operator"),
                "user": demo.tokens.token_of(users[0]),
            }
        )
    )
    uvicorn.run(create_app(demo), host="127.0.0.1", port=port, log_level="warning")


def _free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


def _latencies(base: str, path: str, tokens: list[str], clients: int, requests: int) -> list[float]:
    """Per-request seconds of ``clients`` threads each making ``requests`` GETs of ``path``."""
    out: list[float] = []
    lock = threading.Lock()
    barrier = threading.Barrier(clients)

    def client(i: int) -> None:
        headers = {"Authorization": f"Bearer {tokens[i % len(tokens)]}"}
        mine = []
        with httpx.Client(base_url=base, headers=headers, timeout=30) as http:
            http.get(path).raise_for_status()  # connect and warm up outside the timing
            barrier.wait()
            for _ in range(requests):
                started = time.perf_counter()
                http.get(path).raise_for_status()
                mine.append(time.perf_counter() - started)
        with lock:
            out.extend(mine)

    threads = [threading.Thread(target=client, args=(i,)) for i in range(clients)]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    return out


def _render(base: str, token: str) -> dict[str, float]:
    """Seconds from navigation to the first full render of every tile, in Chromium; and the tile count."""
    from playwright.sync_api import sync_playwright  # noqa: PLC0415 - optional (dev extra)

    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        page = browser.new_page(viewport={"width": 1600, "height": 1000})
        page.goto(f"{base}/#token={token}")
        page.wait_for_selector("body[data-ready=true]", timeout=60_000)
        first_ms = page.evaluate("window.loadmaster.firstRenderMs()")
        tiles = page.evaluate("window.loadmaster.tileCount()")
        draw_ms = page.evaluate("window.loadmaster.lastRenderMs()")
        browser.close()
    return {"first_render_s": first_ms / 1000, "tiles": float(tiles), "draw_ms": draw_ms}


def main() -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("--gpus", type=int, default=10_000)
    parser.add_argument("--clients", type=int, default=20)
    parser.add_argument("--requests", type=int, default=50, help="per client")
    parser.add_argument("--live", action="store_true", help="the live-mode row: telemetry from Prometheus")
    parser.add_argument("--serve", type=int, help=argparse.SUPPRESS)
    parser.add_argument("--ready-file", type=Path, help=argparse.SUPPRESS)
    args = parser.parse_args()
    if args.serve is not None:
        if args.live:
            from dashboard_live import serve_live  # noqa: PLC0415 - benchmarks/ is on sys.path

            serve_live(args.gpus, args.serve, args.ready_file)
        else:
            serve(args.gpus, args.serve, args.ready_file)
        return
    source = provenance(ROOT)
    port = _free_port()
    base = f"http://127.0.0.1:{port}"
    ready = Path(tempfile.mkdtemp()) / "ready.json"
    child = subprocess.Popen(
        [sys.executable, __file__, "--gpus", str(args.gpus), "--serve", str(port), "--ready-file", str(ready)]
        + (["--live"] if args.live else [])
    )
    try:
        while not ready.exists() or not _healthy(base):
            if child.poll() is not None:
                raise SystemExit(f"the demo server exited with {child.returncode}")
            time.sleep(0.5)
        info = json.loads(ready.read_text())
        m = _measure(base, info, args.clients, args.requests)
    finally:
        child.terminate()
        child.wait(timeout=30)
    if args.live:
        _report_live(args, info, m, source)
    else:
        _report(args, info, m, source)


def _report_live(
    args: argparse.Namespace, info: dict[str, Any], m: dict[str, float], source: dict[str, object]
) -> None:
    """Print the live row and add it to the results file under ``live`` (the demo row stays).

    The row carries its own stamp; the file's stays the demo row's (the commit it measured).
    """
    from dashboard_live import live_row  # noqa: PLC0415

    row = live_row(info, m, TARGET_LIVE_P99_MS, TARGET_RENDER_S)
    row = {"command": f"python benchmarks/dashboard_scale.py --live --gpus {args.gpus} --clients "
           f"{args.clients} --requests {args.requests}", **source, **row}  # fmt: skip
    print(f"{'live mode':<34}{'value':>12}  target")
    for name, check in row["targets"].items():
        print(
            f"{name:<34}{check['measured']:>12,.2f}  {check['target']}  {'PASS' if check['pass'] else 'FAIL'}"
        )
    print(f"{'snapshot p50 (ms)':<34}{m['snapshot_p50_ms']:>12.2f}")
    print(f"{'Prometheus ingest of every GPU (s)':<34}{info['ingest_s']:>12.1f}")
    print(f"{'first refresh (series, feed) (s)':<34}{info['first_refresh_s']:>12.1f}")
    result = json.loads(RESULTS.read_text()) if RESULTS.exists() else {"benchmark": "dashboard_scale"}
    result["live"] = row
    kept = {key: result[key] for key in ("commit", "tree_clean", "dirty_paths") if key in result}
    write_results(RESULTS, ROOT, result, kept if "tree_clean" in kept else None)


def _healthy(base: str) -> bool:
    try:
        return httpx.get(f"{base}/api/health", timeout=2).status_code == 200
    except httpx.HTTPError:
        return False


def _measure(base: str, info: dict[str, Any], clients: int, requests: int) -> dict[str, float]:
    op = {"Authorization": f"Bearer {info['operator']}"}
    body = httpx.get(f"{base}/api/cluster?metric=util", headers=op, timeout=30).content
    user_body = httpx.get(
        f"{base}/api/cluster?metric=util", headers={"Authorization": f"Bearer {info['user']}"}, timeout=30
    ).content
    tokens = [info["operator"], info["user"]]
    snap = np.array(_latencies(base, "/api/cluster?metric=util", tokens, clients, requests)) * 1000
    health = np.array(_latencies(base, "/api/health", tokens, clients, requests)) * 1000
    render = _render(base, info["operator"])
    return {
        "payload_kb": len(body) / 1000,
        "payload_gzip_kb": len(gzip.compress(body)) / 1000,
        "user_payload_kb": len(user_body) / 1000,
        "snapshot_p50_ms": float(np.percentile(snap, 50)),
        "snapshot_p99_ms": float(np.percentile(snap, 99)),
        "health_p50_ms": float(np.percentile(health, 50)),
        "health_p99_ms": float(np.percentile(health, 99)),
        "requests": float(snap.size),
        **render,
    }


def _report(
    args: argparse.Namespace, info: dict[str, Any], m: dict[str, float], source: dict[str, object]
) -> None:
    targets = {
        "snapshot_payload_kb": (
            m["payload_kb"],
            f"<= {TARGET_PAYLOAD_KB:g}",
            m["payload_kb"] <= TARGET_PAYLOAD_KB,
        ),
        "api_p99_ms": (m["snapshot_p99_ms"], f"<= {TARGET_P99_MS:g}", m["snapshot_p99_ms"] <= TARGET_P99_MS),
        "first_render_s": (
            m["first_render_s"],
            f"<= {TARGET_RENDER_S:g}",
            m["first_render_s"] <= TARGET_RENDER_S,
        ),
    }
    print(f"{'measure':<34}{'value':>12}  target")
    for name, (value, target, ok) in targets.items():
        print(f"{name:<34}{value:>12,.2f}  {target}  {'PASS' if ok else 'FAIL'}")
    ratio = m["snapshot_p50_ms"] / m["health_p50_ms"]
    for name, value in (
        ("GPUs / tiles drawn", f"{info['gpus']:,} / {int(m['tiles']):,}"),
        ("demo build + warm-up (s)", f"{info['build_s']:.1f}"),
        ("snapshot gzip (KB)", f"{m['payload_gzip_kb']:.1f}"),
        ("user's snapshot (KB)", f"{m['user_payload_kb']:.1f}"),
        ("snapshot p50 (ms)", f"{m['snapshot_p50_ms']:.2f}"),
        ("health p50 / p99 (ms)", f"{m['health_p50_ms']:.2f} / {m['health_p99_ms']:.2f}"),
        ("snapshot p50 / health p50", f"{ratio:.2f}"),
        ("canvas draw (ms)", f"{m['draw_ms']:.1f}"),
    ):
        print(f"{name:<34}{value:>12}")
    result = {
        "benchmark": "dashboard_scale",
        "command": f"python benchmarks/dashboard_scale.py --gpus {args.gpus} --clients {args.clients} "
        f"--requests {args.requests}",
        "setup": f"lab cluster scaled to {info['gpus']:,} GPUs ({info['nodes']} nodes), profile sds, "
        f"{info['running_jobs']} running jobs; uvicorn in a child process stepping at 60x; "
        f"{args.clients} httpx client threads; Chromium {CHROMIUM}",
        "machine": {
            "python": platform.python_version(),
            "processor": platform.machine(),
            "cpus": os.cpu_count(),
        },
        "measured": {k: round(v, 3) for k, v in m.items()},
        "demo_build_s": round(info["build_s"], 1),
        "snapshot_over_health_p50": round(ratio, 2),
        "targets": {
            name: {"target": target, "measured": round(value, 3), "pass": ok}
            for name, (value, target, ok) in targets.items()
        },
    }
    if RESULTS.exists():  # the live row is another run, with its own stamp: keep it
        earlier = json.loads(RESULTS.read_text())
        if "live" in earlier:
            result["live"] = earlier["live"]
    write_results(RESULTS, ROOT, result, source)


if __name__ == "__main__":
    main()
