"""Read telemetry from a Prometheus server that scrapes dcgm-exporter (or loadmaster's agent).

:class:`PrometheusStore` is the read side of the store interface over
Prometheus's HTTP API: ``series`` from ``/api/v1/series``, ``latest`` from an
instant query, ``range`` from ``query_range`` with ``avg_over_time`` and
``max_over_time`` over each step. Writing is Prometheus's job (it scrapes),
so ``register`` and ``append`` raise.

A series is one distinct label set. Its id is assigned by this reader the
first time it sees it and stays stable for the reader's life. Labels outside
the schema (``instance``, the scrape ``job``) are dropped from
``Series.labels``. Prometheus renames an exposed ``job`` label (loadmaster's
job) to ``exported_job`` because ``job`` is the scrape job's name; it is read
back as ``job``. Keep ``honor_labels`` off (the default): with it on, a free
GPU's series would carry the scrape job's name as its ``job``. dcgm-exporter's
newer ``hostname`` label (renamed from ``Hostname`` upstream, #655) is read as
``Hostname``. PromQL is
built only from schema field names and escaped label values, never from raw
user text.
"""

from __future__ import annotations

import logging
import math
import re
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import httpx
import numpy as np
import pyarrow as pa

from loadmaster.errors import TelemetryError
from loadmaster.telemetry.buckets import correct_resets, step_times
from loadmaster.telemetry.schema import FIELDS, LABELS, Field, Kind, Scope
from loadmaster.telemetry.store import Range, Series, matches

LOG = logging.getLogger("loadmaster.telemetry")

_MAX_POINTS = 10_000
"""Prometheus refuses a range query of more than 11,000 points per series; ask for fewer at a time."""
_NAMES = "|".join(re.escape(f.name) for f in FIELDS)


def quote(value: str) -> str:
    """A PromQL string literal holding ``value`` exactly."""
    return '"' + value.replace("\\", "\\\\").replace('"', '\\"').replace("\n", "\\n") + '"'


def selector(name: str, labels: Mapping[str, str]) -> str:
    """``name{label="value",...}`` with every value quoted; label names must be Prometheus identifiers."""
    for key in labels:
        if not re.fullmatch(r"[A-Za-z_][A-Za-z0-9_]*", key):
            raise TelemetryError(f"{key!r} is not a valid Prometheus label name")
    inner = ",".join(f"{k}={quote(v)}" for k, v in sorted(labels.items()))
    return f"{name}{{{inner}}}"


class PrometheusStore:
    """The read side of :class:`~loadmaster.telemetry.store.TelemetryStore` over Prometheus's HTTP API.

    ``url`` is the server's base URL (``http://prometheus:9090``);
    ``transport`` lets tests answer without a network (``httpx.MockTransport``).
    ``lookback_s`` bounds ``series`` discovery to series seen that recently.
    ``rediscover_s``: ``series`` lists Prometheus's series again only when its last listing is older
    than this; in between it answers from the series this reader has seen (listed, or returned by
    ``latest`` and ``range``). Listing every GPU x field is the costliest read (about 140,000 series at
    10,000 GPUs, seconds of JSON), while a process that polls ``latest`` every scrape (``serve``) sees
    every live series anyway; 0 (the default) lists at every call.

    Memory stays bounded in a long-running reader: at each listing, a series neither listed nor
    returned by a query for ``lookback_s + rediscover_s`` (a pod that ended, a GPU removed) is
    forgotten. Ids are never reused, so an id a caller still holds cannot name another series.
    """

    def __init__(
        self,
        url: str,
        timeout_s: float = 10.0,
        lookback_s: float = 3600.0,
        transport: httpx.BaseTransport | None = None,
        *,
        rediscover_s: float = 0.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.url = url.rstrip("/")
        self.lookback_s = lookback_s
        self.rediscover_s = rediscover_s
        self._clock = clock
        self._listed_at = -math.inf
        self._client = httpx.Client(base_url=self.url, timeout=timeout_s, transport=transport)
        self._ids: dict[tuple[tuple[str, str], ...], int] = {}
        self._known: dict[int, Series] = {}
        self._raw: dict[int, dict[str, str]] = {}
        self._seen: dict[int, float] = {}
        """When each series was last listed or returned by a query (``clock``'s time)."""
        self._next_id = 0

    def close(self) -> None:
        """Close the HTTP connection pool."""
        self._client.close()

    def __enter__(self) -> PrometheusStore:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def register(self, series: Sequence[Series]) -> None:
        """Not possible: Prometheus learns series by scraping exporters."""
        raise TelemetryError("PrometheusStore is read-only: Prometheus learns series by scraping /metrics")

    def append(self, samples: pa.Table) -> None:
        """Not possible: Prometheus stores what it scrapes."""
        raise TelemetryError("PrometheusStore is read-only: Prometheus stores what it scrapes")

    def series(self, **labels: str) -> list[Series]:
        """The series seen within ``lookback_s`` (and every series this reader has seen since) whose
        labels equal every given label, by id; listed afresh at most every ``rediscover_s``."""
        if self._clock() - self._listed_at >= self.rediscover_s:
            now = time.time()
            data = self._get(
                "/api/v1/series",
                [
                    ("match[]", f'{{__name__=~"{_NAMES}"}}'),
                    ("start", str(now - self.lookback_s)),
                    ("end", str(now)),
                ],
            )
            for raw in data:
                self._id_of(raw)
            self._listed_at = self._clock()
            self._forget(before=self._listed_at - self.lookback_s - self.rediscover_s)
        return [s for _, s in sorted(self._known.items()) if matches(s, labels)]

    def latest(self, field: Field, at_s: float | None = None) -> dict[int, float]:
        """Each series' value of ``field`` at ``at_s`` (default: now), Prometheus's 5-minute lookback."""
        params: list[tuple[str, str | int | float | bool | None]] = [("query", field.name)]
        if at_s is not None:
            params.append(("time", repr(float(at_s))))
        result = self._get("/api/v1/query", params)["result"]
        out: dict[int, float] = {}
        for item in result:
            value = float(item["value"][1])
            if math.isfinite(value):
                out[self._id_of(item["metric"])] = value
        return out

    def range(
        self, field: Field, series: Sequence[int], start_s: float, end_s: float, step_s: float
    ) -> Range:
        """Per step, ``avg_over_time`` and ``max_over_time`` of ``field`` over the step; NaN where empty.

        Step ``k`` is evaluated at its end, ``start_s + (k + 1) * step_s``, over
        the preceding ``step_s`` (Prometheus 2 includes both ends of that window).
        Counters are corrected for resets between steps, not within one.
        """
        times = step_times(start_s, end_s, step_s)
        unknown = [i for i in series if i not in self._known]
        if unknown:
            raise TelemetryError(f"range asks for series {unknown[0]}, which this reader has not seen")
        rows = {sid: r for r, sid in enumerate(series)}
        mean = np.full((len(series), times.size), np.nan)
        peak = np.full((len(series), times.size), np.nan)
        match = self._matcher([self._raw[i] for i in series])
        window = f"{_duration(step_s)}"
        for first in range(0, times.size, _MAX_POINTS):
            last = min(times.size, first + _MAX_POINTS) - 1
            for func, target in (("avg_over_time", mean), ("max_over_time", peak)):
                query = f"{func}({selector(field.name, match)}[{window}])"
                self._fill(
                    target,
                    rows,
                    query,
                    first_s=float(times[first]),
                    last_s=float(times[last]),
                    start_s=start_s,
                    step_s=step_s,
                )
        if field.kind is Kind.COUNTER:
            groups = np.repeat(np.arange(len(series), dtype=np.int64), times.size)
            mean = correct_resets(groups, mean.ravel()).reshape(mean.shape)
            peak = correct_resets(groups, peak.ravel()).reshape(peak.shape)
        return Range(field=field, series=list(series), times_s=times, mean=mean, peak=peak)

    def _fill(
        self,
        target: np.ndarray[Any, np.dtype[np.float64]],
        rows: Mapping[int, int],
        query: str,
        *,
        first_s: float,
        last_s: float,
        start_s: float,
        step_s: float,
    ) -> None:
        params: list[tuple[str, str | int | float | bool | None]] = [
            ("query", query),
            ("start", repr(first_s + step_s)),
            ("end", repr(last_s + step_s)),
            ("step", repr(step_s)),
        ]
        for item in self._get("/api/v1/query_range", params)["result"]:
            row = rows.get(self._id_of(item["metric"]))
            if row is None:
                continue
            for ts, text in item["values"]:
                k = round((float(ts) - step_s - start_s) / step_s)
                if 0 <= k < target.shape[1]:
                    target[row, k] = float(text)

    def _matcher(self, raws: Sequence[Mapping[str, str]]) -> dict[str, str]:
        """Equality labels shared by every wanted series (``range`` maps results back to ids itself)."""
        common = dict(raws[0]) if raws else {}
        for raw in raws[1:]:
            common = {k: v for k, v in common.items() if raw.get(k) == v}
        return common

    def _forget(self, before: float) -> None:
        """Drop the series last seen before ``before`` (see the class docstring)."""
        stale = [sid for sid, seen in self._seen.items() if seen < before]
        for sid in stale:
            del self._ids[tuple(sorted(self._raw.pop(sid).items()))]
            del self._known[sid], self._seen[sid]
        if stale:
            LOG.info(
                "Prometheus at %s: forgot %d series not seen since the last listings", self.url, len(stale)
            )

    def _id_of(self, metric: Mapping[str, str]) -> int:
        raw = {k: v for k, v in metric.items() if k != "__name__"}
        key = tuple(sorted(raw.items()))
        found = self._ids.get(key)
        if found is not None:
            self._seen[found] = self._clock()
            return found
        new = self._next_id
        self._next_id += 1
        self._seen[new] = self._clock()
        self._ids[key] = new
        self._raw[new] = raw
        labels = {k: v for k, v in raw.items() if k in LABELS and k != "job"}
        if "exported_job" in raw:
            labels["job"] = raw["exported_job"]
        if "hostname" in raw and "Hostname" not in raw:
            labels["Hostname"] = raw[
                "hostname"
            ]  # dcgm-exporter since May 2026 (#655) writes it in lower case
        scope = Scope.GPU if "gpu" in raw or "UUID" in raw else Scope.NODE
        self._known[new] = Series(new, scope.value, labels)
        return new

    def _get(self, path: str, params: list[tuple[str, str | int | float | bool | None]]) -> Any:
        try:
            response = self._client.get(path, params=params)
        except httpx.HTTPError as exc:
            raise TelemetryError(f"Prometheus at {self.url}: {exc}") from exc
        try:
            body = response.json()
        except ValueError as exc:
            raise TelemetryError(
                f"Prometheus at {self.url}{path}: HTTP {response.status_code}, not JSON"
            ) from exc
        if body.get("status") != "success":
            raise TelemetryError(
                f"Prometheus at {self.url}{path}: {body.get('errorType', 'error')}: {body.get('error', body)}"
            )
        return body["data"]


def _duration(seconds: float) -> str:
    """A PromQL duration; whole milliseconds, as Prometheus accepts."""
    ms = max(1, round(seconds * 1000))
    return f"{ms}ms"
