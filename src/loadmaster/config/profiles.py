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
    built: dict[str, Profile] = {}
    for name, entry in spec.profiles.items():
        plugins = [
            PluginSpec(p, {}) if isinstance(p, str) else PluginSpec(p.name, p.args, p.weight)
            for p in entry.plugins
        ]
        try:
            built[name] = build_profile(name, entry.actions, plugins, doc.source)
        except ConfigError as exc:
            raise doc.error(_path_of(exc.field), exc.detail) from None
    return built


def _path_of(field: str) -> list[str | int]:
    """``profiles.x.plugins[2].args.strict`` back into a path, to find its line."""
    path: list[str | int] = []
    for part in field.replace("]", "").split("."):
        name, _, index = part.partition("[")
        path.append(name)
        if index:
            path.append(int(index))
    return path


def select_profiles(available: dict[str, Profile], names: list[str], source: str) -> list[Profile]:
    """The profiles named on the command line, in that order; unknown names are an error."""
    missing = [n for n in names if n not in available]
    if missing:
        raise ConfigError(
            source, "profiles", f"unknown profile {missing[0]!r}; available: {', '.join(available)}"
        )
    return [available[n] for n in names]
