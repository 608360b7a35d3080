"""The API double every Kubernetes test talks to, served over HTTP on a free port, and its clock."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from kube.helpers import Clock
from loadmaster_testing.kube_api import KubeApiDouble


@pytest.fixture
def clock() -> Clock:
    """The double's clock (1_700_000_000.0 until a test moves it), shared with the replicas under test."""
    return Clock()


@pytest.fixture
def api(clock: Clock) -> Iterator[KubeApiDouble]:
    double = KubeApiDouble(clock=clock)
    double.url = double.serve()  # type: ignore[attr-defined]
    yield double
    double.close()
