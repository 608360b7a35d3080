"""One parse, in C where libyaml is present: the same data, node lines and error messages as PyYAML's own."""

from __future__ import annotations

from importlib import resources

import pytest
import yaml

from loadmaster.config.yamlfile import parse_yaml
from loadmaster.errors import ConfigError

BUILTIN = [
    f"{folder}/{entry.name}"
    for folder in ("clusters", "profiles", "workloads")
    for entry in resources.files("loadmaster.data").joinpath(folder).iterdir()
    if entry.name.endswith(".yaml")
]


def _lines(node: yaml.Node) -> list[tuple[int, int]]:
    """Every node's start and end line, depth first: what ``YamlDocument.line_of`` reads."""
    out = [(node.start_mark.line, node.end_mark.line)]
    if isinstance(node, yaml.MappingNode):
        for key, value in node.value:
            out += _lines(key) + _lines(value)
    elif isinstance(node, yaml.SequenceNode):
        for item in node.value:
            out += _lines(item)
    return out


@pytest.mark.parametrize("name", BUILTIN)
def test_builtin_files_parse_as_pyyaml_parses_them(name: str) -> None:
    text = resources.files("loadmaster.data").joinpath(name).read_text()
    doc = parse_yaml(text, name)
    assert doc.data == yaml.safe_load(text)
    reference = yaml.compose(text, Loader=yaml.SafeLoader)
    assert doc.root is not None and reference is not None
    assert _lines(doc.root) == _lines(reference)


def test_anchors_tags_and_an_empty_document() -> None:
    text = "base: &b {gpus: 8, ratio: 1.5e3, when: 2024-01-02}\nother: *b\nflags: [yes, no, null, ~]\n"
    assert parse_yaml(text, "t.yaml").data == yaml.safe_load(text)
    empty = parse_yaml("", "empty.yaml")
    assert empty.data is None and empty.root is None


def test_bad_yaml_gives_the_pure_python_parsers_message() -> None:
    text = "name: x\npools: [\n"
    with pytest.raises(yaml.YAMLError) as reference:
        yaml.safe_load(text)
    problem = getattr(reference.value, "problem", None)
    with pytest.raises(ConfigError, match=r"^t.yaml:3: not valid YAML: ") as caught:
        parse_yaml(text, "t.yaml")
    assert str(caught.value).endswith(f"not valid YAML: {problem}")
