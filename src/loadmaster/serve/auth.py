"""Bearer tokens, the two roles and what each may see.

A user sees the whole cluster, but other users' jobs only in aggregate: they
appear as one anonymous owner, and asking for another user's job is a 403. An
operator sees everything and may act on the demo. The checks run on the
server: the role by the router every operator route belongs to
(:func:`require_operator` as its dependency, ``serve/app.py``), a job's details
in the views (:func:`can_see_job`); the page hides what a role cannot use, but
hiding is not the control.
"""

from __future__ import annotations

import json
import secrets
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, field
from enum import StrEnum
from pathlib import Path
from typing import Protocol

from loadmaster.errors import LoadmasterError


class Role(StrEnum):
    """What a token may do."""

    USER = "user"
    """Own jobs in full, everyone else's in aggregate."""
    OPERATOR = "operator"
    """Every job, the operator summary and the demo's controls."""


@dataclass(frozen=True)
class Principal:
    """Who a request comes from."""

    name: str
    role: Role
    groups: frozenset[str] = field(default_factory=frozenset)
    namespaces: frozenset[str] = field(default_factory=frozenset)
    """Kubernetes namespaces whose jobs this principal sees in full, besides its own."""

    @property
    def is_operator(self) -> bool:
        return self.role is Role.OPERATOR


class Authenticator(Protocol):
    """Who a request comes from: :class:`TokenTable` (the demo) or serve.yaml's identity setup."""

    def authenticate(
        self, header: str | None, headers: Mapping[str, str] | None = None, client: str | None = None
    ) -> Principal:
        """The principal of a request (its Authorization header, all headers, the client's address);
        an AuthError with status 401 when it cannot say."""
        ...


class AuthError(LoadmasterError):
    """A request without a valid token (401) or without the right (403); ``status`` says which."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status


class TokenTable:
    """Tokens to principals. Tokens are random (``secrets``); the table can be written for the demo."""

    def __init__(self, tokens: Mapping[str, Principal]) -> None:
        self._by_token = dict(tokens)

    @classmethod
    def generate(cls, users: Iterable[str], operators: Iterable[str]) -> TokenTable:
        """A fresh random token for each user and operator."""
        entries = [(name, Role.USER) for name in users] + [(name, Role.OPERATOR) for name in operators]
        return cls({secrets.token_urlsafe(18): Principal(name, role) for name, role in entries})

    def authenticate(
        self, header: str | None, headers: Mapping[str, str] | None = None, client: str | None = None
    ) -> Principal:
        """The principal of an ``Authorization: Bearer <token>`` header; 401 when missing or unknown."""
        if not header:
            raise AuthError(401, "missing bearer token (Authorization: Bearer <token>)")
        scheme, _, token = header.partition(" ")
        principal = self._by_token.get(token.strip()) if scheme.lower() == "bearer" else None
        if principal is None:
            raise AuthError(401, "unknown or malformed bearer token")
        return principal

    def token_of(self, name: str) -> str:
        """The token of a principal by name (for tests and the demo's printout)."""
        for token, principal in self._by_token.items():
            if principal.name == name:
                return token
        raise KeyError(name)

    def principals(self) -> list[tuple[str, Principal]]:
        """Every (token, principal), operators first."""
        return sorted(self._by_token.items(), key=lambda item: (not item[1].is_operator, item[1].name))

    def write(self, path: Path) -> None:
        """Write the tokens as JSON (``[{name, role, token}]``), readable only by the owner."""
        rows = [{"name": p.name, "role": p.role.value, "token": t} for t, p in self.principals()]
        path.parent.mkdir(parents=True, exist_ok=True)
        path.write_text(json.dumps(rows, indent=2) + "\n")
        path.chmod(0o600)


def require_operator(principal: Principal) -> None:
    """403 unless the principal is an operator."""
    if not principal.is_operator:
        raise AuthError(403, f"{principal.name} is a user; this needs the operator role")


def can_see_job(principal: Principal, owner: str, namespace: str | None = None) -> bool:
    """Whether the principal may see a job's details: its owner, an operator, or one granted the
    job's namespace."""
    return (
        principal.is_operator
        or principal.name == owner
        or (namespace is not None and namespace in principal.namespaces)
    )
