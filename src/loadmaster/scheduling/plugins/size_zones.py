"""size-zones: node zones by experiment size (NSML), so small and large jobs compete among themselves.

Each rule sends the jobs of a size range (total GPUs) to the nodes of one
zone (``Node.zone``): 1/2/4-GPU jobs share the small zone and 8-GPU jobs the
large one, so small jobs never fragment the servers large jobs need. A job
belongs to the first rule whose range holds it. ``overflow`` lets the jobs
of one zone also use another zone's nodes, at any time (not only when their
own zone is full). Nodes in zones that no rule names are open to every job.
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass, field

import numpy as np
from pydantic import NonNegativeFloat

from loadmaster.model import Job, NodeTable
from loadmaster.scheduling import fit
from loadmaster.scheduling.framework import BoolArray, CycleContext, FilterPlugin, FilterResult


@dataclass(frozen=True, slots=True)
class ZoneRule:
    """Jobs of ``min_gpus`` to ``max_gpus`` GPUs in total (both inclusive) go to ``zone``."""

    zone: str
    """A node zone (``Node.zone``, as the cluster file sets it)."""
    min_gpus: NonNegativeFloat = 0.0
    """Smallest job of the range, in total GPUs."""
    max_gpus: NonNegativeFloat = math.inf
    """Largest job of the range, in total GPUs."""

    def __post_init__(self) -> None:
        if self.min_gpus > self.max_gpus:
            raise ValueError(f"min_gpus {self.min_gpus:g} is above max_gpus {self.max_gpus:g}")

    def describe(self) -> str:
        if math.isinf(self.max_gpus):
            return f"{self.min_gpus:g}+ GPUs"
        return f"{self.min_gpus:g}-{self.max_gpus:g} GPUs"


def parse_overflow(item: str, known: Sequence[str]) -> tuple[str, str]:
    """``"small->large"`` as ``("small", "large")``; both must be zones that rules name."""
    parts = [part.strip() for part in item.split("->")]
    if len(parts) != 2 or not all(parts):
        raise ValueError(f"{item!r} is not of the form 'from->to', e.g. 'small->large'")
    for zone in parts:
        if zone not in known:
            raise ValueError(f"{item!r} names zone {zone!r}, which no rule names; zones: {', '.join(known)}")
    if parts[0] == parts[1]:
        raise ValueError(f"{item!r} overflows a zone into itself")
    return parts[0], parts[1]


@dataclass(frozen=True, slots=True)
class SizeZonesArgs:
    zones: Sequence[ZoneRule] = field(default_factory=list)
    """Size rules in order; a job takes the first whose range holds its total GPUs."""
    overflow: Sequence[str] = field(default_factory=list)
    """Items ``"from->to"``: jobs of zone ``from`` may also use the nodes of zone ``to``, at any time."""

    def __post_init__(self) -> None:
        known = list(dict.fromkeys(rule.zone for rule in self.zones))
        for i, item in enumerate(self.overflow):
            try:
                parse_overflow(item, known)
            except ValueError as exc:
                raise ValueError(f"overflow[{i}]: {exc}") from None


class SizeZones(FilterPlugin):
    """Allow the job's zone, its overflow zones, and zones no rule names."""

    name = "size-zones"
    reads_nodes_only = True  # the job and the node table (ctx.state.nodes); no time, no draws
    Args = SizeZonesArgs

    def __init__(self, args: SizeZonesArgs | None = None) -> None:
        super().__init__(args)
        self.settings: SizeZonesArgs = args or SizeZonesArgs()
        self.named = tuple(dict.fromkeys(rule.zone for rule in self.settings.zones))
        known = list(self.named)
        self.spills: dict[str, list[str]] = {}
        for item in self.settings.overflow:
            source, target = parse_overflow(item, known)
            self.spills.setdefault(source, []).append(target)
        self._cached: tuple[NodeTable, dict[str | None, BoolArray]] | None = None

    def rule_of(self, job: Job) -> ZoneRule | None:
        """The first rule whose range holds the job's total GPUs, or None."""
        return next((r for r in self.settings.zones if r.min_gpus <= job.gpus <= r.max_gpus), None)

    def zones_for(self, rule: ZoneRule | None) -> list[str]:
        """The named zones a job of ``rule`` may use (its own, then its overflow)."""
        return [] if rule is None else [rule.zone, *self.spills.get(rule.zone, [])]

    def filter(self, job: Job, ctx: CycleContext) -> FilterResult:
        rule = self.rule_of(job)
        mask = self._mask(ctx.state.nodes, rule)
        nodes = ctx.state.nodes
        open_zones = [z for z in nodes.zones if z not in self.named]
        opened = f"zones no rule names: {', '.join(open_zones) or 'none'}"
        if rule is None:
            reason = f"size-zones: a {job.gpus:g}-GPU job matches no size rule, so it may use only {opened}"
        else:
            reason = (
                f"size-zones: a {job.gpus:g}-GPU job belongs to zone {rule.zone} ({rule.describe()}) and "
                f"may use zones {', '.join(self.zones_for(rule))} and {opened}"
            )
        constraints = fit.describe_static(job)
        tail = "no node is in those zones" if constraints == "any node" else f"none matches {constraints}"
        return FilterResult(mask, f"{reason}; {tail}")

    def _mask(self, nodes: NodeTable, rule: ZoneRule | None) -> BoolArray:
        """Nodes a job of ``rule`` may use, kept per zone for the node table last seen."""
        if self._cached is None or self._cached[0] is not nodes:
            self._cached = (nodes, {})
        masks = self._cached[1]
        key = None if rule is None else rule.zone
        if key not in masks:
            allowed = set(self.zones_for(rule)) | {z for z in nodes.zones if z not in self.named}
            mask = np.isin(nodes.zone_index, [i for i, zone in enumerate(nodes.zones) if zone in allowed])
            mask.setflags(write=False)
            masks[key] = mask
        return masks[key]
