"""The scheduling core: framework, actions, plugins and profiles. Imports only ``model``."""

from loadmaster.scheduling.decisions import Bind, CycleResult, Decision, Preempt, Reserve
from loadmaster.scheduling.profile import PluginSpec, Profile, build_profile
from loadmaster.scheduling.registry import ACTIONS, PLUGINS
from loadmaster.scheduling.scheduler import Scheduler
from loadmaster.scheduling.status import Code, Status

__all__ = [
    "ACTIONS",
    "PLUGINS",
    "Bind",
    "Code",
    "CycleResult",
    "Decision",
    "PluginSpec",
    "Preempt",
    "Profile",
    "Reserve",
    "Scheduler",
    "Status",
    "build_profile",
]
