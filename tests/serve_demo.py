"""What the dashboard API tests share: the demo cluster they query, a TestClient over its app (served
once per test module) and a signed-in user's header.

In a test module: ``demo, client = demo_fixtures()`` declares the ``demo`` and ``client`` fixtures.
"""

from __future__ import annotations

import warnings
from collections.abc import Iterator
from typing import Any

import pytest

from loadmaster.serve import DemoOptions, build_demo, create_app
from loadmaster.serve.demo import Demo

with warnings.catch_warnings():
    # Starlette's TestClient warns about its httpx transport on import; the tests run under -W error.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

__all__ = ["TestClient", "auth", "demo_fixtures"]


def auth(demo: Demo, name: str) -> dict[str, str]:
    """The header that signs ``name`` in with the demo's token for it."""
    return {"Authorization": f"Bearer {demo.tokens.token_of(name)}"}


def demo_fixtures(history_s: float = 1800.0, speed: float = 60.0) -> tuple[Any, Any]:
    """Module-scoped fixtures ``demo`` (a demo cluster with ``history_s`` of history, stepper off) and
    ``client`` (a TestClient over its app)."""

    @pytest.fixture(scope="module", name="demo")
    def demo_fixture() -> Demo:
        return build_demo(DemoOptions(history_s=history_s, speed=speed))

    @pytest.fixture(scope="module", name="client")
    def client_fixture(demo: Demo) -> Iterator[TestClient]:
        with TestClient(create_app(demo, run_stepper=False)) as c:
            yield c

    return demo_fixture, client_fixture
