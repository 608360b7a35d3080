"""The docs say what the code does: every plugin argument in a defaults table, every plugin of an
extension point in docs/scheduling.md, every layer in docs/architecture.md, and no reference to a
design document that is not in the repository."""

from __future__ import annotations

import dataclasses
import re
import subprocess
import tomllib
from pathlib import Path

import pytest

from loadmaster.scheduling.framework import GpuChoicePlugin, ScorePlugin
from loadmaster.scheduling.registry import PLUGINS

ROOT = Path(__file__).resolve().parents[2]
DOCS = ROOT / "docs"
MISSING_DOCS = re.compile(r"\b(MISSION|STYLE|ARCHITECTURE)\.md\b|\bSTYLE habit\b")


def _doc_texts() -> dict[Path, str]:
    return {path: path.read_text(encoding="utf-8") for path in sorted(DOCS.rglob("*.md"))}


def _arguments() -> list[tuple[str, str]]:
    return [
        (name, field.name)
        for name, cls in PLUGINS.items()
        if dataclasses.is_dataclass(getattr(cls, "Args", None))
        for field in dataclasses.fields(cls.Args)
    ]


@pytest.mark.parametrize(("plugin", "arg"), _arguments(), ids=str)
def test_every_plugin_argument_is_in_a_defaults_table(plugin: str, arg: str) -> None:
    """A table row names the argument in a doc that names the plugin (docs/design-principles.md, habit 2)."""
    for text in _doc_texts().values():
        rows = [line for line in text.splitlines() if line.startswith("|")]
        names_it = f"`{plugin}`" in text or re.search(rf"^#+ {re.escape(plugin)}\b", text, re.MULTILINE)
        if names_it and any(f"`{arg}" in row for row in rows):
            return
    pytest.fail(f"plugin {plugin!r}: argument {arg!r} is in no table of a doc that names the plugin")


@pytest.mark.parametrize(("point", "kind"), [("score", ScorePlugin), ("choose_gpus", GpuChoicePlugin)])
def test_the_extension_point_table_names_every_plugin(point: str, kind: type) -> None:
    text = (DOCS / "scheduling.md").read_text(encoding="utf-8")
    rows = [line for line in text.splitlines() if line.startswith(f"| {point} |")]
    assert len(rows) == 1, f"docs/scheduling.md has no single '{point}' row"
    named = set(re.findall(r"`([a-z0-9-]+)`", rows[0]))
    sharing = (DOCS / "plugins" / "sharing.md").read_text(encoding="utf-8")
    if "sharing.md" in rows[0]:  # the row points at the sharing policies' own table
        named |= set(re.findall(r"^\| `([a-z0-9-]+)` \|", sharing, flags=re.MULTILINE))
    implementing = {name for name, cls in PLUGINS.items() if issubclass(cls, kind)}
    assert implementing <= named, f"{point}: missing {sorted(implementing - named)}"


def test_architecture_names_every_layer_of_the_import_contract() -> None:
    config = tomllib.loads((ROOT / "pyproject.toml").read_text(encoding="utf-8"))
    contract = next(c for c in config["tool"]["importlinter"]["contracts"] if c["type"] == "layers")
    modules = {
        name.strip().removeprefix("loadmaster.") for layer in contract["layers"] for name in layer.split("|")
    }
    text = (DOCS / "architecture.md").read_text(encoding="utf-8")
    block = text.split("## Layers", 1)[1].split("```", 2)[1]
    shown = set(re.findall(r"[a-z_]+", block))
    assert modules <= shown, f"docs/architecture.md's layer diagram misses {sorted(modules - shown)}"


def test_no_file_refers_to_a_design_document_outside_the_repository() -> None:
    listed = subprocess.run(
        ["git", "-C", str(ROOT), "ls-files", "--cached", "--others", "--exclude-standard"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout.split()
    stale = []
    for name in listed:
        path = ROOT / name
        if path.suffix not in {".py", ".md", ".yaml", ".toml"} or not path.is_file():
            continue
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            if MISSING_DOCS.search(line):
                stale.append(f"{name}:{number}: {line.strip()}")
    assert not stale, "refer to docs/design-principles.md instead:\n" + "\n".join(stale)
