"""Shared by the dashboard's browser tests: Chromium, a signed-in page, screenshots (the demo server:
``app_server.serving``).

A missing Chromium fails the test (``system_tool``), never skips it, so a CI run without the browser
cannot pass as if the dashboard had been checked.
"""

from __future__ import annotations

from collections.abc import Iterator
from contextlib import contextmanager
from pathlib import Path
from typing import Any

from playwright.sync_api import sync_playwright

from app_server import serving
from conftest import system_tool
from loadmaster.serve import DemoOptions, build_demo, create_app

CHROMIUM = "/usr/bin/chromium"
ARTIFACTS = Path(__file__).resolve().parents[1] / "out" / "test-artifacts"


@contextmanager
def chromium() -> Iterator[Any]:
    """Debian's Chromium through Playwright (fails the test when it is not installed)."""
    system_tool("chromium", CHROMIUM)
    with sync_playwright() as p:
        browser = p.chromium.launch(executable_path=CHROMIUM, args=["--no-sandbox"])
        try:
            yield browser
        finally:
            browser.close()


@contextmanager
def demo_server(options: DemoOptions) -> Iterator[tuple[str, Any]]:
    """A demo built with ``options`` served on a free port (no stepper: the clock stands still):
    its base URL and the demo."""
    demo = build_demo(options)
    with serving(create_app(demo, run_stepper=False)) as base:
        yield base, demo


def open_page(browser: Any, base: str, token: str, *, width: int = 1400, height: int = 1000) -> Any:
    """A signed-in page, once the dashboard says it is ready."""
    page = browser.new_page(viewport={"width": width, "height": height})
    page.goto(f"{base}/#token={token}")
    page.wait_for_selector("body[data-ready=true]", timeout=60_000)
    return page


def shot(page: Any, name: str) -> None:
    ARTIFACTS.mkdir(parents=True, exist_ok=True)
    page.screenshot(path=str(ARTIFACTS / f"dashboard-{name}.png"), full_page=True)
