"""One stored value as the console's Variables page shows it (:mod:`tmy.console.variables`).

A value is shown as nested lists and maps within a budget (:func:`shape`); "show all"
gives it as indented JSON text, cut on the page to :data:`SHOW_ALL_CHARS` characters
(the download has it whole). Nothing here touches the event loop: the page builds a
large value's view in a thread (a 4 MB value takes a core a while).
"""

from __future__ import annotations

import json
from typing import Any

import orjson

from tmy.adapters.http import MAX_BODY
from tmy.rulebook.model import VariableDecl

SHOW_NODES = 400  # items and leaves shown of one value before "show all"
SHOW_CHARS = 2000  # characters of one string shown before "show all"
SHOW_DEPTH = 12  # nesting shown before "show all"
SHOW_ALL_CHARS = 500_000  # characters of "show all" on the page (the download has the rest)
BIG = 64 * 1024  # bytes of JSON from which a value's page is rendered in a thread
EDIT_BYTES = MAX_BODY - 64 * 1024  # the largest value edited here (a form sent as multipart)


def type_name(value: Any) -> str:
    """The type word ``vars set`` checks against: list, dict, bool, int, float, str, null."""
    for kind, word in ((bool, "bool"), (int, "int"), (float, "float"), (str, "str")):
        if isinstance(value, kind):
            return word
    if isinstance(value, list):
        return "list"
    if isinstance(value, dict):
        return "dict"
    return "null" if value is None else type(value).__name__


class _Budget:
    """How much of a value is still shown: nodes left; ``cut`` once anything was left out."""

    def __init__(self, nodes: int) -> None:
        self.nodes = nodes
        self.cut = False

    def take(self) -> bool:
        if self.nodes <= 0:
            self.cut = True
            return False
        self.nodes -= 1
        return True


def shape(value: Any, budget: _Budget, depth: int = 0) -> dict[str, Any]:
    """``value`` as a tree for the page: ``{"t": "map"|"list", "items": [[key, node]], "more"}``
    or a leaf ``{"t": type, "v": text, "cut": characters left out}``, within ``budget``."""
    if isinstance(value, (dict, list)):
        pairs = list(value.items()) if isinstance(value, dict) else list(enumerate(value))
        kind = "map" if isinstance(value, dict) else "list"
        if depth >= SHOW_DEPTH and pairs:
            budget.cut = True
            return {"t": kind, "items": [], "more": len(pairs)}
        items = []
        for key, item in pairs:
            if not budget.take():
                break
            items.append([str(key), shape(item, budget, depth + 1)])
        return {"t": kind, "items": items, "more": len(pairs) - len(items)}
    text = value if isinstance(value, str) else json.dumps(value, ensure_ascii=False)
    cut = 0
    if len(text) > SHOW_CHARS:
        cut, text = len(text) - SHOW_CHARS, text[:SHOW_CHARS]
        budget.cut = True
    return {"t": type_name(value), "v": text, "cut": cut}


def _size(value: Any) -> int:
    """Bytes of ``value`` as compact JSON (orjson's: in C, a few ms for 4 MB)."""
    try:
        return len(orjson.dumps(value))
    except (TypeError, orjson.JSONEncodeError):
        return len(json.dumps(value, ensure_ascii=False, separators=(",", ":")).encode())


def _indented(value: Any, size: int) -> str:
    """``value`` as indented JSON text (orjson's, in C, for a large one)."""
    if size > BIG:
        try:
            return orjson.dumps(value, option=orjson.OPT_INDENT_2).decode()
        except (TypeError, orjson.JSONEncodeError):
            pass
    return json.dumps(value, ensure_ascii=False, indent=2)


def value_view(
    value: Any, decl: VariableDecl | None, show_all: bool, cap: int | None = None
) -> dict[str, Any]:
    """What the page shows of one value: its tree cut to the budget, or with ``show_all``
    the whole value as JSON text (its first ``cap`` characters, ``json_cut`` the rest's
    count); the text an edit starts from once all of it is shown."""
    size = _size(value)
    budget = _Budget(SHOW_NODES)
    tree = None if show_all else shape(value, budget)
    declared = type_name(decl.default) if decl is not None else None
    whole = show_all or not budget.cut
    editable = size <= EDIT_BYTES  # a larger one would not fit in one request to the listener
    text = _indented(value, size) if whole and (editable or show_all) else None
    edit = value if whole and declared == "str" and isinstance(value, str) else text
    shown, cut = (text if show_all else None), 0
    if shown is not None and cap is not None and len(shown) > cap:
        shown, cut = shown[:cap], len(shown) - cap
    return {
        "type": type_name(value),
        "declared_type": declared,
        "default": None if decl is None else decl.default,
        "bytes": size,
        "truncated": budget.cut,
        "tree": tree,
        "json": shown,
        "json_cut": cut,
        "edit": edit if editable else None,
        "editable": editable,
    }
