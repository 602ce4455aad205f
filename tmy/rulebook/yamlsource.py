"""YAML reading that remembers lines, so every rule error can say where it is.

Mappings load as :class:`LineDict` (``.line`` of the mapping, ``.key_lines``
for each key) and sequences as :class:`LineList` (``.item_lines``). Duplicate
keys, which PyYAML would silently collapse, are an error.
"""

from __future__ import annotations

from pathlib import Path
from typing import Any

import yaml

from tmy.errors import RuleError

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)


class LineDict(dict):
    line: int = 0
    key_lines: dict[Any, int]

    def line_of(self, key: Any) -> int:
        return self.key_lines.get(key, self.line)


class LineList(list):
    line: int = 0
    item_lines: list[int]

    def line_of(self, index: int) -> int:
        return self.item_lines[index] if index < len(self.item_lines) else self.line


class _LineLoader(_Base):  # type: ignore[misc, valid-type]
    """SafeLoader (C-accelerated when available) recording lines."""


def _mapping(loader: Any, node: yaml.MappingNode) -> LineDict:
    loader.flatten_mapping(node)
    out = LineDict()
    out.line = node.start_mark.line + 1
    out.key_lines = {}
    for key_node, value_node in node.value:
        key = loader.construct_object(key_node, deep=True)
        line = key_node.start_mark.line + 1
        try:
            hash(key)
        except TypeError:
            raise RuleError(
                f"a mapping key must be a plain value, got {key!r}", line=line
            ) from None
        if key in out:
            raise RuleError(
                f"duplicate key {key!r} (first on line {out.key_lines[key]})", line=line
            )
        out[key] = loader.construct_object(value_node, deep=True)
        out.key_lines[key] = line
    return out


def _sequence(loader: Any, node: yaml.SequenceNode) -> LineList:
    out = LineList(loader.construct_object(child, deep=True) for child in node.value)
    out.line = node.start_mark.line + 1
    out.item_lines = [child.start_mark.line + 1 for child in node.value]
    return out


_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_MAPPING_TAG, _mapping)
_LineLoader.add_constructor(yaml.resolver.BaseResolver.DEFAULT_SEQUENCE_TAG, _sequence)


def read_yaml(path: Path, text: str | None = None) -> Any:
    """Parse one YAML file; RuleError with file and line on any syntax problem."""
    name = str(path)
    try:
        if text is None:
            text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"cannot read: {exc}", file=name) from None
    try:
        return yaml.load(text, Loader=_LineLoader)
    except RuleError as exc:
        raise RuleError(exc.message, file=name, line=exc.line) from None
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark else None
        what = " ".join(p for p in (exc.context, exc.problem) if p)
        raise RuleError(f"YAML syntax error: {what}", file=name, line=line) from None
    except yaml.YAMLError as exc:
        raise RuleError(f"YAML error: {exc}", file=name) from None
