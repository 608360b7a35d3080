"""Queue and quota definitions from a ConfigMap, merged into the running profile.

Operators change quotas more often than policies, and a team lead may be
allowed to edit quotas but not the scheduler's profile. So queues and quotas
live in their own ConfigMap (default ``loadmaster/loadmaster-queues``), key
``plugins.yaml``: a mapping from a plugin of the running profile to the
arguments it should run with, replacing the profile's arguments for it::

    quota:
      unknown_group: allow
      orgs:
        research:
          groups:
            team-a: {nominal: 16, borrowing_limit: 8}
            team-b: {nominal: 8}
    multi-queue:
      queues: [...]          # that plugin's own arguments

The arguments are validated exactly as in a profiles file; an error names
the ConfigMap, the plugin and the field. Pods choose their queue with the
label ``loadmaster.io/queue`` and their quota group with ``loadmaster.io/group``
(default: the namespace). The ConfigMap is read when the scheduler starts and
re-read while it runs (:class:`QueuesReloader`): a change takes effect at the
next cycle; a change that does not validate is logged and the scheduler goes
on with the configuration it has.
"""

from __future__ import annotations

import copy
import json
import logging
import time
from collections.abc import Callable, Mapping, Sequence
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from loadmaster.config import BUILTIN_PROFILES, load_profiles
from loadmaster.config.profiles import profiles_from_document
from loadmaster.config.yamlfile import YamlDocument, find_document
from loadmaster.errors import ConfigError
from loadmaster.kube import translate as tr
from loadmaster.kube.api import REQUEST_TIMEOUT_S, ApiFailure
from loadmaster.scheduling import Profile

log = logging.getLogger(__name__)

QUEUES_KEY = "plugins.yaml"
DEFAULT_CONFIGMAP = "loadmaster/loadmaster-queues"


def plugin_args_from(configmap: tr.Obj) -> dict[str, dict[str, Any]]:
    """The plugin arguments a queues ConfigMap holds (empty when it has no ``plugins.yaml``)."""
    where = f"ConfigMap {tr.key_of(configmap)}"
    text = (configmap.get("data") or {}).get(QUEUES_KEY)
    if text is None:
        return {}
    try:
        data = yaml.safe_load(text)
    except yaml.YAMLError as exc:
        raise ConfigError(where, QUEUES_KEY, f"is not YAML: {exc}") from None
    if data is None:
        return {}
    if not isinstance(data, dict) or not all(isinstance(v, dict) for v in data.values()):
        raise ConfigError(where, QUEUES_KEY, "must map plugin names to their arguments (a mapping each)")
    return {str(k): dict(v) for k, v in data.items()}


def profile_with(
    profile: str, plugin_args: Mapping[str, Mapping[str, Any]], profiles_file: str = BUILTIN_PROFILES,
    source: str = "<queues ConfigMap>",
) -> Profile:  # fmt: skip
    """Profile ``profile`` of ``profiles_file`` with each named plugin's arguments replaced."""
    doc = find_document("profiles", profiles_file, (BUILTIN_PROFILES,))
    data = copy.deepcopy(doc.data)
    entry = (data.get("profiles") or {}).get(profile) if isinstance(data, dict) else None
    if entry is None:
        raise ConfigError(doc.source, "profiles", f"no profile {profile!r}")
    plugins = entry.get("plugins") or []
    names = [p if isinstance(p, str) else p.get("name") for p in plugins]
    for name, args in plugin_args.items():
        if name not in names:
            raise ConfigError(
                source, name, f"profile {profile!r} has no such plugin; it has {', '.join(names)}"
            )
        i = names.index(name)
        old = plugins[i] if isinstance(plugins[i], dict) else {"name": name}
        plugins[i] = {**old, "args": dict(args)}
    built = profiles_from_document(YamlDocument(f"{doc.source} + {source}", data, None))
    return built[profile]


def load_profile(
    api: client.ApiClient, profile: str, profiles_file: str = BUILTIN_PROFILES,
    configmap: str | None = DEFAULT_CONFIGMAP,
) -> Profile:  # fmt: skip
    """Profile ``profile`` with the queues ConfigMap ``namespace/name`` merged in (absent: as written)."""
    found = read_configmap(api, configmap) if configmap is not None else None
    return profile_from(found, profile, profiles_file, configmap)


def read_configmap(api: client.ApiClient, configmap: str) -> tr.Obj | None:
    """The ConfigMap ``namespace/name`` as the API returns it (None when there is none)."""
    namespace, _, name = configmap.rpartition("/")
    core = client.CoreV1Api(api)
    try:
        response = core.read_namespaced_config_map(
            name, namespace or "default", _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
        )
    except ApiException as exc:
        if exc.status != 404:
            raise tr.KubeError(f"cannot read ConfigMap {configmap}: {exc.status} {exc.reason}") from None
        return None
    found: tr.Obj = json.loads(response.data)  # type: ignore[arg-type]  # raw answer
    return found


def profile_from(found: tr.Obj | None, profile: str, profiles_file: str, configmap: str | None) -> Profile:
    """Profile ``profile`` of ``profiles_file`` with the queues ConfigMap ``found`` (None: none) merged in."""
    args = plugin_args_from(found) if found is not None else {}
    if not args:
        profiles = load_profiles(profiles_file)
        if profile not in profiles:
            raise ConfigError(
                profiles_file, "--profile", f"no profile {profile!r}; have {', '.join(profiles)}"
            )
        return profiles[profile]
    return profile_with(profile, args, profiles_file, f"ConfigMap {configmap}")


class QueuesReloader:
    """Reads the queues ConfigMap at start, then again every ``every_s``: a changed one gives new profiles.

    A change is seen by its ``resourceVersion`` (a ConfigMap created or
    deleted counts too). At start a bad ConfigMap is an error, as in
    :func:`load_profile`; later, a bad edit is logged with the reason and
    the running configuration stays, so a typo in a quota cannot stop the
    scheduler. ``reloads`` and ``failures`` count what happened.
    """

    def __init__(
        self,
        api: client.ApiClient,
        profiles: Sequence[str],
        profiles_file: str = BUILTIN_PROFILES,
        configmap: str = DEFAULT_CONFIGMAP,
        *,
        every_s: float = 10.0,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self.api, self.profiles, self.profiles_file, self.configmap = (
            api,
            tuple(profiles),
            profiles_file,
            configmap,
        )
        self.every_s, self.clock = every_s, clock
        self.version: str | None = None
        """resourceVersion of the ConfigMap in force (None: there was none)."""
        self.reloads = 0
        self.failures = 0
        self._next_s = 0.0

    def load(self) -> dict[str, Profile]:
        """Each profile with the ConfigMap as it is now, by name (raises on a bad one)."""
        found = read_configmap(self.api, self.configmap)
        built = self._build(found)
        self.version = _version(found)
        self._next_s = self.clock() + self.every_s
        return built

    def poll(self) -> dict[str, Profile] | None:
        """New profiles when the ConfigMap changed since the last read and validates; else None."""
        now = self.clock()
        if now < self._next_s:
            return None
        self._next_s = now + self.every_s
        try:
            found = read_configmap(self.api, self.configmap)
        except (tr.KubeError, *ApiFailure) as exc:
            log.warning(
                "cannot re-read the queues ConfigMap", extra={"configmap": self.configmap, "error": str(exc)}
            )
            return None
        version = _version(found)
        if version == self.version:
            return None
        self.version = version  # a bad version is reported once, not every poll
        try:
            built = self._build(found)
        except ConfigError as exc:
            self.failures += 1
            log.error(
                "queues ConfigMap changed but is invalid; keeping the running configuration",
                extra={"configmap": self.configmap, "resource_version": version, "error": str(exc)},
            )
            return None
        self.reloads += 1
        log.info(
            "queues ConfigMap reloaded", extra={"configmap": self.configmap, "resource_version": version}
        )
        return built

    def _build(self, found: tr.Obj | None) -> dict[str, Profile]:
        return {p: profile_from(found, p, self.profiles_file, self.configmap) for p in self.profiles}


def _version(found: tr.Obj | None) -> str | None:
    return None if found is None else str(found.get("metadata", {}).get("resourceVersion"))
