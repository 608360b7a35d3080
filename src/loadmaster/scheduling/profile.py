"""Profiles: the actions and plugins of one pool's scheduler, validated when built.

A profile arrives as plain data (from YAML, say); :func:`build_profile` checks
every name, argument and combination and raises :class:`ConfigError` naming
the field, the value and what is allowed.
"""

from __future__ import annotations

import dataclasses
import itertools
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from functools import cache, cached_property
from typing import Any

import pydantic

from loadmaster.errors import ConfigError
from loadmaster.model import Job
from loadmaster.scheduling.framework import (
    AdmitPlugin,
    FilterPlugin,
    OrderPlugin,
    PermitPlugin,
    PlaceGangPlugin,
    Plugin,
    ReservePlugin,
    ScorePlugin,
    VictimPlugin,
)
from loadmaster.scheduling.registry import ACTIONS, INCOMPATIBLE, PLUGINS


@dataclass(frozen=True)
class Profile:
    """A validated profile: its actions in order and its plugin instances in order."""

    name: str
    actions: tuple[str, ...]
    plugins: tuple[Plugin, ...]
    weights: Mapping[str, float]

    def lane(self, job: Job) -> str:
        """The queue ``job`` competes in: its size lane where a plugin splits queues, else its queue."""
        for plugin in self.order:
            if plugin.splits_queues:
                lane = plugin.lane(job)
                if lane is not None:
                    return lane
        return job.queue

    def of(self, kind: type[Plugin]) -> list[Any]:
        """The profile's plugins that implement extension point ``kind``, in profile order."""
        return [p for p in self.plugins if isinstance(p, kind)]

    @cached_property
    def order(self) -> list[OrderPlugin]:
        return self.of(OrderPlugin)

    @cached_property
    def admit(self) -> list[AdmitPlugin]:
        return self.of(AdmitPlugin)

    @cached_property
    def filters(self) -> list[FilterPlugin]:
        return self.of(FilterPlugin)

    @cached_property
    def scores(self) -> list[tuple[ScorePlugin, float]]:
        return [(p, self.weights.get(p.name, 1.0)) for p in self.of(ScorePlugin)]

    @cached_property
    def place_gang(self) -> PlaceGangPlugin | None:
        found = self.of(PlaceGangPlugin)
        return found[0] if found else None

    @cached_property
    def permit(self) -> list[PermitPlugin]:
        return self.of(PermitPlugin)

    @cached_property
    def reserve(self) -> list[ReservePlugin]:
        return self.of(ReservePlugin)

    @cached_property
    def victims(self) -> list[VictimPlugin]:
        return self.of(VictimPlugin)


@dataclass(frozen=True, slots=True)
class PluginSpec:
    """A plugin as written in a profile: name, arguments and score weight."""

    name: str
    args: Mapping[str, object]
    weight: float = 1.0


def build_profile(
    name: str, actions: Sequence[str], plugins: Sequence[PluginSpec], source: str = "<profile>"
) -> Profile:
    """Validate and instantiate a profile; errors name ``source`` and the field."""
    where = f"profiles.{name}"
    _check_actions(actions, source, where)
    built: list[Plugin] = []
    seen: set[str] = set()
    for i, spec in enumerate(plugins):
        field = f"{where}.plugins[{i}]"
        if spec.name in seen:
            raise ConfigError(source, f"{field}.name", f"plugin {spec.name!r} is listed twice")
        seen.add(spec.name)
        built.append(_instantiate(spec, source, field))
    _check_combinations(built, source, where)
    _check_actions_have_plugins(actions, built, source, where)
    weights = {spec.name: spec.weight for spec in plugins}
    return Profile(name=name, actions=tuple(actions), plugins=tuple(built), weights=weights)


def with_plugins(profile: Profile, specs: Sequence[PluginSpec], source: str = "<added plugins>") -> Profile:
    """``profile`` with the plugins of ``specs`` it does not list yet appended (validated as in a profile).

    A plugin the profile lists already keeps its own arguments and weight.
    """
    have = {p.name for p in profile.plugins}
    added = [spec for spec in specs if spec.name not in have]
    if not added:
        return profile
    where = f"profiles.{profile.name}"
    plugins = [
        *profile.plugins,
        *(_instantiate(s, source, f"{where}.plugins[+{i}]") for i, s in enumerate(added)),
    ]
    _check_combinations(plugins, source, where)
    weights = {**{s.name: s.weight for s in added}, **profile.weights}
    return Profile(name=profile.name, actions=profile.actions, plugins=tuple(plugins), weights=weights)


def _check_actions(actions: Sequence[str], source: str, where: str) -> None:
    for i, action in enumerate(actions):
        if action not in ACTIONS:
            raise ConfigError(
                source,
                f"{where}.actions[{i}]",
                f"unknown action {action!r}; allowed: {', '.join(ACTIONS)}",
            )
    if "allocate" not in actions:
        raise ConfigError(source, f"{where}.actions", "a profile needs the 'allocate' action")
    if len(set(actions)) != len(actions):
        raise ConfigError(source, f"{where}.actions", "an action is listed twice")
    order = [a for a in ACTIONS if a in actions]
    if list(actions) != order:
        raise ConfigError(
            source,
            f"{where}.actions",
            f"actions must run in this order: {', '.join(order)}; got {list(actions)}",
        )


def _instantiate(spec: PluginSpec, source: str, field: str) -> Plugin:
    cls = PLUGINS.get(spec.name)
    if cls is None:
        allowed = ", ".join(sorted(PLUGINS))
        raise ConfigError(source, f"{field}.name", f"unknown plugin {spec.name!r}; allowed: {allowed}")
    if spec.weight <= 0:
        raise ConfigError(source, f"{field}.weight", f"must be > 0, got {spec.weight}")
    allowed_args = ", ".join(f.name for f in dataclasses.fields(cls.Args)) or "none"
    unknown = sorted(set(spec.args) - {f.name for f in dataclasses.fields(cls.Args)})
    if unknown:
        raise ConfigError(
            source,
            f"{field}.args.{unknown[0]}",
            f"unknown argument; arguments of {spec.name}: {allowed_args}",
        )
    try:
        args: object = _args_adapter(cls.Args).validate_python(dict(spec.args))
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        loc = ".".join(str(part) for part in first["loc"])
        raise ConfigError(
            source,
            f"{field}.args.{loc}" if loc else f"{field}.args",
            f"{first['msg']} (got {first.get('input')!r}); arguments of {spec.name}: {allowed_args}",
        ) from None
    return cls(args)


@cache
def _args_adapter(args_type: type) -> pydantic.TypeAdapter[Any]:
    """The validator of one plugin's arguments, built once per class.

    Why: building a TypeAdapter generates its schema (about a millisecond); the built-in profiles
    hold some fifty plugins of a few classes, and each process loads them before it simulates.
    """
    return pydantic.TypeAdapter(args_type)


_NEEDS: tuple[tuple[type[Plugin], str, str], ...] = (
    (ReservePlugin, "backfill", "a reserve plugin (backfill) only acts through the 'backfill' action"),
    (AdmitPlugin, "admit", "an admit plugin is only asked when the profile lists the 'admit' action"),
)


def _check_actions_have_plugins(
    actions: Sequence[str], plugins: Sequence[Plugin], source: str, where: str
) -> None:
    # A victim plugin without 'preempt' is allowed: quota, say, is then used without reclaim.
    if "preempt" in actions and not any(isinstance(p, VictimPlugin) for p in plugins):
        raise ConfigError(
            source, f"{where}.plugins", "the 'preempt' action needs a victim plugin; none listed"
        )
    for kind, action, why in _NEEDS:
        have = [p.name for p in plugins if isinstance(p, kind)]
        if have and action not in actions:
            raise ConfigError(source, f"{where}.actions", f"add '{action}': {why} ({', '.join(have)})")
        if action == "backfill" and action in actions and not have:
            raise ConfigError(
                source,
                f"{where}.plugins",
                f"the '{action}' action needs a {kind.__name__} plugin; none listed",
            )
    if sum(isinstance(p, ReservePlugin) for p in plugins) > 1:
        raise ConfigError(source, f"{where}.plugins", "at most one reserve plugin per profile")


def _check_combinations(plugins: Sequence[Plugin], source: str, where: str) -> None:
    names = {p.name for p in plugins}
    for combo, reason in INCOMPATIBLE:
        if combo <= names:
            pair = " + ".join(sorted(combo))
            raise ConfigError(source, f"{where}.plugins", f"{pair} cannot be combined: {reason}")
    if sum(isinstance(p, PlaceGangPlugin) for p in plugins) > 1:
        raise ConfigError(source, f"{where}.plugins", "at most one place_gang plugin per profile")
    orders = [p for p in plugins if isinstance(p, OrderPlugin)]
    for earlier, later in itertools.pairwise(orders):
        if earlier.follows_submission_order and not later.follows_submission_order:
            raise ConfigError(
                source,
                f"{where}.plugins",
                f"{later.name} is listed after {earlier.name}, whose submission order already "
                f"decides every tie; list {later.name} first",
            )
