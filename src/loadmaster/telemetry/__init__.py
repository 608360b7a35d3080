"""GPU telemetry: the DCGM-keyed schema, its sources (synthetic, NVML agent, Prometheus) and its stores."""

from loadmaster.telemetry.schema import (
    BY_ID,
    BY_KEY,
    FIELDS,
    LABELS,
    SAMPLE_SCHEMA,
    SERIES_SCHEMA,
    Field,
    Kind,
    Scope,
    field,
    field_code,
)
from loadmaster.telemetry.store import Range, Series, TelemetryStore

__all__ = [
    "BY_ID",
    "BY_KEY",
    "FIELDS",
    "LABELS",
    "SAMPLE_SCHEMA",
    "SERIES_SCHEMA",
    "Field",
    "Kind",
    "Range",
    "Scope",
    "Series",
    "TelemetryStore",
    "field",
    "field_code",
]
