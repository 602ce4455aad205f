"""YAML reading that remembers lines, so every rule error can say where it is.

Mappings load as :class:`LineDict` (``.line`` of the mapping, ``.key_lines``
for each key) and sequences as :class:`LineList` (``.item_lines``). Duplicate
keys, which PyYAML would silently collapse, are an error. So are nesting deeper
than ``MAX_DEPTH`` (everything downstream recurses) and aliases that would
repeat more than ``MAX_ALIAS_BYTES`` (a "billion laughs" file). A syntax
error names the line to fix, with a hint (:mod:`tmy.yamlfile.hints`).
"""

from __future__ import annotations

from collections.abc import Callable
from pathlib import Path
from typing import Any

import yaml

from tmy.errors import RuleError
from tmy.yamlfile.fast import GIVE_UP, MAX_DEPTH, read_simple
from tmy.yamlfile.hints import diagnose, message
from tmy.yamlfile.lines import HANDED_OVER, LineDict, LineList

__all__ = ["HANDED_OVER", "MAX_DEPTH", "LineDict", "LineList", "Sink", "read_yaml"]

_Base = getattr(yaml, "CSafeLoader", yaml.SafeLoader)
Sink = Callable[[LineDict | None], None]
"""Given each rule of the top-level ``rules:`` list as soon as it is read (the list keeps
:data:`HANDED_OVER` in its place), and ``None`` when reading starts over (forget them)."""


class _LineLoader(_Base):  # type: ignore[misc, valid-type]
    """SafeLoader (libyaml's C parser when available): we only take its events."""


_NOKEY = object()
_STR = "tag:yaml.org,2002:str"
_MERGE = "tag:yaml.org,2002:merge"


# MAX_DEPTH (tmy.yamlfile.fast): nested lists/maps in one file; the store keeps 254 levels
MAX_ALIAS_BYTES = 4_000_000  # bytes that aliases may add by repetition (billion laughs)
VALUE_BYTES = 32  # what each value counts for on top of its text (its memory, roughly)


class _Frame:
    __slots__ = ("anchor", "container", "height", "is_list", "key", "key_line", "merges",
                 "merging", "size")  # fmt: skip

    def __init__(self, container: Any, anchor: str | None) -> None:
        self.container = container
        self.anchor = anchor
        self.is_list = isinstance(container, LineList)
        self.size = VALUE_BYTES  # bytes inside, counting what aliases repeat
        self.height = 0  # levels of lists/maps inside, aliased ones included
        self.key: Any = _NOKEY
        self.key_line = 0
        self.merges: list[tuple[Any, int]] = []
        self.merging = False


class _Composer:
    """The state of one :func:`_compose` run and what each kind of event does to it."""

    def __init__(self, loader: Any, sink: Sink | None = None) -> None:
        self.loader = loader
        self.sink = sink
        self.anchors: dict[str, Any] = {}
        self.sizes: dict[str, int] = {}  # anchor -> bytes inside it
        self.heights: dict[str, int] = {}  # anchor -> levels of lists/maps it is, itself included
        self.repeated = 0  # bytes added by aliases so far
        self.plain_tags: dict[str, str] = {}  # plain scalar -> resolved tag (keys repeat a lot)
        self.stack: list[_Frame] = []
        self.open_boxes: set[int] = set()  # ids of the collections still being read
        self.root: Any = None
        self.documents = 0

    def add(self, value: Any, line: int, size: int = VALUE_BYTES) -> None:
        """Put ``value`` into the collection being read (or make it the document)."""
        if not self.stack:
            self.root = value
            return
        top = self.stack[-1]
        top.size += size
        box = top.container
        if top.is_list:
            box.append(value)
            box.item_lines.append(line)
        elif top.key is _NOKEY:
            try:
                seen = value in box.key_lines
            except TypeError:
                raise RuleError(
                    f"a mapping key must be a plain value, got {value!r}", line=line
                ) from None
            if seen:
                raise RuleError(
                    f"duplicate key {value!r} (first on line {box.key_lines[value]})", line=line
                )
            top.key, top.key_line = value, line
        elif top.merging:
            top.merges.append((value, top.key_line))
            top.key, top.merging = _NOKEY, False
        else:
            box[top.key] = value
            box.key_lines[top.key] = top.key_line
            top.key = _NOKEY

    def scalar(self, event: Any, tag: str, line: int) -> None:
        """A scalar the inlined string path in :func:`_compose` did not place."""
        stack = self.stack
        if tag == _STR:
            value: Any = event.value
        elif (
            tag == _MERGE
            and stack
            and not isinstance(stack[-1].container, LineList)
            and stack[-1].key is _NOKEY
        ):
            stack[-1].merging = True
            stack[-1].key = "<<"
            stack[-1].key_line = line
            return
        else:
            node = yaml.ScalarNode(tag, event.value, event.start_mark, event.end_mark)
            try:
                value = self.loader.construct_object(node, deep=True)
            except ValueError as exc:  # an int past Python's 4,300-digit conversion limit
                raise RuleError(
                    f"{event.value[:20]}… cannot be read as a number ({exc}): quote it to keep "
                    "it as text",
                    line=line,
                ) from None
        size = VALUE_BYTES + len(event.value)
        if event.anchor:
            self.anchors[event.anchor] = value
            self.sizes[event.anchor] = size
            self.heights.pop(event.anchor, None)  # a name may be anchored again
        self.add(value, line, size)

    def start(self, event: Any, is_map: bool, line: int) -> None:
        """A mapping or list opens."""
        if len(self.stack) >= MAX_DEPTH:
            raise RuleError(
                f"YAML nested more than {MAX_DEPTH} levels deep: flatten the data", line=line
            )
        box: Any = LineDict() if is_map else LineList()
        box.line = line
        if is_map:
            box.key_lines = {}
        else:
            box.item_lines = []
        if event.anchor:
            self.anchors[event.anchor] = box
            self.open_boxes.add(id(box))
        self.stack.append(_Frame(box, event.anchor))

    def end(self) -> None:
        """The innermost mapping or list closes: merge keys apply, sizes and depths carry up."""
        frame = self.stack.pop()
        box = frame.container
        self.open_boxes.discard(id(box))
        if frame.merges:
            _apply_merges(box, frame.merges)
        height = frame.height + 1
        if frame.anchor:
            self.sizes[frame.anchor] = frame.size
            self.heights[frame.anchor] = height
        stack = self.stack
        if stack and stack[-1].height < height:
            stack[-1].height = height
        if self.sink is not None and len(stack) == 2 and type(box) is LineDict:
            outer, rules = stack
            if outer.key == "rules" and rules.is_list and not outer.is_list:
                self.add(HANDED_OVER, box.line, frame.size)
                self.sink(box)
                return
        self.add(box, box.line, frame.size)

    def alias(self, event: Any, line: int) -> None:
        """``*name``: the anchored value again, counted against depth and the alias budget."""
        name = event.anchor
        if name not in self.anchors:
            raise RuleError(
                f"YAML error: found undefined alias {name!r} ('*' starts an alias "
                f'in YAML: quote a value that starts with it, "*{name}")',
                line=line,
            )
        if id(self.anchors[name]) in self.open_boxes:
            raise RuleError(
                f"YAML alias *{name} is inside the collection it names (a cycle)", line=line
            )
        height = self.heights.get(name, 0)
        if len(self.stack) + height > MAX_DEPTH:  # an alias of deep data, deep down
            raise RuleError(
                f"YAML nested more than {MAX_DEPTH} levels deep (through *{name}):"
                " flatten the data",
                line=line,
            )
        if self.stack and self.stack[-1].height < height:
            self.stack[-1].height = height
        size = self.sizes.get(name, VALUE_BYTES)
        self.repeated += size
        if self.repeated > MAX_ALIAS_BYTES:
            raise RuleError(
                f"YAML aliases repeat more than {MAX_ALIAS_BYTES:,} bytes "
                f"(*{name} here): flatten the data or use fewer aliases",
                line=line,
            )
        self.add(self.anchors[name], line, size)

    def document(self, line: int) -> None:
        self.documents += 1
        if self.documents > 1:
            raise RuleError("a rules file must hold one YAML document (found '---' again)",
                            line=line)  # fmt: skip


def _compose(loader: Any, sink: Sink | None = None) -> Any:
    """Build LineDict/LineList values straight from parser events.

    PyYAML's own path builds a node tree of the whole document and then walks
    it in Python; for a 100,000-rule file that is most of the load time and
    most of the peak memory. Scalars still resolve exactly as SafeLoader does
    (YAML 1.1: yes/no booleans, ints, floats, null, timestamps), anchors,
    aliases and ``<<`` merge keys behave the same, and a duplicate key is an
    error instead of a silent overwrite. The commonest event, a string going
    into the collection being read, is handled right here in the loop; the
    rest go to :class:`_Composer`.
    """
    composer = _Composer(loader, sink)
    stack, plain_tags = composer.stack, composer.plain_tags
    while True:
        event = loader.get_event()
        kind = type(event)
        line = event.start_mark.line + 1 if event.start_mark else 0
        if kind is yaml.ScalarEvent:
            tag = event.tag
            if tag is None or tag == "!":
                if event.implicit[0]:  # plain: resolution depends on the text only
                    tag = plain_tags.get(event.value)
                    if tag is None:
                        tag = loader.resolve(yaml.ScalarNode, event.value, event.implicit)
                        if len(plain_tags) < 10_000:
                            plain_tags[event.value] = tag
                else:  # quoted: always a string (what SafeLoader's resolver says too)
                    tag = _STR
            if tag == _STR and stack and not event.anchor:  # the common case, inlined
                top = stack[-1]
                top.size += VALUE_BYTES + len(event.value)
                if top.is_list:
                    top.container.append(event.value)
                    top.container.item_lines.append(line)
                    continue
                if top.key is not _NOKEY and not top.merging:
                    top.container[top.key] = event.value
                    top.container.key_lines[top.key] = top.key_line
                    top.key = _NOKEY
                    continue
            composer.scalar(event, tag, line)
        elif kind is yaml.MappingStartEvent or kind is yaml.SequenceStartEvent:
            composer.start(event, kind is yaml.MappingStartEvent, line)
        elif kind is yaml.MappingEndEvent or kind is yaml.SequenceEndEvent:
            composer.end()
        elif kind is yaml.AliasEvent:
            composer.alias(event, line)
        elif kind is yaml.DocumentStartEvent:
            composer.document(line)
        elif kind is yaml.StreamEndEvent:
            return composer.root


def _apply_merges(box: LineDict, merges: list[tuple[Any, int]]) -> None:
    """``<<: *base`` / ``<<: [*a, *b]``: keys written here win, then the first map listed."""
    maps: list[tuple[dict, int]] = []
    for value, line in merges:
        items = value if isinstance(value, list) else [value]
        for item in items:
            if not isinstance(item, dict):
                raise RuleError("a '<<' merge key needs a mapping or a list of mappings",
                                line=line)  # fmt: skip
            maps.append((item, line))
    for item, _ in reversed(maps):
        for key, value in item.items():
            if key not in box.key_lines:
                box[key] = value
    for item, line in maps:
        for key in item:
            box.key_lines.setdefault(key, line)


def _read_simple(text: str, sink: Sink | None) -> Any:
    """:func:`read_simple` with a loader that only resolves scalars (on no text: libyaml
    is given no copy of a file it does not read)."""
    loader = _LineLoader("")
    try:
        return read_simple(text, loader, sink)
    finally:
        loader.dispose()


def read_yaml(path: Path, text: str | None = None, sink: Sink | None = None) -> Any:
    """Parse one YAML file; RuleError with file and line on any syntax problem.

    The plain shape most rules files have is read line by line
    (:mod:`tmy.yamlfile.fast`), anything else from libyaml's events. With ``sink``,
    each rule of the top-level ``rules:`` list goes to it as soon as it is read, so
    a caller can compile it and let its raw form go before the next one is read.
    """
    name = str(path)
    try:
        if text is None:
            text = path.read_text(encoding="utf-8")
    except (OSError, UnicodeDecodeError) as exc:
        raise RuleError(f"cannot read: {exc}", file=name) from None
    try:
        doc = _read_simple(text, sink)
        if doc is not GIVE_UP:
            return doc
        if sink is not None:
            sink(None)  # libyaml reads the file from the start
        loader = _LineLoader(text)
        try:
            return _compose(loader, sink)
        finally:
            loader.dispose()
    except RuleError as exc:
        raise RuleError(exc.message, file=name, line=exc.line) from None
    except yaml.MarkedYAMLError as exc:
        line, what, hint = diagnose(text, exc)
        where = f"{name}:{line}" if line else name
        raise RuleError(message(what, hint, where), file=name, line=line) from None
    except yaml.YAMLError as exc:
        raise RuleError(f"YAML error: {exc}", file=name) from None
