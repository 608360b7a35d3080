"""Alibaba GPU-sharing trace (cluster-trace-gpu-v2023, "openb"): one pod per line, and the node lists.

The pod list (``openb_pod_list_*.csv``) has a header naming ``name``,
``cpu_milli``, ``memory_mib``, ``num_gpu``, ``gpu_milli``, ``gpu_spec``, ``qos``,
``pod_phase``, ``creation_time``, ``deletion_time`` and ``scheduled_time``. A pod
is a job of one task (``name``, ``num_gpu`` and ``gpu_milli`` are required; a list
without ``creation_time`` has every pod submitted at 0, and its metadata says
so). Its GPU share follows the FGD simulator's reading:
``num_gpu`` 0 asks for no GPU, 1 for ``gpu_milli`` of one GPU, and more than
one for that many whole GPUs (``gpu_milli`` must then be 1000).

Times are already seconds from the trace's own zero (the first pod's
creation), so they are kept as they are and there is no wall clock. A pod
that was never scheduled (``Pending``: deleted before it got a node) has no
start and no run time; it is ``cancelled``.

:func:`read_openb_nodes` reads a node list (``openb_node_list_*.csv``) for
building the cluster the pods ran on; it is not a job format.
"""

from __future__ import annotations

import csv
from collections.abc import Iterator
from dataclasses import dataclass
from functools import partial
from pathlib import Path

from loadmaster.traces.header import Header, header_rows, whole
from loadmaster.traces.rows import Row, RowError, TraceError, bad, number
from loadmaster.traces.source import Lines, open_text

REQUIRED = ("name", "num_gpu", "gpu_milli")
"""Pod-list columns a file must have; the others fill more of the table when present. The
``multigpu`` lists of the FGD artifact have only ``name,cpu_milli,memory_mib,num_gpu,gpu_milli``."""

NO_CREATION_TIME = "no creation_time column: every pod is submitted at t=0"
"""The metadata's ``submit_s`` note for a pod list without creation times (the FGD experiment,
which shuffles the pods, does not use them)."""

_PHASE = {"Succeeded": "completed", "Failed": "failed", "Running": "running", "Pending": "cancelled"}
"""Kubernetes pod phase as recorded; any other phase is ``unknown``."""

NODE_COLUMNS = ("sn", "cpu_milli", "memory_mib", "gpu", "model")
"""Node-list columns, all required (``model`` may be empty for a node without GPUs)."""


def read_openb(lines: Lines, meta: dict[str, str]) -> Iterator[tuple[int, Row | RowError]]:
    """Rows of the canonical table from an openb pod list, one job of one task per pod."""
    return header_rows(
        lines, meta, REQUIRED, partial(_pod, meta), hint="an openb pod list starts with its header"
    )


def _pod(meta: dict[str, str], f: dict[str, str]) -> Row:
    num_gpu = whole(f["num_gpu"], "num_gpu")
    gpu_milli = whole(f["gpu_milli"], "gpu_milli")
    if "creation_time" in f:
        submit = number(f["creation_time"], "creation_time")
    else:
        submit = 0.0  # the table needs a submission time; the metadata says there was none
        meta["submit_s"] = NO_CREATION_TIME
    start = _time(f, "scheduled_time")
    end = _time(f, "deletion_time")
    if start is not None and end is not None and end < start:
        raise bad("deletion_time", f"is before scheduled_time ({end:g} < {start:g})")
    spec = f.get("gpu_spec", "")
    return {
        "job_id": f["name"],
        "user": "",
        "group": "",
        "queue": f.get("qos") or None,
        "submit_s": submit,
        "start_s": start,
        "end_s": end,
        "duration_s": end - start if start is not None and end is not None else None,
        "tasks": 1,
        "gpu_milli_per_task": pod_gpu_milli(num_gpu, gpu_milli),
        "cpu_milli_per_task": whole(f["cpu_milli"], "cpu_milli") if f.get("cpu_milli") else None,
        "memory_mib_per_task": whole(f["memory_mib"], "memory_mib") if f.get("memory_mib") else None,
        "gpu_model": spec or None,
        "status": _PHASE.get(f.get("pod_phase", ""), "unknown"),
    }


def _time(f: dict[str, str], name: str) -> float | None:
    text = f.get(name, "")
    return number(text, name) if text else None


def pod_gpu_milli(num_gpu: int, gpu_milli: int) -> int:
    """Milli-GPU of a pod asking ``num_gpu`` GPUs of ``gpu_milli`` each (the FGD simulator's reading)."""
    if num_gpu == 0:
        return 0
    if num_gpu == 1:
        if gpu_milli > 1000:
            raise bad("gpu_milli", f"a one-GPU pod asks for 0-1000 milli-GPU, got {gpu_milli}")
        return gpu_milli
    if gpu_milli != 1000:
        raise bad("gpu_milli", f"a pod of {num_gpu} GPUs must ask for whole GPUs (1000), got {gpu_milli}")
    return num_gpu * 1000


@dataclass(frozen=True)
class OpenbNode:
    """One node of an openb node list: its name, CPU (milli-cores), memory (MiB), GPUs and GPU model."""

    name: str
    cpu_milli: int
    memory_mib: int
    gpus: int
    gpu_model: str | None


def read_openb_nodes(path: Path) -> list[OpenbNode]:
    """The nodes listed in ``path`` (``sn,cpu_milli,memory_mib,gpu,model``), in file order.

    Raises TraceError naming the file, the line and the field for a bad line.
    """
    if not path.is_file():
        raise TraceError(str(path), None, "", "no such file")
    nodes: list[OpenbNode] = []
    with open_text(path) as handle:
        lines = Lines(handle)
        header: Header | None = None
        for cells in csv.reader(lines):
            if not any(cell.strip() for cell in cells):
                continue
            if header is None:
                header = Header.parse(cells, NODE_COLUMNS, str(path), lines.line, "an openb node list")
                continue
            nodes.append(_node(header, cells, str(path), lines.line))
    return nodes


def _node(header: Header, cells: list[str], source: str, line: int) -> OpenbNode:
    if len(cells) != len(header.names):
        raise TraceError(
            source, line, "fields", f"the header names {len(header.names)} columns, got {len(cells)}"
        )
    f = {name: cells[at].strip() for name, at in header.index.items()}
    counts: dict[str, int] = {}
    for name in ("cpu_milli", "memory_mib", "gpu"):
        if not f[name].isdigit():
            raise TraceError(source, line, name, f"must be a whole number >= 0, got {f[name]!r}")
        counts[name] = int(f[name])
    return OpenbNode(f["sn"], counts["cpu_milli"], counts["memory_mib"], counts["gpu"], f["model"] or None)
