"""The trace formats loadmaster reads, in one literal table, and reading a file in any of them."""

from __future__ import annotations

from pathlib import Path

from loadmaster.traces.gavel import read_gavel
from loadmaster.traces.generic import read_csv
from loadmaster.traces.helios import read_helios
from loadmaster.traces.openb import read_openb
from loadmaster.traces.pai import read_pai
from loadmaster.traces.philly import read_philly
from loadmaster.traces.pollux import read_pollux
from loadmaster.traces.rows import OnError, TraceError
from loadmaster.traces.sacct import read_sacct
from loadmaster.traces.source import Progress
from loadmaster.traces.swf import read_swf
from loadmaster.traces.tiresias import read_tiresias
from loadmaster.traces.trace import Format, Trace, read_lines, read_parquet

FORMATS: dict[str, Format] = {
    f.name: f
    for f in (
        Format("swf", "Standard Workload Format (Parallel Workloads Archive)", (".swf",), read_swf),
        Format("sacct", "Slurm accounting, sacct --parsable2 with a header", (".sacct",), read_sacct),
        Format("csv", "generic CSV with canonical column names", (".csv",), read_csv),
        Format("openb", "Alibaba GPU-sharing pod list (cluster-trace-gpu-v2023)", (), read_openb),
        Format("pai", "Alibaba PAI task table (cluster-trace-gpu-v2020)", (), read_pai),
        Format("philly", "Microsoft Philly cluster_job_log (JSON)", (), read_philly),
        Format("helios", "SenseTime Helios cluster_log.csv", (), read_helios),
        Format("tiresias", "Tiresias job trace CSV (job_id,num_gpu,submit_time,...)", (), read_tiresias),
        Format(
            "gavel", "Gavel job trace (.trace: 10 tab-separated fields, no header)", (".trace",), read_gavel
        ),
        Format(
            "pollux", "Pollux workload CSV (name,time,application,num_replicas,batch_size)", (), read_pollux
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
