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
(default: the namespace). The ConfigMap is read when the scheduler starts.
"""

from __future__ import annotations

import copy
import json
from collections.abc import Mapping
from typing import Any

import yaml
from kubernetes import client
from kubernetes.client.exceptions import ApiException

from loadmaster.config import BUILTIN_PROFILES, load_profiles
from loadmaster.config.profiles import profiles_from_document
from loadmaster.config.yamlfile import YamlDocument, find_document
from loadmaster.errors import ConfigError
from loadmaster.kube import translate as tr
from loadmaster.kube.api import REQUEST_TIMEOUT_S
from loadmaster.scheduling import Profile

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
    found: tr.Obj | None = None
    if configmap is not None:
        namespace, _, name = configmap.rpartition("/")
        core = client.CoreV1Api(api)
        try:
            response = core.read_namespaced_config_map(
                name, namespace or "default", _preload_content=False, _request_timeout=REQUEST_TIMEOUT_S
            )
            found = json.loads(response.data)  # type: ignore[arg-type]  # raw answer
        except ApiException as exc:
            if exc.status != 404:
                raise tr.KubeError(f"cannot read ConfigMap {configmap}: {exc.status} {exc.reason}") from None
    args = plugin_args_from(found) if found is not None else {}
    if not args:
        profiles = load_profiles(profiles_file)
        if profile not in profiles:
            raise ConfigError(
                profiles_file, "--profile", f"no profile {profile!r}; have {', '.join(profiles)}"
            )
        return profiles[profile]
    return profile_with(profile, args, profiles_file, f"ConfigMap {configmap}")
