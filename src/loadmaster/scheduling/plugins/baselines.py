"""Registry fragment: ordering and packing baselines (filled by their plugin files)."""

from __future__ import annotations

from collections.abc import Mapping

from loadmaster.scheduling.framework import Plugin

BASELINE_PLUGINS: Mapping[str, type[Plugin]] = {}
