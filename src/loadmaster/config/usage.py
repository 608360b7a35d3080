"""Fair-share usage and run-time history a simulation starts from: the ``usage.json`` of ``kube snapshot``.

A replay of a live cluster that starts with no usage ranks every user as a
newcomer, so a fair-share order (``slurm``, ``nsml``) or the ``learned``
order's history inputs would decide differently from the live scheduler.
``loadmaster kube snapshot`` writes the live ledger beside the trace and
``loadmaster simulate --past-usage`` starts from it. The file (JSON)::

    {"format": 1, "kind": "loadmaster/past-usage", "as_of_s": 5400.0,
     "usage_gpu_s": {"user/alice": 7200.0, "group/vision": 7200.0},
     "recent_runtimes_s": {"alice": [3600.0]}, "recent_limits_s": {"alice": [86400.0]}}

``as_of_s`` is in the trace's time (seconds from its first submission): the
usage is worth that much then and decays with the run's half-life from
there. The field checks are shared with the Kubernetes checkpoint
(``kube/checkpoint.py``), which holds the same numbers.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from loadmaster.errors import ConfigError
from loadmaster.model.usage import PastUsage

FORMAT = 1
KIND = "loadmaster/past-usage"
OWNER_PREFIXES = ("user/", "group/")
MAX_AS_OF_S = 365 * 86_400.0
"""Latest ``as_of_s`` read: a run starts at 0, and usage taken back from far later would be worth
2^(years / half-life) times more there (or overflow)."""


def load_past_usage(path: Path) -> PastUsage:
    """The file at ``path``; :class:`ConfigError` naming the file and the field at fault."""
    source = str(path)
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(source, "", f"cannot read it ({exc.strerror or exc})") from None
    except UnicodeDecodeError as exc:
        raise ConfigError(source, "", f"not a text file (byte {exc.start}: {exc.reason})") from None
    raw = json_object(text, source)
    if raw.get("kind") != KIND:
        raise ConfigError(source, "kind", f"expected {KIND!r}, got {raw.get('kind')!r}")
    if raw.get("format") != FORMAT:
        raise ConfigError(source, "format", f"expected {FORMAT}, got {raw.get('format')!r}")
    past = past_usage_from(raw, source, as_of="as_of_s")
    if not 0 <= past.as_of_s <= MAX_AS_OF_S:
        raise ConfigError(
            source,
            "as_of_s",
            f"seconds from the trace's first submission, 0 to {MAX_AS_OF_S:.0f} (a year); got "
            f"{past.as_of_s:.0f}"
            + (" (Unix time? kube snapshot writes trace time)" if past.as_of_s > 1e9 else ""),
        )
    return past


def render_past_usage(past: PastUsage) -> str:
    """The file's text (sorted keys: the same usage writes the same text)."""
    fields = usage_fields(past)
    return json.dumps(
        {"format": FORMAT, "kind": KIND, "as_of_s": past.as_of_s, **fields}, sort_keys=True, indent=1
    )


def usage_fields(past: PastUsage) -> dict[str, Any]:
    """The usage and history fields, as this file and the Kubernetes checkpoint write them."""
    return {
        "usage_gpu_s": dict(past.usage_gpu_s),
        "recent_runtimes_s": {u: list(r) for u, r in past.recent_runtimes_s.items()},
        "recent_limits_s": {u: list(r) for u, r in past.recent_limits_s.items()},
    }


def json_object(text: str, source: str) -> dict[str, Any]:
    """``text`` parsed as a JSON object, or a :class:`ConfigError` naming ``source``."""
    try:
        raw = json.loads(text)
    except json.JSONDecodeError as exc:
        raise ConfigError(source, "", f"not JSON ({exc})") from None
    if not isinstance(raw, dict):
        raise ConfigError(source, "", f"expected a JSON object, got {type(raw).__name__}")
    return raw


def past_usage_from(raw: Mapping[str, Any], source: str, *, as_of: str) -> PastUsage:
    """The usage and history fields of ``raw``, as of its field ``as_of``, checked."""
    usage = {
        k: positive(v, f"usage_gpu_s[{k!r}]", source) for k, v in mapping(raw, "usage_gpu_s", source).items()
    }
    for key in usage:
        if not key.startswith(OWNER_PREFIXES):
            raise ConfigError(source, "usage_gpu_s", f"key {key!r} must start with user/ or group/")
    runtimes, limits = series(raw, "recent_runtimes_s", source), series(raw, "recent_limits_s", source)
    for user, values in runtimes.items():
        if len(limits.get(user, ())) != len(values):
            raise ConfigError(
                source, f"recent_limits_s[{user!r}]", "must have one limit per run time of recent_runtimes_s"
            )
    return PastUsage(number(raw, as_of, source), usage, runtimes, limits)


def number(raw: Mapping[str, Any], name: str, source: str) -> float:
    """Field ``name`` of ``raw``: a finite number."""
    value = raw.get(name)
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise ConfigError(source, name, f"expected a finite number, got {value!r}")
    return float(value)


def positive(value: Any, name: str, source: str) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value) or value < 0:
        raise ConfigError(source, name, f"expected a finite number >= 0, got {value!r}")
    return float(value)


def mapping(raw: Mapping[str, Any], name: str, source: str) -> Mapping[str, Any]:
    """Field ``name`` of ``raw``: an object (absent: empty)."""
    value = raw.get(name, {})
    if not isinstance(value, dict):
        raise ConfigError(source, name, f"expected an object, got {type(value).__name__}")
    return value


def series(raw: Mapping[str, Any], name: str, source: str) -> dict[str, tuple[float, ...]]:
    """Field ``name`` of ``raw``: seconds per user."""
    found: dict[str, tuple[float, ...]] = {}
    for user, values in mapping(raw, name, source).items():
        if not isinstance(values, list):
            raise ConfigError(source, f"{name}[{user!r}]", "expected a list of seconds")
        found[user] = tuple(positive(v, f"{name}[{user!r}]", source) for v in values)
    return found
