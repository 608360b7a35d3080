"""Real workloads: trace readers into one canonical job table, and what is built on it."""

from loadmaster.traces.formats import FORMATS, detect, format_names, read_trace
from loadmaster.traces.rows import OnError, ReadReport, RowError, TraceError
from loadmaster.traces.schema import COLUMNS, SCHEMA, STATUSES, schema_markdown
from loadmaster.traces.trace import Format, Trace, read_parquet, write_parquet

__all__ = [
    "COLUMNS",
    "FORMATS",
    "SCHEMA",
    "STATUSES",
    "Format",
    "OnError",
    "ReadReport",
    "RowError",
    "Trace",
    "TraceError",
    "detect",
    "format_names",
    "read_parquet",
    "read_trace",
    "schema_markdown",
    "write_parquet",
]
