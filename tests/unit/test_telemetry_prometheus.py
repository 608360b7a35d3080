"""PrometheusStore without a server: the queries it builds and how it reads the answers."""

from __future__ import annotations

import json
from collections.abc import Iterator

import httpx
import numpy as np
import pytest

from loadmaster.errors import TelemetryError
from loadmaster.telemetry import field
from loadmaster.telemetry.prometheus import PrometheusStore, quote, selector

GPU0 = {
    "__name__": "DCGM_FI_DEV_GPU_UTIL",
    "gpu": "0",
    "UUID": "GPU-a",
    "Hostname": "n0",
    "exported_job": "j1",
    "job": "scrape",
    "instance": "x:9400",
}
GPU1 = {"__name__": "DCGM_FI_DEV_GPU_UTIL", "gpu": "1", "UUID": "GPU-b", "Hostname": "n0", "job": "scrape"}


class Fake:
    """Answers the three API endpoints and records the queries."""

    def __init__(self) -> None:
        self.queries: list[dict[str, str]] = []
        self.instant: list[dict[str, str]] = [GPU0]
        """The series an instant query answers (87 each)."""

    def __call__(self, request: httpx.Request) -> httpx.Response:
        params = dict(request.url.params)
        self.queries.append({"path": request.url.path, **params})
        if request.url.path == "/api/v1/series":
            data: object = [GPU0, GPU1]
        elif request.url.path == "/api/v1/query":
            answers = [{"metric": m, "value": [100.0, "87"]} for m in self.instant]
            data = {"resultType": "vector", "result": answers}
        elif "max_over_time" in params["query"]:
            data = {
                "resultType": "matrix",
                "result": [{"metric": GPU1, "values": [[20.0, "9"], [30.0, "4"]]}],
            }
        else:
            data = {
                "resultType": "matrix",
                "result": [{"metric": GPU1, "values": [[20.0, "3"], [30.0, "2"]]}],
            }
        return httpx.Response(200, text=json.dumps({"status": "success", "data": data}))


@pytest.fixture
def fake() -> Fake:
    return Fake()


@pytest.fixture
def reader(fake: Fake) -> Iterator[PrometheusStore]:
    with PrometheusStore("http://prom:9090/", transport=httpx.MockTransport(fake)) as store:
        yield store


def test_series_keep_schema_labels_and_read_exported_job_as_job(reader: PrometheusStore) -> None:
    got = reader.series()
    assert [s.labels for s in got] == [
        {"gpu": "0", "UUID": "GPU-a", "Hostname": "n0", "job": "j1"},
        {"gpu": "1", "UUID": "GPU-b", "Hostname": "n0"},
    ]
    assert [s.id for s in reader.series(job="j1")] == [0]


def test_latest_is_an_instant_query(reader: PrometheusStore, fake: Fake) -> None:
    reader.series()
    assert reader.latest(field("GPU_UTIL"), at_s=100.0) == {0: 87.0}
    assert fake.queries[-1]["query"] == "DCGM_FI_DEV_GPU_UTIL" and fake.queries[-1]["time"] == "100.0"


def test_range_asks_each_step_at_its_end(reader: PrometheusStore, fake: Fake) -> None:
    reader.series()
    got = reader.range(field("GPU_UTIL"), [1], 10.0, 30.0, 10.0)
    np.testing.assert_allclose(got.times_s, [10.0, 20.0])
    np.testing.assert_allclose(got.mean, [[3.0, 2.0]])
    np.testing.assert_allclose(got.peak, [[9.0, 4.0]])
    query = fake.queries[-1]
    assert query["start"] == "20.0" and query["end"] == "30.0" and query["step"] == "10.0"
    assert query["query"].startswith("max_over_time(DCGM_FI_DEV_GPU_UTIL{")
    assert 'UUID="GPU-b"' in query["query"] and query["query"].endswith("[10000ms])")


def test_label_values_cannot_break_out_of_the_query() -> None:
    assert quote('x"} or vector(1) #') == '"x\\"} or vector(1) #"'
    assert selector("M", {"Hostname": 'a\\"b'}) == 'M{Hostname="a\\\\\\"b"}'
    with pytest.raises(TelemetryError, match="label name"):
        selector("M", {"bad label": "x"})


def test_errors_name_the_server() -> None:
    def refuse(request: httpx.Request) -> httpx.Response:
        return httpx.Response(
            400, text=json.dumps({"status": "error", "errorType": "bad_data", "error": "parse error"})
        )

    with PrometheusStore("http://prom:9090", transport=httpx.MockTransport(refuse)) as store:
        with pytest.raises(TelemetryError, match=r"prom:9090.*bad_data: parse error"):
            store.latest(field("GPU_UTIL"))
        with pytest.raises(TelemetryError, match="read-only"):
            store.register([])


def test_unreachable_server_is_a_telemetry_error() -> None:
    def down(request: httpx.Request) -> httpx.Response:
        raise httpx.ConnectError("connection refused", request=request)

    with (
        PrometheusStore("http://prom:9090", transport=httpx.MockTransport(down)) as store,
        pytest.raises(TelemetryError, match="connection refused"),
    ):
        store.series()


def test_series_are_listed_again_only_after_rediscover_s(fake: Fake) -> None:
    """Between two listings the reader answers from what it has seen; a series first returned by an
    instant query in between is among them."""
    now = [0.0]
    store = PrometheusStore(
        "http://prom:9090", transport=httpx.MockTransport(fake), rediscover_s=60.0, clock=lambda: now[0]
    )

    def listings() -> int:
        return sum(q["path"] == "/api/v1/series" for q in fake.queries)

    assert len(store.series()) == 2 and listings() == 1
    fake.instant = [{**GPU1, "gpu": "2", "UUID": "GPU-c"}]
    store.latest(field("GPU_UTIL"))
    now[0] = 59.0
    assert [s.labels["gpu"] for s in store.series()] == ["0", "1", "2"] and listings() == 1
    now[0] = 60.0
    store.series()
    assert listings() == 2
    store.close()


def test_series_not_seen_for_lookback_and_rediscover_are_forgotten(fake: Fake) -> None:
    """A long-running reader's memory is bounded: a pod's series that no listing or query returned for
    lookback_s + rediscover_s is dropped; a new series gets a new id, never a forgotten one."""
    now = [0.0]
    store = PrometheusStore(
        "http://prom:9090",
        transport=httpx.MockTransport(fake),
        lookback_s=100.0,
        rediscover_s=10.0,
        clock=lambda: now[0],
    )
    fake.instant = [{**GPU1, "gpu": "7", "UUID": "GPU-z", "pod": "old"}]
    store.latest(field("GPU_UTIL"))
    assert {s.labels["gpu"] for s in store.series()} == {"0", "1", "7"}
    fake.instant = [GPU0]
    for t in (50.0, 100.0, 110.0):
        now[0] = t
        store.latest(field("GPU_UTIL"))
        assert "7" in {s.labels["gpu"] for s in store.series()}
    now[0] = 120.0
    store.latest(field("GPU_UTIL"))
    assert {s.labels["gpu"] for s in store.series()} == {"0", "1"}
    fake.instant = [{**GPU1, "gpu": "8", "UUID": "GPU-y"}]
    assert list(store.latest(field("GPU_UTIL"))) == [3]
    store.close()
