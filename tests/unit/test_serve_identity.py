"""serve.yaml: hashed tokens, a trusted sign-in proxy, identities mapped to users, groups, namespaces
and the operator role (401/403); layouts, settings and the reclaim ledger surviving a restart."""

from __future__ import annotations

import sqlite3
import warnings
from collections.abc import Iterator
from pathlib import Path
from typing import Any

import pytest
import yaml

from loadmaster.errors import ConfigError
from loadmaster.serve import DemoOptions, build_demo, create_app
from loadmaster.serve.config import load_serve_config
from loadmaster.serve.demo import Demo
from loadmaster.serve.identity import Authenticator, hash_token
from loadmaster.serve.state import SCHEMA_VERSION, LedgerEntry, StateError, StateStore

with warnings.catch_warnings():
    # Starlette's TestClient warns about its httpx transport on import; the tests run under -W error.
    warnings.simplefilter("ignore")
    from fastapi.testclient import TestClient

TOKENS = {
    "ann-token-0123456789": "ann@example.org",
    "ops-token-0123456789": "olga",
    "bob-token-012345": "bob",
}


@pytest.fixture(scope="module")
def demo() -> Demo:
    return build_demo(DemoOptions(history_s=1800.0, speed=60.0))


def write_config(folder: Path, demo: Demo, **extra: Any) -> Path:
    owner = next(iter(demo.sim.cluster.running.values())).job
    (folder / "tokens.yaml").write_text(
        yaml.safe_dump(
            {
                "tokens": [
                    {
                        "name": name,
                        "sha256": hash_token(token),
                        **({"groups": ["gpu-admins"]} if name == "olga" else {}),
                    }
                    for token, name in TOKENS.items()
                ]
            }
        )
    )
    config = {
        "auth": {
            "tokens_file": "tokens.yaml",
            "proxy": {"trusted": ["10.1.2.0/24"], "groups_header": "X-Forwarded-Groups"},
            "operators": {"groups": ["gpu-admins"]},
            "identities": {"ann@example.org": {"user": owner.user}},
            "groups": {"viewers": {"namespaces": [owner.group]}},
        },
        "state": {"path": "state.sqlite"},
        **extra,
    }
    path = folder / "serve.yaml"
    path.write_text(yaml.safe_dump(config))
    return path


@pytest.fixture
def app_parts(demo: Demo, tmp_path: Path) -> Iterator[tuple[Authenticator, StateStore, Path]]:
    config = load_serve_config(write_config(tmp_path, demo))
    assert config.auth is not None
    store = StateStore(config.state.path)
    yield Authenticator(config.auth), store, config.state.path
    store.close()


def client_for(demo: Demo, auth: Authenticator, store: StateStore, host: str = "192.0.2.7") -> TestClient:
    return TestClient(create_app(demo, run_stepper=False, auth=auth, state=store), client=(host, 40000))


def bearer(token: str) -> dict[str, str]:
    return {"Authorization": f"Bearer {token}"}


def test_hashed_tokens_sign_in_and_map_to_users_and_roles(demo: Demo, app_parts: Any) -> None:
    auth, store, _ = app_parts
    owner = next(iter(demo.sim.cluster.running.values())).job
    with client_for(demo, auth, store) as c:
        ann = c.get("/api/me", headers=bearer("ann-token-0123456789"))
        assert ann.status_code == 200 and ann.json()["name"] == owner.user  # identity -> scheduler user
        assert c.get("/api/operator/summary", headers=bearer("ann-token-0123456789")).status_code == 403
        assert c.get("/api/operator/summary", headers=bearer("ops-token-0123456789")).status_code == 200
        assert c.get("/api/me", headers=bearer("not-a-token")).status_code == 401
        missing = c.get("/api/me")
        assert missing.status_code == 401 and "bearer token" in missing.json()["detail"]


def test_the_tokens_file_holds_no_token(app_parts: Any, tmp_path: Path) -> None:
    text = (tmp_path / "tokens.yaml").read_text()
    assert not any(token in text for token in TOKENS)


def test_proxy_headers_count_only_from_trusted_addresses(demo: Demo, app_parts: Any) -> None:
    auth, store, _ = app_parts
    headers = {"X-Forwarded-User": "carol", "X-Forwarded-Groups": "gpu-admins, team-x"}
    with client_for(demo, auth, store, host="10.1.2.3") as trusted:
        me = trusted.get("/api/me", headers=headers)
        assert me.status_code == 200 and me.json()["name"] == "carol" and me.json()["role"] == "operator"
    with client_for(demo, auth, store, host="198.51.100.9") as outsider:
        assert outsider.get("/api/me", headers=headers).status_code == 401  # forged headers are ignored
        assert (
            outsider.get("/api/me", headers={**headers, **bearer("bob-token-012345")}).json()["name"] == "bob"
        )


def test_a_group_grants_a_namespace_of_jobs(demo: Demo, app_parts: Any) -> None:
    auth, store, _ = app_parts
    job = next(iter(demo.sim.cluster.running.values())).job
    headers = {"X-Forwarded-User": "viv", "X-Forwarded-Groups": "viewers"}
    with client_for(demo, auth, store, host="10.1.2.3") as c:
        assert c.get(f"/api/jobs/{job.id}", headers=headers).status_code == 200
        outsider = {"X-Forwarded-User": "viv", "X-Forwarded-Groups": "other"}
        assert c.get(f"/api/jobs/{job.id}", headers=outsider).status_code == 403


def test_layouts_settings_and_the_ledger_survive_a_restart(demo: Demo, app_parts: Any) -> None:
    auth, store, path = app_parts
    layout = {"colour": "owner", "layout": "user", "collapsed": ["pool:training"]}
    with client_for(demo, auth, store) as c:
        assert c.put("/api/me/layout", json=layout, headers=bearer("bob-token-012345")).status_code == 200
        settings = {"metric": "sm", "time_range_s": 7200.0, "page_size": 100}
        assert c.put("/api/me/settings", json=settings, headers=bearer("bob-token-012345")).status_code == 200
        bad = c.put("/api/me/settings", json={"page_size": 5}, headers=bearer("bob-token-012345"))
        assert bad.status_code == 422
    store.record(LedgerEntry(100.0, "j1", "bob", "team-a", "evict", "idle 2 h", "scheduler", 4, 8.0))
    store.close()
    reopened = StateStore(path)
    try:
        with client_for(demo, auth, reopened) as c:
            assert c.get("/api/me/layout", headers=bearer("bob-token-012345")).json() == layout
            assert c.get("/api/me/settings", headers=bearer("bob-token-012345")).json()["page_size"] == 100
            assert c.get("/api/me/layout", headers=bearer("ann-token-0123456789")).json() == {}
            assert c.get("/api/operator/ledger", headers=bearer("bob-token-012345")).status_code == 403
            entries = c.get("/api/operator/ledger", headers=bearer("ops-token-0123456789")).json()["entries"]
        assert [(e["job"], e["action"], e["actor"], e["reason"]) for e in entries] == [
            ("j1", "evict", "scheduler", "idle 2 h")
        ]
    finally:
        reopened.close()


def test_a_state_file_from_a_newer_loadmaster_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "s.sqlite"
    StateStore(path).close()
    with sqlite3.connect(path) as db:
        db.execute(f"PRAGMA user_version = {SCHEMA_VERSION + 1}")
    with pytest.raises(StateError, match="newer than this loadmaster"):
        StateStore(path)


def test_config_errors_name_file_line_and_field(tmp_path: Path, demo: Demo) -> None:
    path = tmp_path / "serve.yaml"
    path.write_text("auth:\n  proxy:\n    trusted: [not-a-network]\n")
    with pytest.raises(ConfigError, match=r"serve\.yaml:\d+: auth\.proxy\.trusted"):
        load_serve_config(path)
    path.write_text("auth:\n  tokens_file: t.yaml\n  operator: {}\n")
    with pytest.raises(ConfigError, match="unknown field; allowed: tokens_file, proxy, operators"):
        load_serve_config(path)
    (tmp_path / "t.yaml").write_text("tokens:\n  - name: a\n    sha256: abc\n")
    path.write_text("auth:\n  tokens_file: t.yaml\n")
    config = load_serve_config(path)
    assert config.auth is not None
    with pytest.raises(ConfigError, match=r"t\.yaml:3: tokens\[0\]\.sha256"):
        Authenticator(config.auth)


def test_an_unquoted_hash_that_yaml_reads_as_a_number_is_named(tmp_path: Path) -> None:
    (tmp_path / "t.yaml").write_text("tokens:\n  - name: a\n    sha256: " + "0" * 64 + "\n")
    with pytest.raises(ConfigError, match="write the hash in quotes"):
        Authenticator(load_serve_config_with_tokens(tmp_path))


def load_serve_config_with_tokens(folder: Path) -> Any:
    path = folder / "serve.yaml"
    path.write_text("auth:\n  tokens_file: t.yaml\n")
    config = load_serve_config(path)
    assert config.auth is not None
    return config.auth
