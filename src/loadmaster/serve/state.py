"""What ``serve`` keeps across restarts, in one SQLite file: per-user layouts and settings, and the
reclaim ledger.

SQLite because it ships with Python, survives a crash mid-write (a transaction per change) and needs
no server; ``:memory:`` keeps nothing (the demo's default). The schema carries a version
(``PRAGMA user_version``): a file from an older loadmaster is migrated on open, one from a newer
loadmaster is refused rather than misread.
"""

from __future__ import annotations

import json
import sqlite3
import threading
import time
from collections.abc import Callable
from dataclasses import asdict
from pathlib import Path
from typing import Any

from loadmaster.errors import LoadmasterError
from loadmaster.scheduling.reclaim import LedgerEntry

__all__ = ["SCHEMA_VERSION", "LedgerEntry", "StateError", "StateStore"]

SCHEMA_VERSION = 2
"""The schema this code writes; :data:`MIGRATIONS` [v] brings a file from version v to v + 1."""

MIGRATIONS: tuple[str, ...] = (
    """
    CREATE TABLE layouts (user TEXT PRIMARY KEY, body TEXT NOT NULL, updated_s REAL NOT NULL);
    CREATE TABLE settings (user TEXT PRIMARY KEY, body TEXT NOT NULL, updated_s REAL NOT NULL);
    CREATE TABLE ledger (
        id INTEGER PRIMARY KEY AUTOINCREMENT,
        at_s REAL NOT NULL,
        job TEXT NOT NULL,
        owner TEXT NOT NULL,
        namespace TEXT,
        action TEXT NOT NULL,
        reason TEXT NOT NULL,
        actor TEXT NOT NULL,
        gpus INTEGER NOT NULL,
        idle_gpu_hours REAL NOT NULL
    );
    CREATE INDEX ledger_at ON ledger (at_s);
    """,
    """
    ALTER TABLE ledger ADD COLUMN ref INTEGER;
    """,
)


class StateError(LoadmasterError):
    """The state file cannot be used (unreadable, or written by a newer loadmaster)."""


class StateStore:
    """The state file (module docstring); thread-safe (one connection behind a lock)."""

    def __init__(self, path: str | Path = ":memory:", clock: Callable[[], float] = time.time) -> None:
        self.path = str(path)
        self._clock = clock
        if self.path != ":memory:":
            Path(self.path).parent.mkdir(parents=True, exist_ok=True)
        try:
            self._db = sqlite3.connect(self.path, check_same_thread=False, isolation_level=None)
            self._db.execute(
                "PRAGMA journal_mode=WAL" if self.path != ":memory:" else "PRAGMA journal_mode=MEMORY"
            )
            version = int(self._db.execute("PRAGMA user_version").fetchone()[0])
        except sqlite3.Error as exc:
            raise StateError(f"{self.path}: cannot open the state database ({exc})") from exc
        if version > SCHEMA_VERSION:
            self._db.close()
            raise StateError(
                f"{self.path}: state schema version {version} is newer than this loadmaster's "
                f"({SCHEMA_VERSION}); upgrade loadmaster or point state.path elsewhere"
            )
        self._lock = threading.Lock()
        self._migrate(version)

    def _migrate(self, version: int) -> None:
        for target in range(version, SCHEMA_VERSION):
            with self._lock:
                self._db.execute("BEGIN")
                for statement in _statements(MIGRATIONS[target]):
                    self._db.execute(statement)
                self._db.execute(f"PRAGMA user_version = {target + 1}")
                self._db.execute("COMMIT")

    @property
    def version(self) -> int:
        """The schema version of the file."""
        with self._lock:
            return int(self._db.execute("PRAGMA user_version").fetchone()[0])

    def close(self) -> None:
        """Close the database."""
        with self._lock:
            self._db.close()

    def _get(self, table: str, user: str) -> dict[str, Any] | None:
        with self._lock:
            row = self._db.execute(f"SELECT body FROM {table} WHERE user = ?", (user,)).fetchone()
        return json.loads(row[0]) if row is not None else None

    def _put(self, table: str, user: str, body: dict[str, Any]) -> None:
        with self._lock:
            self._db.execute(
                f"INSERT INTO {table} (user, body, updated_s) VALUES (?, ?, ?) "
                "ON CONFLICT(user) DO UPDATE SET body = excluded.body, updated_s = excluded.updated_s",
                (user, json.dumps(body, separators=(",", ":")), self._clock()),
            )

    def layout(self, user: str) -> dict[str, Any] | None:
        """A user's saved layout (the API validates its shape), or None."""
        return self._get("layouts", user)

    def save_layout(self, user: str, body: dict[str, Any]) -> None:
        self._put("layouts", user, body)

    def settings(self, user: str) -> dict[str, Any] | None:
        """A user's saved settings, or None."""
        return self._get("settings", user)

    def save_settings(self, user: str, body: dict[str, Any]) -> None:
        self._put("settings", user, body)

    def record(self, entry: LedgerEntry) -> LedgerEntry:
        """Add a ledger entry; returns it with its id."""
        row = asdict(entry)
        del row["id"]
        with self._lock:
            cursor = self._db.execute(
                f"INSERT INTO ledger ({', '.join(row)}) VALUES ({', '.join('?' for _ in row)})",
                tuple(row.values()),
            )
        return LedgerEntry(**{**row, "id": cursor.lastrowid})

    def ledger(
        self, limit: int = 1000, job: str | None = None, owners: tuple[str, ...] | None = None,
        namespaces: tuple[str, ...] = (),
    ) -> list[LedgerEntry]:  # fmt: skip
        """The newest ``limit`` entries (of one job when given; of jobs these users own or in these
        namespaces when ``owners`` is given), newest first."""
        query = _SELECT
        where: list[str] = []
        args: tuple[Any, ...] = ()
        if job is not None:
            where.append("job = ?")
            args = (job,)
        if owners is not None:
            clause = f"owner IN ({', '.join('?' * len(owners))})"
            if namespaces:
                clause = f"({clause} OR namespace IN ({', '.join('?' * len(namespaces))}))"
            where.append(clause)
            args = (*args, *owners, *namespaces)
        if where:
            query += " WHERE " + " AND ".join(where)
        with self._lock:
            rows = self._db.execute(query + " ORDER BY at_s DESC, id DESC LIMIT ?", (*args, limit)).fetchall()
        return [LedgerEntry(*row) for row in rows]

    def entry(self, entry_id: int) -> LedgerEntry | None:
        """One entry by id, or None."""
        with self._lock:
            row = self._db.execute(_SELECT + " WHERE id = ?", (entry_id,)).fetchone()
        return LedgerEntry(*row) if row is not None else None

    def since(self, after_id: int, limit: int = 10_000) -> list[LedgerEntry]:
        """Entries with an id above ``after_id``, oldest first: how the scheduler reads the operators'
        actions (another process may have written them: each read sees every committed entry)."""
        with self._lock:
            rows = self._db.execute(
                _SELECT + " WHERE id > ? ORDER BY id LIMIT ?", (after_id, limit)
            ).fetchall()
        return [LedgerEntry(*row) for row in rows]


_SELECT = (
    "SELECT at_s, job, owner, namespace, action, reason, actor, gpus, idle_gpu_hours, id, ref FROM ledger"
)


def _statements(script: str) -> list[str]:
    return [s.strip() for s in script.split(";") if s.strip()]
