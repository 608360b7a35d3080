"""Microsoft Philly (Jeon et al., ATC'19) ``cluster_job_log``: one JSON array of job objects.

Each job has ``jobid``, ``user``, ``vc``, ``status`` (``Pass``, ``Killed``,
``Failed``), ``submitted_time`` and ``attempts``, each attempt a
``start_time``, an ``end_time`` and a ``detail`` list of hosts (``ip``) with the
GPUs it held there (``gpus``). The virtual cluster is the ``group``.

The job ran from its first attempt's start to its last attempt's end, so
``duration_s`` includes the gaps between retries. Its GPUs are those of the
last attempt that records hosts: one task per host when every host held as
many GPUs, else one task per GPU (:func:`host_gang`). A job without any such
attempt never held a GPU in the trace, so its demand is unknown: it is a bad
row (``--on-error skip`` drops these jobs). A last attempt that started but
has no end means the job was still running when the trace was taken; an
attempt with neither time (a logging gap, says the trace's README) keeps
the job's status. Times are wall-clock (see
:mod:`loadmaster.traces.wallclock`): seconds from the first job's
submission; ``None`` (JSON null or the text) is not recorded.

The array is read object by object: a structural scan finds where each job
object ends, and only that object is parsed, so memory holds one job plus the
current line. The public file is pretty-printed, so a line is short; a file
written on one line is held as one string, but never as one parsed tree.
Errors name the line where the job's object starts and its index in the array.
"""

from __future__ import annotations

import json
import re
from collections.abc import Iterator
from functools import partial
from typing import Any

from loadmaster.traces.rows import Row, RowError, TraceError, bad, guard
from loadmaster.traces.source import Lines
from loadmaster.traces.wallclock import Origin, clock_s

_STATUS = {"Pass": "completed", "Killed": "cancelled", "Failed": "failed"}
"""Philly's final status; any other is ``unknown``."""

_TOKEN = re.compile(r'"(?:[^"\\]|\\.)*"|[{}\[\]]|[^\s{}\[\]",:]+|"')
"""JSON tokens that matter for finding object ends: whole strings (one line each), brackets, scalars."""

_BRACKET = re.compile(r"[{}\[\]]")
_DEPTH = {"{": 1, "[": 1, "}": -1, "]": -1}
_DECODER = json.JSONDecoder()


def read_philly(lines: Lines, meta: dict[str, str]) -> Iterator[tuple[int, Row | RowError]]:
    """Rows of the canonical table from a Philly ``cluster_job_log``; the origin goes into ``meta``."""
    parse = partial(_job, Origin(meta))
    for index, (line, text) in enumerate(job_objects(lines, lines.source)):
        row = guard(parse, text)
        if isinstance(row, RowError):
            row = RowError(row.field, f"job #{index}: {row.message}")
        yield line, row


def job_objects(lines: Lines, source: str) -> Iterator[tuple[int, str]]:
    """The text of each element of a top-level JSON array, with the line where it starts.

    Raises TraceError when the file is not an array or ends inside one; an
    element that is not an object, or a malformed object, is left for the
    parser to report as a bad row.
    """
    scanner = _ArrayScanner(source)
    for text in lines:
        yield from scanner.feed(text, lines.line)
    if scanner.depth != 0:
        raise TraceError(source, lines.line, "", "the file ends inside the JSON array (is it truncated?)")


class _ArrayScanner:
    """Finds where each element of a JSON array ends by counting brackets outside strings.

    A JSON string never spans lines, so a line is scanned on its own; a line
    inside an object with no bracket at all (most of a pretty-printed file) is
    kept without scanning, and an object that fits on its line is cut out by
    the C decoder, which is what makes a one-line file fast.
    """

    def __init__(self, source: str) -> None:
        self.source = source
        self.depth = 0
        self.parts: list[str] = []
        self.first = 0

    def feed(self, text: str, line: int) -> Iterator[tuple[int, str]]:
        """The elements that end on this line, with the line where each starts."""
        if self.depth >= 2 and _BRACKET.search(text) is None:
            self.parts.append(text)
            return
        begin = pos = 0
        while (token := _TOKEN.search(text, pos)) is not None:
            kind, pos = token.group(), token.end()
            if self.depth == 0 and kind != "[":
                raise TraceError(
                    self.source, line, "", f"a Philly job log is a JSON array, found {kind[:20]!r}"
                )
            if self.depth == 1 and kind == "{":
                end = _object_end(text, token.start())
                if end is not None:
                    yield line, text[token.start() : end]
                    pos = end
                    continue
                self.parts, self.first, begin = [], line, token.start()
            elif self.depth == 1 and kind not in ("}", "]"):
                yield line, kind  # not an object: the parser says so
                if kind != "[":
                    continue
            self.depth += _DEPTH.get(kind, 0)
            if self.depth == 1 and kind == "}":
                self.parts.append(text[begin:pos])
                yield self.first, "".join(self.parts)
        if self.depth >= 2:
            self.parts.append(text[begin:])


def _object_end(text: str, start: int) -> int | None:
    """Where the object starting at ``start`` ends, when it is whole and valid on this line."""
    try:
        return _DECODER.raw_decode(text, start)[1]
    except json.JSONDecodeError:
        return None


def _job(origin: Origin, text: str) -> Row:
    if not text.startswith("{"):
        raise bad("job", f"array elements must be job objects, got {text[:40]!r}")
    try:
        job = json.loads(text)
    except json.JSONDecodeError as exc:
        raise bad("json", f"is not valid JSON: {exc.msg} (line {exc.lineno} of the object)") from None
    if not isinstance(job, dict):
        raise bad("job", f"array elements must be job objects, got {text[:40]!r}")
    submitted = _text(job, "submitted_time")
    submit = clock_s(submitted, "submitted_time")
    if submit is None:
        raise bad("submitted_time", f"is required, got {submitted!r}")
    attempts = job.get("attempts") or []
    if not isinstance(attempts, list) or not all(isinstance(a, dict) for a in attempts):
        raise bad("attempts", "must be a list of objects (start_time, end_time, detail)")
    shape = _shape(job, attempts)  # checked before the job may become the origin
    submit_s = origin.submit(submit, str(submitted))
    return shape | _times(origin, attempts) | {"submit_s": submit_s}


def _shape(job: dict[str, Any], attempts: list[dict[str, Any]]) -> dict[str, object]:
    """Who ran it, where, with how many GPUs, and how it ended."""
    hosts = next((a["detail"] for a in reversed(attempts) if a.get("detail")), None)
    if hosts is None:
        raise bad("attempts", "no attempt lists the hosts it ran on, so the job's GPU count is unknown")
    if not isinstance(hosts, list) or not all(isinstance(h, dict) for h in hosts):
        raise bad("detail", "must be a list of hosts, each {ip, gpus}")
    gpus = [host.get("gpus") or [] for host in hosts]
    if not all(isinstance(g, list) for g in gpus):
        raise bad("detail", "each host's gpus must be a list of GPU names")
    tasks, gpu_milli = host_gang([len(g) for g in gpus])
    last = attempts[-1] if attempts else {}
    started = clock_s(_text(last, "start_time"), "start_time") is not None
    ended = clock_s(_text(last, "end_time"), "end_time") is not None
    return {
        "job_id": str(job.get("jobid", "")),
        "user": str(job.get("user") or ""),
        "group": str(job.get("vc") or ""),
        "tasks": tasks,
        "gpu_milli_per_task": gpu_milli,
        "status": "running" if started and not ended else _STATUS.get(str(job.get("status")), "unknown"),
    }


def host_gang(gpus_per_host: list[int]) -> tuple[int, int]:
    """``(tasks, gpu_milli_per_task)``: a task per host when all hosts hold as many GPUs, else one per GPU.

    A task never spans hosts; when the hosts hold different counts no single
    task size fits them all, so each GPU is its own task.
    """
    if len(set(gpus_per_host)) == 1:
        return len(gpus_per_host), gpus_per_host[0] * 1000
    return sum(gpus_per_host), 1000


def _times(origin: Origin, attempts: list[dict[str, Any]]) -> dict[str, object]:
    """First start and last end over the attempts, from the origin, and the run time between them."""
    starts = [clock_s(_text(a, "start_time"), "start_time") for a in attempts]
    start = next((s for s in starts if s is not None), None)
    end = clock_s(_text(attempts[-1], "end_time"), "end_time") if attempts else None
    if start is not None and end is not None and end < start:
        raise bad("end_time", "the last attempt ends before the first one starts")
    return {
        "start_s": origin.shift(start),
        "end_s": origin.shift(end),
        "duration_s": end - start if start is not None and end is not None else None,
    }


def _text(obj: dict[str, Any], key: str) -> str | None:
    value = obj.get(key)
    if value is not None and not isinstance(value, str):
        raise bad(key, f"must be a time like 2017-10-07 01:12:09 or None, got {value!r}")
    return value
