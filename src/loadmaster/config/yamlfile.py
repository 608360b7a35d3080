"""Reading YAML files so that every later error can name the file, the field and the line."""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from importlib import resources
from pathlib import Path
from typing import Any, TypeVar, get_args

import pydantic
import yaml

from loadmaster.errors import ConfigError


@dataclass(frozen=True)
class YamlDocument:
    """A parsed YAML file plus its node tree, kept to find the line of a field."""

    source: str
    data: Any
    root: yaml.Node | None

    def line_of(self, path: Sequence[str | int]) -> int | None:
        """1-based line of the value at ``path`` (keys and list indices), or of its nearest parent."""
        node = self.root
        line = node.start_mark.line + 1 if node is not None else None
        for part in path:
            node = _child(node, part)
            if node is None:
                break
            line = node.start_mark.line + 1
        return line

    def error(self, path: Sequence[str | int], message: str) -> ConfigError:
        """A ConfigError naming this file (with the line), the dotted field path and ``message``."""
        line = self.line_of(path)
        where = f"{self.source}:{line}" if line is not None else self.source
        return ConfigError(where, dotted(path), message)


def _child(node: yaml.Node | None, part: str | int) -> yaml.Node | None:
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            if key.value == str(part):
                found: yaml.Node = value
                return found
    if isinstance(node, yaml.SequenceNode) and isinstance(part, int) and 0 <= part < len(node.value):
        child: yaml.Node = node.value[part]
        return child
    return None


def dotted(path: Sequence[str | int]) -> str:
    """``pools.training.node_groups[0].gpus`` from a path of keys and indices."""
    text = ""
    for part in path:
        text += f"[{part}]" if isinstance(part, int) else (f".{part}" if text else str(part))
    return text


def read_yaml(path: Path) -> YamlDocument:
    """Parse ``path``; a missing file or bad YAML raises ConfigError with the position."""
    try:
        text = path.read_text(encoding="utf-8")
    except OSError as exc:
        raise ConfigError(str(path), "", f"cannot read the file: {exc.strerror or exc}") from None
    return parse_yaml(text, str(path))


def find_document(folder: str, name_or_path: str, builtin: tuple[str, ...]) -> YamlDocument:
    """A built-in file of ``loadmaster/data/<folder>`` by name, or a file by path."""
    if name_or_path in builtin:
        text = resources.files("loadmaster.data").joinpath(folder, f"{name_or_path}.yaml").read_text()
        return parse_yaml(text, f"<built-in {folder[:-1]} {name_or_path}>")
    path = Path(name_or_path)
    if not path.exists() and "/" not in name_or_path and not name_or_path.endswith((".yaml", ".yml")):
        raise ConfigError(
            name_or_path, "", f"no such file and not a built-in name; built-in: {', '.join(builtin)}"
        )
    return read_yaml(path)


FAST_LOADER: type[yaml.SafeLoader] = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
"""libyaml's parser where PyYAML was built with it (the usual wheels are): the same safe
constructor and resolver on nodes parsed in C, several times faster than the pure-Python parser."""


def parse_yaml(text: str, source: str) -> YamlDocument:
    """Parse YAML ``text`` that came from ``source``.

    Parsed once into nodes (kept for the lines of errors) and built into data from those nodes,
    as ``yaml.safe_load`` builds them. Bad YAML is parsed again by the pure-Python loader, so that
    the message is PyYAML's own wherever libyaml is or is not present.
    """
    try:
        root, data = _compose_and_construct(text, FAST_LOADER)
    except yaml.YAMLError:
        try:
            root, data = _compose_and_construct(text, yaml.SafeLoader)
        except yaml.YAMLError as exc:
            mark = getattr(exc, "problem_mark", None)
            where = f"{source}:{mark.line + 1}" if mark is not None else source
            problem = getattr(exc, "problem", None) or str(exc)
            raise ConfigError(where, "", f"not valid YAML: {problem}") from None
    return YamlDocument(source=source, data=data, root=root)


def _compose_and_construct(text: str, loader_class: type[yaml.SafeLoader]) -> tuple[yaml.Node | None, Any]:
    """The document's node tree and its data, from one parse (``safe_load`` is the two in one)."""
    loader = loader_class(text)
    try:
        root = loader.get_single_node()
        return root, loader.construct_document(root) if root is not None else None
    finally:
        loader.dispose()


M = TypeVar("M", bound=pydantic.BaseModel)


def validate(model: type[M], doc: YamlDocument) -> M:
    """Validate the document as ``model``; the first error becomes a ConfigError with its line."""
    if doc.data is None:
        raise doc.error([], "the file is empty")
    try:
        return model.model_validate(doc.data)
    except pydantic.ValidationError as exc:
        first = exc.errors()[0]
        path = [p for p in first["loc"] if isinstance(p, str | int)]
        raise doc.error(path, _message(model, first)) from None


def _message(model: type[pydantic.BaseModel], error: Any) -> str:
    kind = error["type"]
    if kind == "extra_forbidden":
        allowed = _fields_at(model, list(error["loc"])[:-1])
        return f"unknown field; allowed: {', '.join(allowed)}" if allowed else "unknown field"
    if kind == "missing":
        return "required field is missing"
    return f"{error['msg']} (got {error.get('input')!r})"


def _fields_at(model: Any, loc: list[Any]) -> list[str]:
    """Field names of the model found by walking ``loc`` through nested models, dicts and lists."""
    current = model
    for part in loc:
        if isinstance(current, type) and issubclass(current, pydantic.BaseModel):
            field = current.model_fields.get(str(part))
            if field is None:
                return []
            current = field.annotation
        else:
            args = [a for a in get_args(current) if a is not type(None)]
            current = args[-1] if args else None
    if isinstance(current, type) and issubclass(current, pydantic.BaseModel):
        return list(current.model_fields)
    args = [a for a in get_args(current) if isinstance(a, type) and issubclass(a, pydantic.BaseModel)]
    return list(args[0].model_fields) if args else []
