"""The values a YAML file reads into: mappings and lists that remember their lines.

Mappings load as :class:`LineDict` (``.line`` of the mapping, ``.key_lines``
for each key) and sequences as :class:`LineList` (``.item_lines``), whichever
reader built them (:mod:`tmy.yamlfile.fast` or libyaml's events in
:mod:`tmy.yamlfile.source`).
"""

from __future__ import annotations

from typing import Any


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


class _HandedOver:
    """Stands in a ``rules:`` list for a rule given to the reader's sink (see
    :func:`tmy.yamlfile.source.read_yaml`): the list keeps its length and lines."""

    __slots__ = ()

    def __repr__(self) -> str:
        return "<rule handed over>"


HANDED_OVER = _HandedOver()
