"""The vendored reference data (data/reference) is complete, unchanged and attributed."""

from __future__ import annotations

import hashlib
import json
import subprocess

from conftest import REFERENCE_DATA

ROOT = REFERENCE_DATA.parents[1]
MANIFEST = REFERENCE_DATA / "manifest.json"
UNLISTED = {"manifest.json", "README.md"}  # the folder's own description, not data


def _entries() -> list[dict[str, object]]:
    entries: list[dict[str, object]] = json.loads(MANIFEST.read_text())["files"]
    return entries


def test_every_file_matches_its_checksum_and_size() -> None:
    wrong = []
    for entry in _entries():
        data = (REFERENCE_DATA / str(entry["path"])).read_bytes()
        if hashlib.sha256(data).hexdigest() != entry["sha256"] or len(data) != entry["bytes"]:
            wrong.append(entry["path"])
    assert not wrong, f"changed since the manifest was written: {wrong}"


def test_every_file_is_listed_and_every_listed_file_exists() -> None:
    on_disk = {
        p.relative_to(REFERENCE_DATA).as_posix()
        for p in REFERENCE_DATA.rglob("*")
        if p.is_file() and p.relative_to(REFERENCE_DATA).as_posix() not in UNLISTED
    }
    listed = {str(e["path"]) for e in _entries()}
    assert on_disk == listed, f"unlisted: {sorted(on_disk - listed)}; missing: {sorted(listed - on_disk)}"


def test_every_entry_names_its_source_commit_and_licence() -> None:
    for entry in _entries():
        assert str(entry["source"]).startswith("https://github.com/"), entry
        commit = str(entry["commit"])
        assert len(commit) == 40 and all(c in "0123456789abcdef" for c in commit), entry
        assert entry["licence"] and entry["change"] and entry["upstream_path"], entry


def test_each_licence_file_named_in_the_manifest_is_there() -> None:
    for entry in _entries():
        licence = str(entry["licence"])
        named = licence.partition("(")[2].partition(")")[0]
        if named.endswith(".txt"):
            assert (REFERENCE_DATA / named).is_file(), licence


def test_nothing_in_the_repository_reads_the_old_shared_folder() -> None:
    """The data used to live beside the project (../shared/data); a fresh clone has no such folder."""
    tracked = subprocess.run(
        [
            "git",
            "grep",
            "-l",
            "-e",
            "shared/data",
            "-e",
            "../shared",
            "--",
            ":!tests/unit/test_reference_data.py",
        ],
        cwd=ROOT,
        capture_output=True,
        text=True,
        check=False,
    )
    assert tracked.stdout.strip() == "", f"files naming shared/data: {tracked.stdout.split()}"
