"""A web app served by uvicorn in a thread on a free local port, for tests that need a real server
(a browser, a real Prometheus scraping it): ``with serving(app) as url: ...``."""

from __future__ import annotations

import socket
import threading
import time
from collections.abc import Iterator
from contextlib import contextmanager
from typing import Any

import pytest
import uvicorn


def free_port() -> int:
    with socket.socket() as sock:
        sock.bind(("127.0.0.1", 0))
        port: int = sock.getsockname()[1]
        return port


@contextmanager
def serving(app: Any, start_timeout_s: float = 20.0) -> Iterator[str]:
    """Serve ``app`` until the block ends; yields its base URL once uvicorn has started (fails the test
    if it does not within ``start_timeout_s``)."""
    port = free_port()
    server = uvicorn.Server(uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning"))
    thread = threading.Thread(target=server.run, daemon=True)
    thread.start()
    deadline = time.monotonic() + start_timeout_s
    while not server.started:
        if time.monotonic() > deadline:
            pytest.fail(f"the server did not start within {start_timeout_s:.0f} s")
        time.sleep(0.05)
    try:
        yield f"http://127.0.0.1:{port}"
    finally:
        server.should_exit = True
        thread.join(timeout=10)
