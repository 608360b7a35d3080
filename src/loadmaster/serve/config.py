"""``serve.yaml``: how ``loadmaster serve --config`` authenticates, maps identities and keeps its state.

Every section is validated on load; an error names the file, the line, the
field and what is allowed. Example (docs/dashboard.md explains each field)::

    auth:
      tokens_file: /etc/loadmaster/tokens.yaml      # hashed bearer tokens
      proxy:                                        # oauth2-proxy / Grafana auth proxy
        user_header: X-Forwarded-User
        groups_header: X-Forwarded-Groups
        trusted: [10.0.0.0/8, 127.0.0.1/32]
      operators: {groups: [gpu-admins], users: []}
      identities:                                    # identity -> scheduler user and namespaces
        ann@example.org: {user: ann, namespaces: [team-a]}
      groups:
        team-a: {namespaces: [team-a]}
    state:
      path: /var/lib/loadmaster/serve.sqlite
    cluster: {kubeconfig: null, name: prod}        # live mode: in-cluster service account
    prometheus: {url: "http://prometheus:9090", step_s: 15}
    reclaim:
      interval_s: 60
      policies:
        - {pool: interactive, idle_after_s: 1800, grace_s: 3600, action: evict, dry_run: true,
           exempt_namespaces: [ops]}
"""

from __future__ import annotations

import ipaddress
from pathlib import Path
from typing import Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loadmaster.config.yamlfile import read_yaml, validate


class _Strict(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)


class ProxyConfig(_Strict):
    """Reverse-proxy authentication: the proxy has authenticated the user and says who in headers."""

    user_header: str = "X-Forwarded-User"
    """oauth2-proxy's header (``--pass-user-headers``); Grafana's auth proxy sends X-WEBAUTH-USER."""
    groups_header: str | None = "X-Forwarded-Groups"
    """Comma-separated groups (oauth2-proxy); None: groups come only from the identities mapping."""
    trusted: list[str] = Field(min_length=1)
    """Addresses or networks of the proxies (CIDR). Headers from any other address are ignored: anyone
    could send them, so only a request that came through the proxy may name its user this way."""

    @field_validator("trusted")
    @classmethod
    def _networks(cls, value: list[str]) -> list[str]:
        for item in value:
            try:
                ipaddress.ip_network(item, strict=False)
            except ValueError as exc:
                raise ValueError(f"{item!r} is not an address or CIDR network ({exc})") from None
        return value


class Operators(_Strict):
    """Who has the operator role: these identities and members of these groups."""

    users: list[str] = Field(default_factory=list)
    groups: list[str] = Field(default_factory=list)


class IdentityRule(_Strict):
    """What one identity (a token's name, or the proxy's user) is in the cluster."""

    user: str | None = None
    """The scheduler's user name (the job owner label); default: the identity itself."""
    groups: list[str] = Field(default_factory=list)
    """Groups added to those the proxy or token says."""
    namespaces: list[str] = Field(default_factory=list)
    """Kubernetes namespaces whose jobs this identity sees in full (besides its own jobs)."""


class GroupRule(_Strict):
    """What membership of a group grants."""

    namespaces: list[str] = Field(default_factory=list)


class AuthConfig(_Strict):
    """Token file and/or reverse proxy, and the identity mapping."""

    tokens_file: Path | None = None
    proxy: ProxyConfig | None = None
    operators: Operators = Field(default_factory=Operators)
    identities: dict[str, IdentityRule] = Field(default_factory=dict)
    groups: dict[str, GroupRule] = Field(default_factory=dict)


class StateConfig(_Strict):
    """Where layouts, settings and the reclaim ledger are kept."""

    path: Path = Path("out/serve-state.sqlite")
    """An SQLite file; created with its schema on first start."""


class ClusterSource(_Strict):
    """The Kubernetes cluster to show (live mode): read through the informers of ``kube run``."""

    kubeconfig: Path | None = None
    """A kubeconfig file; absent: the in-cluster service account (serve running as a pod)."""
    name: str = "live"
    """The name the dashboard shows."""


class PrometheusSource(_Strict):
    """Where the GPU telemetry is (live mode): a Prometheus scraping dcgm-exporter or the agent."""

    url: str = Field(pattern=r"^https?://")
    step_s: float = Field(default=15.0, gt=0)
    """The scrape interval: the step of job telemetry and findings."""
    history_s: float = Field(default=6 * 3600.0, gt=0)
    """How far back the time scrubber reaches."""


class PolicyConfig(_Strict):
    """One pool's reclaim policy (``loadmaster.scheduling.reclaim.ReclaimPolicy``)."""

    pool: str | None = None
    """The pool it applies to; absent: every pool without a policy of its own."""
    idle_after_s: float = Field(default=1800.0, gt=0)
    grace_s: float = Field(default=3600.0, ge=0)
    action: Literal["evict", "mark"] = "evict"
    dry_run: bool = True
    """Decide and record only (the default: turn a policy on knowingly)."""
    exempt_namespaces: list[str] = Field(default_factory=list)
    exempt_labels: dict[str, str] = Field(default_factory=dict)
    first_idle_after_s: float = Field(default=900.0, gt=0)
    """Idle time before an interactive session's owner is told (sessions are reclaimed first)."""


class ReclaimConfig(_Strict):
    """The reclaim loop: how often it looks, and the policies."""

    interval_s: float = Field(default=60.0, gt=0)
    policies: list[PolicyConfig] = Field(min_length=1)


class ServeConfig(_Strict):
    """The whole ``serve.yaml``."""

    auth: AuthConfig | None = None
    """Absent: the demo's generated tokens (``--demo`` only)."""
    state: StateConfig = Field(default_factory=StateConfig)
    cluster: ClusterSource | None = None
    """Live mode: the cluster to show (``serve --config`` without ``--demo``)."""
    prometheus: PrometheusSource | None = None
    """Live mode: the telemetry."""
    reclaim: ReclaimConfig | None = None
    """The reclaim loop (absent: none runs); its decisions go to the state's ledger."""


def load_serve_config(path: Path) -> ServeConfig:
    """Read and validate ``serve.yaml``; a relative ``tokens_file`` or state path is taken from its folder."""
    config = validate(ServeConfig, read_yaml(path))
    base = path.parent
    auth = config.auth
    if auth is not None and auth.tokens_file is not None and not auth.tokens_file.is_absolute():
        auth = auth.model_copy(update={"tokens_file": base / auth.tokens_file})
    state = config.state
    if not state.path.is_absolute():
        state = state.model_copy(update={"path": base / state.path})
    cluster = config.cluster
    if cluster is not None and cluster.kubeconfig is not None and not cluster.kubeconfig.is_absolute():
        cluster = cluster.model_copy(update={"kubeconfig": base / cluster.kubeconfig})
    return config.model_copy(update={"auth": auth, "state": state, "cluster": cluster})
