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
* one-line flow lists of such scalars (``['kw1*', "b"]``) and flow mappings of plain keys
  and such scalars (``{plugin: ADJUST, input: x}``), comments, blank lines.

Anything else — tabs, ``\\r``, anchors, aliases, tags, block scalars (``|``), nested
flow collections, ``---``, a plain scalar continued on the next line, a duplicate key,
a misplaced indentation — is left to libyaml, which writes the error message if any.
"""

from __future__ import annotations

import re
from collections.abc import Callable
from typing import Any

import yaml

from tmy.yamlfile.lines import HANDED_OVER, LineDict, LineList
from tmy.yamlfile.record import INDICATORS, read_record

_STR = "tag:yaml.org,2002:str"
# what libyaml refuses or reads specially anywhere in a file: leave such files to it
_UNSAFE = re.compile("[\x00-\x09\x0b-\x1f\x7f-\x9f\u2028\u2029\ufeff\ufffe\uffff\ud800-\udfff]")
# a line: its indentation, a list item's dash, a key, and the rest (the value or the item)
_LINE = re.compile(
    r"( *)(- +|-(?=\n|\Z))?(?:([A-Za-z_][A-Za-z0-9_.\-]*):(?: +|(?=\n|\Z)))?([^\n]*)\n?"
).match  # at a position of the text: the line starting there (one call per line)
# the first characters of a value that is plain text as written (minus those with a resolver)
_PLAIN_FIRST = frozenset(chr(c) for c in range(0x21, 0x7F)) - frozenset("-?:,[]{}#&*!|>'\"%@`")
_SINGLE = re.compile(r"'((?:[^']|'')*)'(?: +#.*| *)$").match
_DOUBLE = re.compile(r'"([^"\\]*)"(?: +#.*| *)$').match
_FLOW_ONE = re.compile(r"\['((?:[^']|'')*)'\](?: +#.*| *)$").match  # the common ['trigger']
_FLOW_EMPTY = re.compile(r"\[ *\](?: +#.*| *)$").match
# one item of a flow list and what follows it (',' or the closing ']')
_FLOW_ITEM = re.compile(
    r""" *(?:'((?:[^']|'')*)'|"([^"\\]*)"|([A-Za-z0-9_][\w .\-/+]*?)) *([,\]])"""
).match
# one entry of a one-line flow mapping (plain key, ": ", a scalar) and what follows it
_FLOW_ENTRY = re.compile(
    r""" *([A-Za-z_][A-Za-z0-9_\-]*): +"""
    r"""(?:'((?:[^']|'')*)'|"([^"\\]*)"|([A-Za-z0-9_][\w .\-/+]*?)) *([,}])"""
).match
_FLOW_MAP_EMPTY = re.compile(r"\{ *\}(?: +#.*| *)$").match
_TAIL = re.compile(r"(?: +#.*| *)$").match  # after a complete value: nothing, or a comment
_NOTHING = object()  # a key with no value on its line (or only a comment)
MAX_DEPTH = 200  # nested lists/maps in one file (both readers); the store keeps 254 levels
MAX_KEY = 1024  # characters: libyaml refuses a longer simple key


class _GiveUp(Exception):
    """The text is outside the subset: libyaml reads it."""


# an open collection: (the LineDict/LineList, its column, is it a list, is it the
# document's top-level ``rules:`` list)
_Frame = tuple[Any, int, bool, bool]


class _Reader:
    """One file's state: the open collections, the scalar resolver and the key cache."""

    def __init__(self, loader: Any, sink: Callable[[LineDict], None] | None) -> None:
        self.loader = loader
        self.sink = sink
        self.tags: dict[str, str] = {}
        self.resolved = frozenset(loader.yaml_implicit_resolvers)  # first characters
        # what loader.resolve tries for a plain scalar starting with a character, in order
        anywhere = loader.yaml_implicit_resolvers.get(None, [])
        self.resolvers = {
            c: [(tag, rx.match) for tag, rx in [*found, *anywhere]]
            for c, found in loader.yaml_implicit_resolvers.items()
        }
        self.keys: dict[str, Any] = {}
        self.stack: list[_Frame] = []

    def plain(self, text: str) -> Any:
        """A plain scalar's value, as SafeLoader resolves and constructs it."""
        if text[0] not in self.resolved:
            return text  # no implicit resolver starts with this character: a string
        tag = self.tags.get(text)
        if tag is None:  # loader.resolve(ScalarNode, text, (True, False)), without a path
            tag = next((t for t, match in self.resolvers[text[0]] if match(text)), _STR)
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
            one = _FLOW_ONE(text)
            if one is not None and len(self.stack) < MAX_DEPTH:
                items = LineList((one.group(1).replace("''", "'"),))
                items.line = line
                items.item_lines = [line]
                return items
            return self.flow(text, line)
        if first == "{":
            return self.flow_map(text, line)
        if first == "#":
            return _NOTHING
        if first in INDICATORS and (first not in "-" or text[1:2] in ("", " ")):
            raise _GiveUp
        cut = text.find(" #")
        if cut >= 0:
            text = text[:cut]
        text = text.rstrip(" ")
        if ": " in text or text.endswith(":"):
            raise _GiveUp
        return self.plain(text)

    def flow(self, text: str, line: int) -> LineList:
        """A one-line flow list of scalars: ``[a, 'b, c', "d"]``."""
        if len(self.stack) >= MAX_DEPTH:  # a nesting level, as libyaml's path counts it
            raise _GiveUp
        items = LineList()
        items.line = line
        items.item_lines = []
        empty = _FLOW_EMPTY(text)
        if empty is not None:
            return items
        pos, end = 1, ","
        while end == ",":
            m = _FLOW_ITEM(text, pos)
            if m is None:
                raise _GiveUp
            single, double, plain, end = m.groups()
            if single is not None:
                items.append(single.replace("''", "'"))
            elif double is not None:
                items.append(double)
            else:
                items.append(self.plain(plain))
            items.item_lines.append(line)
            pos = m.end()
        if _TAIL(text, pos) is None:
            raise _GiveUp
        return items

    def flow_map(self, text: str, line: int) -> LineDict:
        """A one-line flow mapping of plain keys and scalars: ``{plugin: ADJUST, input: x}``."""
        if len(self.stack) >= MAX_DEPTH:  # a nesting level, as libyaml's path counts it
            raise _GiveUp
        box = LineDict()
        box.line = line
        box.key_lines = {}
        if _FLOW_MAP_EMPTY(text) is not None:
            return box
        pos, end = 1, ","
        while end == ",":
            m = _FLOW_ENTRY(text, pos)
            if m is None:
                raise _GiveUp
            key_text, single, double, plain, end = m.groups()
            key = self.keys.get(key_text)
            if key is None:
                key = self.key(key_text)
            if single is not None:
                found: Any = single.replace("''", "'")
            else:
                found = double if double is not None else self.plain(plain)
            self.put(box, key, line, found)
            pos = m.end()
        if _TAIL(text, pos) is None:
            raise _GiveUp
        return box

    def key(self, text: str) -> Any:
        """A plain key's value: a string, or a bool or int as SafeLoader resolves it."""
        if len(text) > MAX_KEY:
            raise _GiveUp
        key = self.plain(text)
        if key is None or type(key) not in (str, bool, int):
            raise _GiveUp
        self.keys[text] = key
        return key

    def open(self, is_list: bool, col: int, line: int, key: Any, key_line: int) -> _Frame:
        """A block collection starts at ``col`` on ``line``: the value of ``key`` in the
        mapping on top, an item of the list on top, or the document."""
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
            if top[2]:
                top[0].append(box)
                top[0].item_lines.append(line)
            else:
                rules = is_list and len(stack) == 1 and key == "rules"
                self.put(top[0], key, key_line, box)
            if len(stack) >= MAX_DEPTH:  # libyaml's path names the error
                raise _GiveUp
        frame = (box, col, is_list, rules)
        stack.append(frame)
        return frame

    def put(self, box: LineDict, key: Any, line: int, value: Any) -> None:
        if key in box:
            raise _GiveUp  # a duplicate key: libyaml's path says where the first one is
        box[key] = value
        box.key_lines[key] = line

    def after_key(
        self, top: _Frame, col: int, dash: str | None, line: int, key: Any, key_line: int
    ) -> _Frame:
        """The line after a key written with no value: its block value starts here, or the
        key's value is null; the new top."""
        if col > top[1] or (col == top[1] and dash):
            return self.open(bool(dash), col, line, key, key_line)
        self.put(top[0], key, key_line, None)
        return top

    def item(self, top: _Frame, item: Any, line: int) -> None:
        """A list item written on its dash's line (a rule as a flow mapping: to the sink)."""
        if item is _NOTHING:
            raise _GiveUp
        top[0].item_lines.append(line)
        if top[3] and self.sink is not None and type(item) is LineDict:
            top[0].append(HANDED_OVER)
            self.sink(item)
        else:
            top[0].append(item)

    def close(self) -> _Frame:
        """The innermost collection ends (a rule goes to the sink); the new top."""
        stack = self.stack
        box, _, is_list, _ = stack.pop()
        if self.sink is not None and len(stack) == 2 and stack[1][3] and not is_list:
            rules = stack[1][0]
            if rules[-1] is box:
                rules[-1] = HANDED_OVER
                self.sink(box)
        if not stack:
            raise _GiveUp  # something after the document's end, at a lower column
        return stack[-1]

    def record(self, text: str, at: int, line: int, plain_first: frozenset[str]) -> int:
        """A rule read whole (:func:`read_record`) goes to the top-level list (or the sink);
        the position after it, or 0: its lines are read one by one."""
        found = read_record(text, at, line, self.plain, plain_first)
        if found is None:
            return 0
        rule, end = found
        rules = self.stack[-1][0]
        rules.item_lines.append(line)
        if self.sink is None:
            rules.append(rule)
        else:
            rules.append(HANDED_OVER)
            self.sink(rule)
        return end

    def read(self, text: str) -> Any:
        """The document, line by line (see the module docstring); _GiveUp outside the subset."""
        stack, keys, value, put = self.stack, self.keys, self.value, self.put
        plain_first = _PLAIN_FIRST - self.resolved  # a value starting so is a string as written
        root = None
        pending: Any = _NOTHING  # a key on the line above waiting for its block value
        pending_line = 0
        pos, size, number = 0, len(text), 0
        while pos < size:  # one line at a time, each matched where it starts
            number += 1
            m = _LINE(text, pos)
            pos = m.end()  # type: ignore[union-attr]
            indent, dash, key_text, rest = m.groups()  # type: ignore[union-attr]
            if not dash and not key_text:
                if not rest or rest[0] == "#":
                    continue  # blank, or only a comment
                raise _GiveUp
            col = len(indent)
            if stack:
                top = stack[-1]
                if pending is not _NOTHING:
                    top = self.after_key(top, col, dash, number, pending, pending_line)
                    pending = _NOTHING
                while top[1] > col:
                    top = self.close()
                if top[2] and top[1] == col and not dash:
                    top = self.close()  # a list at its key's column ends at the next key
            else:
                if root is not None or col:
                    raise _GiveUp
                top = self.open(bool(dash), 0, number, None, 0)
                root = top[0]
            if top[1] != col:
                raise _GiveUp
            if dash:
                if not top[2]:
                    raise _GiveUp
                if top[3] and key_text == "id" and dash == "- ":
                    end = self.record(text, m.start(), number, plain_first)  # type: ignore[union-attr]
                    if end:
                        pos, number = end, number + 4
                        continue
                if not key_text:
                    self.item(top, value(rest, number) if rest else _NOTHING, number)
                    continue
                top = self.open(False, col + len(dash), number, None, 0)  # "- key: …"
            elif top[2]:
                raise _GiveUp
            key = keys.get(key_text)
            if key is None:
                key = self.key(key_text)
            if rest:
                r0, r9 = rest[0], rest[-1]  # plain text as written (what value() reads)?
                if r0 in plain_first and ": " not in rest and " #" not in rest and r9 != ":":
                    found: Any = rest.rstrip(" ") if r9 == " " else rest
                else:
                    found = value(rest, number)
                    if found is _NOTHING:
                        pending, pending_line = key, number
                        continue
                box = top[0]
                if key in box:
                    raise _GiveUp  # a duplicate key: libyaml's path says where the first is
                box[key] = found
                box.key_lines[key] = number
                continue
            pending, pending_line = key, number
        if pending is not _NOTHING:
            put(stack[-1][0], pending, pending_line, None)
        while len(stack) > 1:
            self.close()
        stack.clear()
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
