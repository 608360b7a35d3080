"""A sweep's folder: one file per finished cell, named by its key, written atomically.

```
OUT/cells/KEY.json     a finished cell (what run_cell returned, plus where and when it ran)
OUT/failed/KEY.json    a cell that failed every attempt: its last error (removed once it succeeds)
```

Every file is written to a temporary name in the same folder, flushed to disk
and renamed (``os.replace`` is atomic on POSIX), so a driver killed at any
moment leaves either the whole file or none: a reader never sees half a
result. A record whose key does not match its name is not a result.
"""

from __future__ import annotations

import json
import logging
import os
import tempfile
from pathlib import Path
from typing import Any

log = logging.getLogger(__name__)


def write_atomic(path: Path, text: str) -> None:
    """Write ``text`` to ``path`` so that ``path`` holds the old content or the new, never a part."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, tmp = tempfile.mkstemp(prefix=f".{path.name}.", suffix=".tmp", dir=path.parent)
    try:
        with os.fdopen(fd, "w", encoding="utf-8") as fh:
            fh.write(text)
            fh.flush()
            os.fsync(fh.fileno())
        os.replace(tmp, path)
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


class Store:
    """The results of a sweep folder, by cell key."""

    def __init__(self, root: Path) -> None:
        self.root = root
        self.cells = root / "cells"
        self.failed = root / "failed"

    def done(self) -> dict[str, dict[str, Any]]:
        """Every finished cell's record, by key (temporary files and mismatched records ignored)."""
        out: dict[str, dict[str, Any]] = {}
        if not self.cells.is_dir():
            return out
        for path in sorted(self.cells.glob("*.json")):
            try:
                record = json.loads(path.read_text(encoding="utf-8"))
            except (OSError, json.JSONDecodeError) as exc:
                log.warning("ignoring %s: not a readable result (%s)", path, exc)
                continue
            if not isinstance(record, dict) or record.get("key") != path.stem:
                log.warning("ignoring %s: its key does not match its name", path)
                continue
            out[path.stem] = record
        return out

    def failures(self) -> dict[str, dict[str, Any]]:
        """The last failure of each cell that has not succeeded since, by key."""
        out: dict[str, dict[str, Any]] = {}
        if self.failed.is_dir():
            for path in sorted(self.failed.glob("*.json")):
                if not (self.cells / path.name).exists():
                    out[path.stem] = json.loads(path.read_text(encoding="utf-8"))
        return out

    def put(self, key: str, record: dict[str, Any]) -> None:
        """Store a finished cell; forget its earlier failure."""
        write_atomic(self.cells / f"{key}.json", json.dumps(record, indent=1, sort_keys=True) + "\n")
        (self.failed / f"{key}.json").unlink(missing_ok=True)

    def fail(self, key: str, record: dict[str, Any]) -> None:
        """Store a cell's last failure."""
        write_atomic(self.failed / f"{key}.json", json.dumps(record, indent=1, sort_keys=True) + "\n")
