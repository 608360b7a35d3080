"""Typed outcomes of scheduling steps, each with a reason a person can read."""

from __future__ import annotations

from dataclasses import dataclass
from enum import Enum


class Code(Enum):
    """What a step concluded about a job."""

    SUCCESS = "success"
    UNSCHEDULABLE = "unschedulable"
    """Cannot run now; may run later when resources free up."""
    UNRESOLVABLE = "unresolvable"
    """Can never run on this cluster as it is (too large, no matching nodes)."""
    WAIT = "wait"
    """Held back by policy (queue order, admission), not by a lack of resources."""


@dataclass(frozen=True, slots=True)
class Status:
    """A step's verdict on one job, with the plugin that gave it and why.

    Reasons reach the user ("why is my job pending"), so they name the
    resource, what was wanted and what was found.
    """

    code: Code
    reason: str = ""
    plugin: str = ""
    estimated_start_s: float | None = None
    """When the job is expected to start, where a reservation holds capacity for it."""

    @property
    def ok(self) -> bool:
        """True when the step succeeded."""
        return self.code is Code.SUCCESS

    def __str__(self) -> str:
        prefix = f"[{self.plugin}] " if self.plugin else ""
        return f"{prefix}{self.code.value}: {self.reason}" if self.reason else self.code.value


SUCCESS = Status(Code.SUCCESS)


def unschedulable(reason: str, plugin: str = "") -> Status:
    """The job cannot start now for ``reason``."""
    return Status(Code.UNSCHEDULABLE, reason, plugin)


def as_for_smaller(status: Status) -> Status:
    """``status`` as the reason of a request at least as large as the one that failed with it."""
    return Status(status.code, f"as for a smaller request, {status.reason}", status.plugin)


def unresolvable(reason: str, plugin: str = "") -> Status:
    """The job can never start on this cluster for ``reason``."""
    return Status(Code.UNRESOLVABLE, reason, plugin)


def wait(reason: str, plugin: str = "", estimated_start_s: float | None = None) -> Status:
    """Policy holds the job back for ``reason``."""
    return Status(Code.WAIT, reason, plugin, estimated_start_s)
