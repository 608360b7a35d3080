"""The API double every Kubernetes test talks to, served over HTTP on a free port."""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from loadmaster_testing.kube_api import KubeApiDouble


@pytest.fixture
def api() -> Iterator[KubeApiDouble]:
    double = KubeApiDouble(clock=lambda: 1_700_000_000.0)
    double.url = double.serve()  # type: ignore[attr-defined]
    yield double
    double.close()
