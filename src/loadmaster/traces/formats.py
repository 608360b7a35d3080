"""The trace formats loadmaster reads, in one literal table, and reading a file in any of them."""

from __future__ import annotations

import importlib
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path

from loadmaster.traces.rows import OnError, Row, RowError, TraceError
from loadmaster.traces.source import Lines, Progress
from loadmaster.traces.trace import Format, LineReader, Trace, read_lines, read_parquet


@dataclass(frozen=True)
class _Reader:
    """The line reader ``module.function``, its module imported on the first file of that format.

    Why: a run reads one format, and the ten readers' modules (with what they import) cost a tenth
    of a second or more to import; ``loadmaster simulate`` pays its imports before it simulates.
    """

    module: str
    function: str

    def resolve(self) -> LineReader:
        """The reader itself (importing its module)."""
        found: LineReader = getattr(importlib.import_module(self.module), self.function)
        return found

    def __call__(self, lines: Lines, meta: dict[str, str]) -> Iterator[tuple[int, Row | RowError]]:
        return self.resolve()(lines, meta)


FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format(
            "swf",
            "Standard Workload Format (Parallel Workloads Archive)",
            (".swf",),
            _Reader("loadmaster.traces.swf", "read_swf"),
        ),
        Format(
            "sacct",
            "Slurm accounting, sacct --parsable2 with a header",
            (".sacct",),
            _Reader("loadmaster.traces.sacct", "read_sacct"),
        ),
        Format(
            "csv",
            "generic CSV with canonical column names",
            (".csv",),
            _Reader("loadmaster.traces.generic", "read_csv"),
        ),
        Format(
            "openb",
            "Alibaba GPU-sharing pod list (cluster-trace-gpu-v2023)",
            (),
            _Reader("loadmaster.traces.openb", "read_openb"),
        ),
        Format(
            "pai",
            "Alibaba PAI task table (cluster-trace-gpu-v2020)",
            (),
            _Reader("loadmaster.traces.pai", "read_pai"),
        ),
        Format(
            "philly",
            "Microsoft Philly cluster_job_log (JSON)",
            (),
            _Reader("loadmaster.traces.philly", "read_philly"),
        ),
        Format(
            "helios",
            "SenseTime Helios cluster_log.csv",
            (),
            _Reader("loadmaster.traces.helios", "read_helios"),
        ),
        Format(
            "tiresias",
            "Tiresias job trace CSV (job_id,num_gpu,submit_time,...)",
            (),
            _Reader("loadmaster.traces.tiresias", "read_tiresias"),
        ),
        Format(
            "gavel",
            "Gavel job trace (.trace: 10 tab-separated fields, no header)",
            (".trace",),
            _Reader("loadmaster.traces.gavel", "read_gavel"),
        ),
        Format(
            "pollux",
            "Pollux workload CSV (name,time,application,num_replicas,batch_size)",
            (),
            _Reader("loadmaster.traces.pollux", "read_pollux"),
        ),
    )
}
"""Every line-based format by name; ``canonical`` (Parquet in the canonical schema) is read apart."""

CANONICAL = "canonical"


def format_names() -> tuple[str, ...]:
    """Names a user may give to ``--format``."""
    return (CANONICAL, *FORMATS)


def detect(path: Path) -> str:
    """The format of ``path`` from its suffix (ignoring .gz); an error lists the choices when unsure."""
    suffixes = [s.lower() for s in path.suffixes if s.lower() != ".gz"]
    last = suffixes[-1] if suffixes else ""
    if last == ".parquet":
        return CANONICAL
    matches = [f.name for f in FORMATS.values() if last in f.suffixes]
    if len(matches) == 1:
        return matches[0]
    raise TraceError(
        str(path),
        None,
        "format",
        f"cannot tell the format from the name; pass --format: {', '.join(format_names())}",
    )


def read_trace(
    path: Path, fmt: str | None = None, on_error: OnError = "stop", progress: Progress | None = None
) -> Trace:
    """Read ``path`` (format ``fmt``, or detected from the name) into the canonical table."""
    if not path.is_file():
        raise TraceError(str(path), None, "", "no such file")
    name = fmt or detect(path)
    if name == CANONICAL:
        return read_parquet(path)
    if name not in FORMATS:
        raise TraceError(
            str(path), None, "format", f"unknown format {name!r}; allowed: {', '.join(format_names())}"
        )
    return read_lines(path, FORMATS[name], on_error, progress)
