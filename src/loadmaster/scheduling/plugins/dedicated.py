"""dedicated: node groups reserved for one group of users, chosen by node labels.

A group that asked for its own servers gets them: nodes whose labels match
the group's selector take no other group's jobs. The group's own jobs are
confined to those nodes, unless ``spill`` lets them also use the shared nodes
(never another group's dedicated ones). A node that matches the selectors of
several groups is dedicated to all of them.
"""

from __future__ import annotations

from collections.abc import Hashable, Mapping
from dataclasses import dataclass, field

import numpy as np

from loadmaster.model import Job, NodeTable
from loadmaster.scheduling import fit
from loadmaster.scheduling.framework import BoolArray, CycleContext, FilterPlugin, FilterResult


@dataclass(frozen=True, slots=True)
class DedicatedArgs:
    groups: Mapping[str, Mapping[str, str]] = field(default_factory=dict)
    """Group name (``Job.group``) -> node-label selector of its dedicated nodes (labels must all match)."""
    spill: bool = False
    """Let a group with dedicated nodes also use the shared nodes when its own are busy."""

    def __post_init__(self) -> None:
        for group, selector in self.groups.items():
            if not selector:
                raise ValueError(
                    f"groups.{group}: the selector is empty, which would dedicate every node; "
                    "give at least one label, e.g. {team: " + group + "}"
                )


@dataclass(frozen=True, slots=True)
class _Masks:
    """Per group, its dedicated nodes; and every dedicated node of any group."""

    owned: Mapping[str, BoolArray]
    reserved: BoolArray


def _selector(labels: Mapping[str, str]) -> str:
    return ",".join(f"{key}={value}" for key, value in sorted(labels.items()))


def _none_left(job: Job) -> str:
    """The end of a reason for an empty mask: no allowed node, or none that meets the job's constraints."""
    constraints = fit.describe_static(job)
    return "there are none" if constraints == "any node" else f"none of them matches {constraints}"


class Dedicated(FilterPlugin):
    """Other groups' jobs are kept off dedicated nodes; the owner's jobs are kept on them (unless spill)."""

    name = "dedicated"
    reads_nodes_only = True  # the job and the node table (ctx.state.nodes); no time, no draws
    Args = DedicatedArgs

    def __init__(self, args: DedicatedArgs | None = None) -> None:
        super().__init__(args)
        self.settings: DedicatedArgs = args or DedicatedArgs()
        self._cached: tuple[NodeTable, _Masks] | None = None

    def memo_key(self, job: Job) -> Hashable:
        return job.group

    def filter(self, job: Job, ctx: CycleContext) -> FilterResult:
        masks = self._masks(ctx.state.nodes)
        own = masks.owned.get(job.group)
        if own is None:
            return FilterResult(~masks.reserved, self._shared_only(job))
        if not self.settings.spill:
            return FilterResult(
                own,
                f"dedicated: group {job.group} may use only its dedicated nodes "
                f"({_selector(self.settings.groups[job.group])}), and {_none_left(job)}",
            )
        return FilterResult(
            own | ~masks.reserved,
            f"dedicated: group {job.group} may use its dedicated nodes "
            f"({_selector(self.settings.groups[job.group])}) and shared nodes, and {_none_left(job)}",
        )

    def _shared_only(self, job: Job) -> str:
        others = "; ".join(f"{_selector(sel)} to {group}" for group, sel in self.settings.groups.items())
        return (
            f"dedicated: group {job.group} may use only shared nodes (dedicated: {others}), "
            f"and {_none_left(job)}"
        )

    def _masks(self, nodes: NodeTable) -> _Masks:
        """The masks for ``nodes``, kept for the node table last seen (a pure function of it)."""
        if self._cached is not None and self._cached[0] is nodes:
            return self._cached[1]
        owned: dict[str, BoolArray] = {}
        reserved = np.zeros(len(nodes), dtype=bool)
        for group, selector in self.settings.groups.items():
            mask = np.array(
                [all(n.labels.get(k) == v for k, v in selector.items()) for n in nodes.nodes], dtype=bool
            )
            mask.setflags(write=False)
            owned[group] = mask
            reserved |= mask
        reserved.setflags(write=False)
        masks = _Masks(owned, reserved)
        self._cached = (nodes, masks)
        return masks
