"""Who a request is, for a real deployment: hashed bearer tokens, a trusted reverse proxy, and the
mapping from identities to users, groups, namespaces and the operator role.

Two ways in, tried in order:

1. **Reverse proxy** (oauth2-proxy, Grafana's auth proxy): the proxy has
   authenticated the user and passes the user (and groups) in headers. The
   headers are believed only from the configured proxy addresses; from any
   other address they are ignored (anyone can send a header), so such a
   request must bring a token like any other.
2. **Bearer token**: ``Authorization: Bearer <token>``; the tokens file keeps
   only each token's SHA-256 (``printf %s "$TOKEN" | sha256sum``), so a leaked
   file grants nothing. Tokens are long random strings, so a plain hash (as
   GitHub and Kubernetes store API tokens) is enough; no salt is needed.

The identity then maps (``auth.identities`` and ``auth.groups`` in
serve.yaml) to the scheduler's user name, groups and the namespaces whose
jobs it sees in full; members of ``auth.operators`` are operators. No valid
identity: 401; a valid one without the right: 403 (the routes check).
"""

from __future__ import annotations

import hashlib
import hmac
import ipaddress
from collections.abc import Mapping
from dataclasses import dataclass
from pathlib import Path

from pydantic import BaseModel, ConfigDict, Field, field_validator

from loadmaster.config.yamlfile import read_yaml, validate
from loadmaster.errors import ConfigError
from loadmaster.serve.auth import AuthError, Principal, Role
from loadmaster.serve.config import AuthConfig, ProxyConfig


def hash_token(token: str) -> str:
    """The hex SHA-256 of a token, as the tokens file stores it."""
    return hashlib.sha256(token.encode()).hexdigest()


class _TokenEntry(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    name: str = Field(min_length=1)
    """The identity the token stands for."""
    sha256: str = Field(pattern=r"^[0-9a-f]{64}$")
    """The token's SHA-256, 64 lower-case hex digits, in quotes (YAML reads some digests as numbers)."""
    groups: list[str] = Field(default_factory=list)

    @field_validator("sha256", mode="before")
    @classmethod
    def _quoted(cls, value: object) -> object:
        if not isinstance(value, str):
            raise ValueError("write the hash in quotes: YAML read it as a number")
        return value


class _TokensFile(BaseModel):
    model_config = ConfigDict(extra="forbid", frozen=True)

    tokens: list[_TokenEntry]


@dataclass(frozen=True)
class Identity:
    """Who authenticated, before mapping: a name and the groups the proxy or token file gave."""

    name: str
    groups: frozenset[str]


class HashedTokens:
    """The tokens file: SHA-256 of each token -> identity. ``load`` validates it (file:line: field)."""

    def __init__(self, entries: Mapping[str, Identity]) -> None:
        self._by_hash = dict(entries)

    @classmethod
    def load(cls, path: Path) -> HashedTokens:
        parsed = validate(_TokensFile, read_yaml(path))
        entries: dict[str, Identity] = {}
        for i, entry in enumerate(parsed.tokens):
            if entry.sha256 in entries:
                raise ConfigError(str(path), f"tokens[{i}].sha256", "the same token hash appears twice")
            entries[entry.sha256] = Identity(entry.name, frozenset(entry.groups))
        return cls(entries)

    def identity(self, token: str) -> Identity | None:
        """The identity of a token, or None."""
        digest = hash_token(token)
        for known, who in self._by_hash.items():
            if hmac.compare_digest(known, digest):
                return who
        return None


class ProxyHeaders:
    """The identity a trusted reverse proxy passes in headers."""

    def __init__(self, config: ProxyConfig) -> None:
        self.config = config
        self._trusted = [ipaddress.ip_network(n, strict=False) for n in config.trusted]

    def trusts(self, client: str | None) -> bool:
        """Whether a request from ``client`` (an IP address) came from a configured proxy."""
        if client is None:
            return False
        try:
            address = ipaddress.ip_address(client)
        except ValueError:
            return False
        return any(address in network for network in self._trusted)

    def identity(self, headers: Mapping[str, str], client: str | None) -> Identity | None:
        """The user and groups in the headers, when they come from a trusted proxy (else None)."""
        if not self.trusts(client):
            return None
        user = _header(headers, self.config.user_header)
        if not user:
            return None
        groups: set[str] = set()
        if self.config.groups_header is not None:
            raw = _header(headers, self.config.groups_header) or ""
            groups = {g.strip() for g in raw.split(",") if g.strip()}
        return Identity(user.strip(), frozenset(groups))


def _header(headers: Mapping[str, str], name: str) -> str | None:
    lowered = name.lower()
    for key, value in headers.items():
        if key.lower() == lowered:
            return value
    return None


class IdentityMap:
    """Identity -> :class:`Principal`: user name, groups, namespaces, role (serve.yaml ``auth``)."""

    def __init__(self, config: AuthConfig) -> None:
        self.config = config

    def principal(self, who: Identity) -> Principal:
        rule = self.config.identities.get(who.name)
        groups = set(who.groups) | set(rule.groups if rule is not None else ())
        namespaces = set(rule.namespaces if rule is not None else ())
        for group in groups:
            granted = self.config.groups.get(group)
            if granted is not None:
                namespaces |= set(granted.namespaces)
        ops = self.config.operators
        operator = who.name in ops.users or bool(groups & set(ops.groups))
        name = rule.user if rule is not None and rule.user else who.name
        return Principal(
            name, Role.OPERATOR if operator else Role.USER, frozenset(groups), frozenset(namespaces)
        )


class Authenticator:
    """The reverse proxy first (when configured and the request came through it), then a bearer token."""

    def __init__(self, config: AuthConfig) -> None:
        if config.tokens_file is None and config.proxy is None:
            raise ConfigError("serve config", "auth", "give tokens_file, proxy or both")
        self.tokens = HashedTokens.load(config.tokens_file) if config.tokens_file is not None else None
        self.proxy = ProxyHeaders(config.proxy) if config.proxy is not None else None
        self.identities = IdentityMap(config)

    def authenticate(
        self, header: str | None, headers: Mapping[str, str] | None = None, client: str | None = None
    ) -> Principal:
        """The principal of a request; 401 when neither the proxy nor a token says who it is."""
        if self.proxy is not None:
            who = self.proxy.identity(headers or {}, client)
            if who is not None:
                return self.identities.principal(who)
        if self.tokens is not None and header:
            scheme, _, token = header.partition(" ")
            found = self.tokens.identity(token.strip()) if scheme.lower() == "bearer" else None
            if found is not None:
                return self.identities.principal(found)
            raise AuthError(401, "unknown or malformed bearer token")
        ways = [
            w
            for w, on in (
                ("a bearer token (Authorization: Bearer <token>)", self.tokens),
                ("a request through the sign-in proxy", self.proxy),
            )
            if on is not None
        ]
        raise AuthError(401, f"not signed in: needs {' or '.join(ways)}")
