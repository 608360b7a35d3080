"""Scheduling profiles in YAML: one per pool or per experiment, checked when loaded.

```yaml
profiles:
  binpack:
    description: strict FIFO, gang, used-host-first packing
    actions: [allocate]
    plugins:
      - {name: fifo, args: {strict: true}}
      - gang
      - binpack
```

A plugin entry is its name, or a mapping with ``name``, optional ``args``
and optional ``weight`` (for score plugins).
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

from pydantic import BaseModel, ConfigDict, Field

from loadmaster.config.yamlfile import YamlDocument, find_document, validate
from loadmaster.errors import ConfigError
from loadmaster.scheduling import PluginSpec, Profile, build_profile


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class PluginEntry(_Strict):
    """A plugin with its arguments and score weight."""

    name: str
    args: dict[str, object] = Field(default_factory=dict)
    weight: float = 1.0


class ProfileEntry(_Strict):
    """One profile: the actions in order and the plugins in order."""

    description: str = ""
    actions: list[str] = Field(default_factory=lambda: ["admit", "allocate"])
    plugins: list[PluginEntry | str] = Field(min_length=1)


class ProfilesFile(_Strict):
    """A file of named profiles."""

    profiles: dict[str, ProfileEntry] = Field(min_length=1)


BUILTIN_PROFILES = "builtin"
"""Name of the profile set that ships with loadmaster."""


def load_profiles(name_or_path: str = BUILTIN_PROFILES) -> dict[str, Profile]:
    """All profiles of a file (or of the built-in set), validated, by name."""
    doc = find_document("profiles", name_or_path, (BUILTIN_PROFILES,))
    return profiles_from_document(doc)


def profiles_from_document(doc: YamlDocument) -> dict[str, Profile]:
    """Validate every profile of a parsed profiles file."""
    spec = validate(ProfilesFile, doc)
    return {name: _build(doc, name, entry, {}) for name, entry in spec.profiles.items()}


def load_profile_with_args(
    name: str,
    plugin_args: Mapping[str, Mapping[str, object]],
    name_or_path: str = BUILTIN_PROFILES,
) -> Profile:
    """Profile ``name`` of a file (or of the built-in set) with ``plugin_args`` merged over its plugins' own.

    ``plugin_args`` maps a plugin of the profile to the arguments that change
    (``{"backfill": {"interval_s": 30}}``). The profile is then validated and
    built as if the file said so, rather than changed after it is built, so
    that every view of it agrees: a plugin's settings and what it hands the
    scheduler come from the same arguments, and a bad value names its field.
    """
    doc = find_document("profiles", name_or_path, (BUILTIN_PROFILES,))
    spec = validate(ProfilesFile, doc)
    entry = spec.profiles.get(name)
    if entry is None:
        raise ConfigError(
            doc.source, "profiles", f"unknown profile {name!r}; available: {', '.join(spec.profiles)}"
        )
    listed = {p if isinstance(p, str) else p.name for p in entry.plugins}
    for plugin in plugin_args:
        if plugin not in listed:
            raise doc.error(["profiles", name, "plugins"], f"profile {name!r} has no plugin {plugin!r}")
    return _build(doc, name, entry, plugin_args)


def _build(
    doc: YamlDocument, name: str, entry: ProfileEntry, changes: Mapping[str, Mapping[str, object]]
) -> Profile:
    """Profile ``name`` of ``doc``, ``changes`` merged into its plugins' arguments; errors name their line."""
    plugins = [
        PluginSpec(p, dict(changes.get(p, {})))
        if isinstance(p, str)
        else PluginSpec(p.name, {**p.args, **changes.get(p.name, {})}, p.weight)
        for p in entry.plugins
    ]
    try:
        return build_profile(name, entry.actions, plugins, doc.source)
    except ConfigError as exc:
        raise doc.error(_path_of(exc.field), exc.detail) from None


def _path_of(field: str) -> list[str | int]:
    """``profiles.x.plugins[2].args.strict`` back into a path, to find its line."""
    path: list[str | int] = []
    for part in field.replace("]", "").split("."):
        name, _, index = part.partition("[")
        path.append(name)
        if index:
            path.append(int(index))
    return path


def load_selected(names: Sequence[str], source: str, name_or_path: str = BUILTIN_PROFILES) -> list[Profile]:
    """The profiles ``names`` of a file (or of the built-in set), in that order; unknown names are an error.

    A user's file is validated whole, every profile built, as ``loadmaster profiles`` does: a
    mistake in a profile not chosen today is still reported now. Of the built-in set, which the
    tests build whole, only the named profiles are built: building all fourteen imports every
    plugin module and makes each plugin's argument validator, about a tenth of a second that a
    ``simulate`` of one or two profiles would otherwise spend before its first cycle.
    """
    if name_or_path != BUILTIN_PROFILES:
        return select_profiles(load_profiles(name_or_path), names, source)
    doc = find_document("profiles", name_or_path, (BUILTIN_PROFILES,))
    spec = validate(ProfilesFile, doc)
    _check_known(names, spec.profiles, source)
    built = {name: _build(doc, name, spec.profiles[name], {}) for name in dict.fromkeys(names)}
    return [built[name] for name in names]


def select_profiles(available: Mapping[str, Profile], names: Sequence[str], source: str) -> list[Profile]:
    """The profiles named on the command line, in that order; unknown names are an error."""
    _check_known(names, available, source)
    return [available[n] for n in names]


def _check_known(names: Sequence[str], available: Collection[str], source: str) -> None:
    """A ConfigError naming the first of ``names`` not ``available``, with every available name."""
    missing = [n for n in names if n not in available]
    if missing:
        raise ConfigError(
            source, "profiles", f"unknown profile {missing[0]!r}; available: {', '.join(available)}"
        )
