"""Registry fragment: quota, dedicated node groups, size zones and resource types."""

from __future__ import annotations

from collections.abc import Mapping

from loadmaster.scheduling.framework import Plugin
from loadmaster.scheduling.plugins.dedicated import Dedicated
from loadmaster.scheduling.plugins.quota import Quota
from loadmaster.scheduling.plugins.resource_types import ResourceTypes
from loadmaster.scheduling.plugins.size_zones import SizeZones

ADMISSION_PLUGINS: Mapping[str, type[Plugin]] = {
    "quota": Quota,
    "dedicated": Dedicated,
    "size-zones": SizeZones,
    "resource-types": ResourceTypes,
}
