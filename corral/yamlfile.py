"""Reading corral.yaml: PyYAML, made strict about duplicate keys and discreet about syntax errors.

Two PyYAML habits are wrong for a file that holds credentials. A key given twice is silently resolved
to the last value, so an operator's edit can be overridden by a forgotten line further down; here it is
refused, naming both lines. And a syntax error quotes the offending line, which in this file is often
the one with the token on it; here an error reports only where (line, column) and what kind of problem,
never the text.
"""

from __future__ import annotations

import re
from typing import Any

import yaml
from yaml.nodes import MappingNode, Node, ScalarNode, SequenceNode

MERGE_TAG = "tag:yaml.org,2002:merge"
QUOTED = re.compile(r"'[^']{5,}'|\"[^\"]{5,}\"")
"""PyYAML names the offending character or token in quotes; anything longer than a few characters may be
part of a secret, so it is elided."""


class YamlProblem(ValueError):
    """The text is not a YAML document corral can read; the message never quotes the file's text."""


class DuplicateKey(YamlProblem):
    """A mapping names the same key twice; the message starts with the key's path, like other problems."""


class StrictLoader(yaml.SafeLoader):
    """SafeLoader that refuses a mapping key given twice (merge keys `<<` may still be overridden)."""

    def construct_document(self, node: Node) -> Any:
        _refuse_duplicate_keys(node, path=(), seen=set())
        return super().construct_document(node)


def _refuse_duplicate_keys(node: Node, path: tuple[str, ...], seen: set[int]) -> None:
    """Walk the node graph once (anchors may make it cyclic), checking every mapping's explicit keys."""
    if id(node) in seen:
        return
    seen.add(id(node))
    if isinstance(node, MappingNode):
        lines: dict[str, int] = {}
        for key_node, value_node in node.value:
            if key_node.tag == MERGE_TAG:
                _refuse_duplicate_keys(value_node, path, seen)
                continue
            key = str(key_node.value) if isinstance(key_node, ScalarNode) else f"<{key_node.tag}>"
            line = key_node.start_mark.line + 1
            if key in lines:
                where = ".".join((*path, key))
                raise DuplicateKey(
                    f"{where}: given twice (lines {lines[key]} and {line}); YAML would silently keep the last, "
                    "so delete the one you do not mean"
                )
            lines[key] = line
            _refuse_duplicate_keys(value_node, (*path, key), seen)
    elif isinstance(node, SequenceNode):
        for index, item in enumerate(node.value):
            _refuse_duplicate_keys(item, (*path, str(index)), seen)


def describe_yaml_error(error: yaml.YAMLError) -> str:
    """Where and what, in PyYAML's words, without the line's text (which may hold a secret)."""
    if not isinstance(error, yaml.MarkedYAMLError):
        return "not valid YAML"
    where = ""
    if error.problem_mark is not None:
        where = f" at line {error.problem_mark.line + 1}, column {error.problem_mark.column + 1}"
    what = QUOTED.sub("'...'", error.problem or "syntax error")
    if error.context and error.context_mark is not None:
        context = QUOTED.sub("'...'", error.context)
        what += f" ({context} that starts at line {error.context_mark.line + 1})"
    return f"not valid YAML{where}: {what}"


def parse_yaml(text: str) -> object:
    """The document in `text`; YamlProblem says where and what is wrong, never echoing the text."""
    try:
        return yaml.load(text, Loader=StrictLoader)  # noqa: S506 - StrictLoader is a SafeLoader
    except YamlProblem:
        raise
    except yaml.YAMLError as exc:
        raise YamlProblem(f"{describe_yaml_error(exc)}; fix the syntax there") from None
