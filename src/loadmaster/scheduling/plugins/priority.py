"""priority: higher priority classes go first.

A job's class maps to a value (``classes``), unless the job carries its
priority as a number (``Job.priority_value``: a Kubernetes pod's resolved
PriorityClass value), which then counts instead, as kube-scheduler's
PrioritySort orders by ``spec.priority``; its own ``priority`` breaks ties
within a class. Combine with fifo (listed after it) for submission order
inside a class.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, field

from loadmaster.model import Job
from loadmaster.scheduling.framework import CycleContext, OrderPlugin


def default_classes() -> dict[str, int]:
    return {"critical": 1000, "high": 100, "normal": 0, "low": -100, "best-effort": -1000}


def priority_value(job: Job, classes: Mapping[str, int]) -> int:
    """The job's resolved ``priority_value`` if it has one, else its class's value (0: unknown class)."""
    return job.priority_value if job.priority_value is not None else classes.get(job.priority_class, 0)


@dataclass(frozen=True, slots=True)
class PriorityArgs:
    classes: Mapping[str, int] = field(default_factory=default_classes)
    """Value of each priority class name; higher runs first. Unknown classes count as 0."""


class PriorityClass(OrderPlugin):
    """Order by class value (descending), then the job's own priority (descending)."""

    name = "priority"
    Args = PriorityArgs

    def __init__(self, args: PriorityArgs | None = None) -> None:
        super().__init__(args)
        self.classes = dict((args or PriorityArgs()).classes)

    def order_key(self, job: Job, ctx: CycleContext) -> tuple[float | str, ...]:
        return (-float(priority_value(job, self.classes)), -float(job.priority))
