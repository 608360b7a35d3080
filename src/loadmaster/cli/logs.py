"""Logging for long-running commands (``kube run``): plain lines for a terminal, JSON lines for a collector.

Library code logs with ``logging.getLogger(__name__)`` and puts the facts in
``extra`` (``log.info("bound", extra={"pod": key, "node": node})``); this
module only chooses where and how they are written: to standard error, one
record per line. The JSON form has ``ts`` (RFC 3339, UTC), ``level``,
``logger``, ``msg``, every ``extra`` field, and ``exc`` with the traceback
when there is one, the shape log collectors (Fluent Bit, Loki, Cloud
Logging) parse without configuration.
"""

from __future__ import annotations

import enum
import json
import logging
import sys
from datetime import UTC, datetime
from typing import Any, TextIO

_STANDARD = frozenset(vars(logging.LogRecord("", 0, "", 0, "", None, None))) | {"message", "asctime"}
"""Attributes every LogRecord has: anything else on a record came from ``extra``."""


class LogFormat(enum.StrEnum):
    plain = "plain"
    json = "json"


class LogLevel(enum.StrEnum):
    debug = "debug"
    info = "info"
    warning = "warning"
    error = "error"


def extra_fields(record: logging.LogRecord) -> dict[str, Any]:
    """The fields a call passed in ``extra``."""
    return {k: v for k, v in vars(record).items() if k not in _STANDARD and not k.startswith("_")}


class JsonFormatter(logging.Formatter):
    """One JSON object per record."""

    def format(self, record: logging.LogRecord) -> str:
        stamp = datetime.fromtimestamp(record.created, UTC).strftime("%Y-%m-%dT%H:%M:%S.%fZ")
        entry: dict[str, Any] = {
            "ts": stamp,
            "level": record.levelname.lower(),
            "logger": record.name,
            "msg": record.getMessage(),
        }
        entry.update(extra_fields(record))
        if record.exc_info:
            entry["exc"] = self.formatException(record.exc_info)
        return json.dumps(entry, default=str)


class PlainFormatter(logging.Formatter):
    """``time level logger: message key=value ...``."""

    def __init__(self) -> None:
        super().__init__("%(asctime)s %(levelname)-7s %(name)s: %(message)s")

    def format(self, record: logging.LogRecord) -> str:
        text = super().format(record)
        fields = extra_fields(record)
        if not fields:
            return text
        head, _, tail = text.partition("\n")  # a traceback stays below the fields
        pairs = " ".join(f"{k}={v}" for k, v in fields.items())
        return f"{head} {pairs}" + (f"\n{tail}" if tail else "")


class _StderrHandler(logging.StreamHandler):  # type: ignore[type-arg]
    """Writes to whatever ``sys.stderr`` is at the time of each record (a test may have replaced it)."""

    def emit(self, record: logging.LogRecord) -> None:
        self.stream = sys.stderr
        super().emit(record)


def configure(level: LogLevel, form: LogFormat, stream: TextIO | None = None) -> None:
    """Send every ``loadmaster`` record at ``level`` or above to ``stream`` (standard error) as ``form``."""
    handler = logging.StreamHandler(stream) if stream is not None else _StderrHandler()
    handler.setFormatter(JsonFormatter() if form == LogFormat.json else PlainFormatter())
    logger = logging.getLogger("loadmaster")
    for old in list(logger.handlers):
        logger.removeHandler(old)
    logger.addHandler(handler)
    logger.setLevel(level.value.upper())
