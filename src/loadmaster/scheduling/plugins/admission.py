"""Registry fragment: quota, dedicated node groups, size zones and resource types."""

from __future__ import annotations

from collections.abc import Mapping

from loadmaster.scheduling.framework import Plugin

ADMISSION_PLUGINS: Mapping[str, type[Plugin]] = {}
