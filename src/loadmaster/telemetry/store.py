"""The one interface every telemetry store implements (embedded DuckDB by default, Prometheus in production).

Series are registered once with their labels; samples are appended in
batches (Arrow, :data:`~loadmaster.telemetry.schema.SAMPLE_SCHEMA`). Readers
ask for one field over a set of series and a time range, at a step: the
store returns a dense (series x time) array, downsampled by the store's
rule (the mean of each step, and the max kept beside it so spikes survive),
with NaN where a sample is missing.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Protocol

import numpy as np
import numpy.typing as npt
import pyarrow as pa

from loadmaster.telemetry.schema import Field

FloatMatrix = npt.NDArray[np.float64]


@dataclass(frozen=True)
class Series:
    """One series: its id in the store, its scope and its labels (dcgm-exporter names plus job, user)."""

    id: int
    scope: str
    labels: Mapping[str, str]


@dataclass(frozen=True)
class Range:
    """A field over series and time: ``mean`` and ``peak`` are (series x times), NaN where missing."""

    field: Field
    series: Sequence[int]
    times_s: npt.NDArray[np.float64]
    mean: FloatMatrix
    peak: FloatMatrix


class TelemetryStore(Protocol):
    """Where samples live. Implementations: DuckDB (embedded), Prometheus (HTTP API), in memory (tests)."""

    def register(self, series: Sequence[Series]) -> None:
        """Add series (or update their labels, such as the job a GPU now runs)."""
        ...

    def series(self, **labels: str) -> list[Series]:
        """The series whose labels equal every given label (all series when none given)."""
        ...

    def append(self, samples: pa.Table) -> None:
        """Add samples in :data:`SAMPLE_SCHEMA`; a series not registered is an error naming it."""
        ...

    def latest(self, field: Field, at_s: float | None = None) -> dict[int, float]:
        """Each series' last value of ``field`` at or before ``at_s`` (default: now), by series id."""
        ...

    def range(
        self, field: Field, series: Sequence[int], start_s: float, end_s: float, step_s: float
    ) -> Range:
        """``field`` over ``series`` from ``start_s`` to ``end_s`` in steps of ``step_s``."""
        ...
