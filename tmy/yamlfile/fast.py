"""A line reader for the plain shape most rules files have, checked against libyaml's rules.

Loading 100,000 rules through libyaml's events costs a Python object per event
(17 per rule) before any of them is read; this module reads the common subset
of block YAML line by line instead, building the same :class:`LineDict` /
:class:`LineList` values with the same lines, and gives up (``None``) on
anything outside it, so the caller parses the file with libyaml as before.
Giving up is always safe; what it accepts must read exactly as libyaml reads
it. The subset:

* block mappings whose keys are plain identifiers (``id``, ``on_error``,
  ``case-sensitive``), block lists (``- item``, also at their key's column) and
  a mapping started on a list item's line (``- id: r1``);
* single-line scalars: plain (resolved as SafeLoader resolves them: ``yes``,
  ``0x10``, ``~``, dates), single-quoted, double-quoted without a backslash;
* one-line flow lists of such scalars (``['kw1*', "b"]``), comments, blank lines.

Anything else — tabs, ``\\r``, anchors, aliases, tags, block scalars (``|``),
flow mappings, ``---``, a plain scalar continued on the next line, a
duplicate key, a misplaced indentation — is left to libyaml, which also writes
the error message when there is one.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml

from tmy.yamlfile.lines import HANDED_OVER, LineDict, LineList

_STR = "tag:yaml.org,2002:str"
# what libyaml refuses or reads specially anywhere in a file: leave such files to it
_UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")
# a line: its indentation, a list item's dash, a key, and the rest (the value or the item)
_LINE = re.compile(r"( *)(- +|-$)?(?:([A-Za-z_][A-Za-z0-9_.\-]*):(?: +|$))?(.*)").fullmatch
_SINGLE = re.compile(r"'((?:[^']|'')*)'(?: +#.*| *)$").match
_DOUBLE = re.compile(r'"([^"\\]*)"(?: +#.*| *)$').match
_FLOW = re.compile(r"\[([^\[\]{}#]*)\](?: +#.*| *)$").match
_FLOW_ITEM = re.compile(r""" *(?:'((?:[^']|'')*)'|"([^"\\]*)"|([A-Za-z0-9_][\w .\-/+]*?)) *$""")
_INDICATORS = frozenset("-?:,[]{}#&*!|>'\"%@`")
_NOTHING = object()  # a key with no value on its line (or only a comment)


class _GiveUp(Exception):
    """The text is outside the subset: libyaml reads it."""


class _Frame:
    __slots__ = ("box", "col", "is_list", "key", "key_line", "rules", "seen")

    def __init__(self, box: Any, col: int, rules: bool = False) -> None:
        self.box = box
        self.col = col
        self.is_list = type(box) is LineList
        self.key: Any = None  # a mapping's key waiting for a block value on the lines below
        self.key_line = 0
        self.rules = rules  # this list is the document's top-level ``rules:``


class _Reader:
    """One file's state: the open collections, the scalar resolver and the key cache."""

    def __init__(self, loader: Any, sink: Callable[[LineDict], None] | None) -> None:
        self.loader = loader
        self.sink = sink
        self.tags: dict[str, str] = {}
        self.resolved = frozenset(loader.yaml_implicit_resolvers)  # first characters
        self.keys: dict[str, Any] = {}
        self.stack: list[_Frame] = []

    def plain(self, text: str) -> Any:
        """A plain scalar's value, as SafeLoader resolves and constructs it."""
        if text[0] not in self.resolved:
            return text  # no implicit resolver starts with this character: a string
        tag = self.tags.get(text)
        if tag is None:
            tag = self.loader.resolve(yaml.ScalarNode, text, (True, False))
            if len(self.tags) < 10_000:
                self.tags[text] = tag
        if tag == _STR:
            return text
        try:
            return self.loader.construct_object(yaml.ScalarNode(tag, text), deep=True)
        except (ValueError, yaml.YAMLError):  # e.g. an int past the digit limit: see source
            raise _GiveUp from None

    def value(self, text: str, line: int) -> Any:
        """A value written on the line (``text`` starts with no space): a scalar or a flow
        list; ``_NOTHING`` for only a comment — the caller decides what follows."""
        first = text[0]
        if first == "'":
            m = _SINGLE(text)
            if m is None:
                raise _GiveUp
            return m.group(1).replace("''", "'")
        if first == '"':
            m = _DOUBLE(text)
            if m is None:
                raise _GiveUp
            return m.group(1)
        if first == "[":
            return self.flow(text, line)
        if first == "#":
            return _NOTHING
        if first in _INDICATORS and (first not in "-" or text[1:2] in ("", " ")):
            raise _GiveUp
        cut = text.find(" #")
        if cut >= 0:
            text = text[:cut]
        text = text.rstrip(" ")
        if ": " in text or text.endswith(":"):
            raise _GiveUp
        return self.plain(text)

    def flow(self, text: str, line: int) -> LineList:
        m = _FLOW(text)
        if m is None:
            raise _GiveUp
        items = LineList()
        items.line = line
        items.item_lines = []
        body = m.group(1)
        if not body.strip(" "):
            return items
        for part in body.split(","):
            f = _FLOW_ITEM.match(part)
            if f is None:
                raise _GiveUp
            single, double, plain = f.groups()
            if single is not None:
                items.append(single.replace("''", "'"))
            elif double is not None:
                items.append(double)
            else:
                items.append(self.plain(plain))
            items.item_lines.append(line)
        return items

    def open(self, is_list: bool, col: int, line: int) -> _Frame:
        """A block collection starts at ``col`` on ``line``, as the pending key's value or
        an item of the list on top (or as the document)."""
        box: Any
        if is_list:
            box = LineList()
            box.item_lines = []
        else:
            box = LineDict()
            box.key_lines = {}
        box.line = line
        stack = self.stack
        rules = False
        if stack:
            top = stack[-1]
            if top.is_list:
                top.box.append(box)
                top.box.item_lines.append(line)
            else:
                rules = len(stack) == 1 and top.key == "rules" and is_list
                self.put(top, top.key, top.key_line, box)
                top.key = None
        if len(stack) >= 200:  # MAX_DEPTH: libyaml's path names the error
            raise _GiveUp
        frame = _Frame(box, col, rules)
        stack.append(frame)
        return frame

    def put(self, frame: _Frame, key: Any, line: int, value: Any) -> None:
        box = frame.box
        if key in box.key_lines:
            raise _GiveUp  # a duplicate key: libyaml's path says where the first one is
        box[key] = value
        box.key_lines[key] = line

    def close(self) -> None:
        """The innermost collection ends: a pending key gets null, a rule goes to the sink."""
        frame = self.stack.pop()
        if frame.key is not None:
            self.put(frame, frame.key, frame.key_line, None)
            frame.key = None
        stack = self.stack
        if self.sink is not None and len(stack) == 2 and stack[1].rules and not frame.is_list:
            parent = stack[1].box
            if parent[-1] is frame.box:
                parent[-1] = HANDED_OVER
                self.sink(frame.box)

    def entry(self, frame: _Frame, key_text: str, text: str, line: int) -> None:
        """``key: value`` or ``key:`` (``text`` empty) in the mapping ``frame``."""
        key = self.keys.get(key_text)
        if key is None:
            key = self.keys[key_text] = self.plain(key_text)
            if key is None or type(key) not in (str, bool, int):
                raise _GiveUp
        if text:
            value = self.value(text, line)
            if value is not _NOTHING:
                box = frame.box
                if key in box:
                    raise _GiveUp  # a duplicate key: libyaml's path says where the first is
                box[key] = value
                box.key_lines[key] = line
                return
        frame.key, frame.key_line = key, line

    def item(self, frame: _Frame, text: str, line: int) -> None:
        """``- value`` of the list ``frame``: a scalar or a flow list."""
        value = self.value(text, line) if text else _NOTHING
        if value is _NOTHING:
            raise _GiveUp
        frame.box.append(value)
        frame.box.item_lines.append(line)

    def read(self, text: str) -> Any:
        stack = self.stack
        root = None
        for number, raw in enumerate(text.split("\n"), 1):
            m = _LINE(raw)
            assert m is not None  # every line matches: (.*) takes what is left
            indent, dash, key_text, rest = m.groups()
            if dash is None and key_text is None:
                if not rest or rest[0] == "#":
                    continue  # blank, or only a comment
                raise _GiveUp
            col = len(indent)
            is_item = dash is not None
            if stack:
                top = stack[-1]
                if top.key is not None:  # a key waiting for its block value
                    if col > top.col or (col == top.col and is_item):
                        top = self.open(is_item, col, number)
                    else:
                        self.put(top, top.key, top.key_line, None)
                        top.key = None
                while top.col > col:
                    self.close()
                    if not stack:
                        raise _GiveUp
                    top = stack[-1]
                if top.is_list and top.col == col and not is_item:
                    self.close()  # a list at its key's column ends at the next key
                    if not stack:
                        raise _GiveUp
                    top = stack[-1]
            else:
                if root is not None or col != 0:
                    raise _GiveUp
                top = self.open(is_item, col, number)
                root = top.box
            if top.col != col:
                raise _GiveUp
            if is_item:
                if not top.is_list:
                    raise _GiveUp
                if key_text is None:
                    self.item(top, rest, number)
                    continue
                top = self.open(False, col + len(dash), number)  # "- key: …" starts a mapping
            elif top.is_list:
                raise _GiveUp
            self.entry(top, key_text, rest, number)
        while stack:
            self.close()
        return root


def read_simple(text: str, loader: Any, sink: Callable[[LineDict], None] | None = None) -> Any:
    """``text``'s document when it is inside the subset (see the module docstring), else
    the :data:`GIVE_UP` marker. ``loader``: a SafeLoader, for resolving plain scalars."""
    if _UNSAFE.search(text) is not None:
        return GIVE_UP
    try:
        return _Reader(loader, sink).read(text)
    except _GiveUp:
        return GIVE_UP


GIVE_UP = object()
