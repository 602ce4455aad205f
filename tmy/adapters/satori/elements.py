"""Satori's message elements (satori.chat, "消息编码"): the XHTML-like text a message's
``content`` is written in, read into a tree and written back.

The syntax is small: text with ``&quot; &amp; &lt; &gt;`` and ``&#…;``/``&#x…;``
escapes, tags ``<name attr="v" flag/>``, ``<name …>…</name>``, comments ``<!-- -->``.
An element name may carry a platform prefix (``<chronocat:face>``, ``<qq:passive>``).
A closing tag with no open one is text, as the protocol says; a tag left open takes
the rest of its parent. A whitespace run holding a line break at either end of a
text is dropped (the protocol's rule for indented markup), any other whitespace is
kept — so a user's blank lines survive (satori-python-core's parser strips every
blank line of the text, which is why tmy reads elements itself).
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

# a tag at a "<": an attribute name holds no "<" or quote, so an unclosed tag ends its try at
# the next "<" (the parse stays linear in the content's length)
_TAG = re.compile(
    r"<(/?)([A-Za-z][\w:-]*)((?:\s+[^\s=/<>\"']+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'))?)*)\s*(/?)>"
)
_ATTR = re.compile(r"([^\s=/<>\"']+)(?:\s*=\s*(?:\"([^\"]*)\"|'([^']*)'))?")
MAX_DEPTH = 32  # open elements kept nested; a deeper start tag is read as if self-closing
_ENTITY = re.compile(r"&(#\d{1,7}|#[xX][0-9a-fA-F]{1,6}|quot|amp|lt|gt|apos);")
_NAMED = {"quot": '"', "amp": "&", "lt": "<", "gt": ">", "apos": "'"}
_LEAD = re.compile(r"^\s*\n\s*")
_TRAIL = re.compile(r"\s*\n\s*$")


@dataclass(slots=True)
class Element:
    """One element: ``type`` "text" (its ``text``) or a tag with attributes and children.

    An attribute written bare (``<message forward/>``) is True, ``no-x`` is ``x`` False.
    """

    type: str
    attrs: dict[str, str | bool] = field(default_factory=dict)
    children: list[Element] = field(default_factory=list)
    text: str = ""

    def attr(self, name: str) -> str:
        """The attribute as text ("" when absent or a bare flag)."""
        value = self.attrs.get(name, "")
        return value if isinstance(value, str) else ""


def escape(text: str, *, attribute: bool = False) -> str:
    """``text`` safe inside content (``& < >``) or inside a double-quoted attribute (also ``"``)."""
    out = text.replace("&", "&amp;").replace("<", "&lt;").replace(">", "&gt;")
    return out.replace('"', "&quot;") if attribute else out


def unescape(text: str) -> str:
    """The characters the escapes stand for, in one pass (``&amp;lt;`` stays ``&lt;``)."""

    def one(match: re.Match[str]) -> str:
        name = match.group(1)
        if name[0] != "#":
            return _NAMED[name]
        code = int(name[2:], 16) if name[1] in "xX" else int(name[1:])
        return chr(code) if 0 < code <= 0x10FFFF and not 0xD800 <= code <= 0xDFFF else match[0]

    return _ENTITY.sub(one, text) if "&" in text else text


def parse(content: str) -> list[Element]:
    """``content`` as a list of top-level elements (see the module docstring).

    One pass, linear in the content's length whatever it holds (an unclosed comment or
    tag, thousands of nested elements), and never deeper than :data:`MAX_DEPTH`: a
    start tag past it is kept without children, its text going to its parent, so a
    reader that walks the tree cannot run out of stack.
    """
    root = Element("template")
    stack: list[Element] = [root]
    deeper: dict[str, int] = {}  # start tags past MAX_DEPTH still open, by name
    pos = 0
    comments = True  # False once a "<!--" has no "-->" after it (nor can a later one)
    at = content.find("<")
    while at >= 0:
        if comments and content.startswith("<!--", at):
            end = content.find("-->", at + 4)
            if end >= 0:
                _text(stack[-1], content[pos:at])
                pos = end + 3
                at = content.find("<", pos)
                continue
            comments = False
        match = _TAG.match(content, at)
        if match is None:  # a "<" that starts no tag is text
            at = content.find("<", at + 1)
            continue
        _text(stack[-1], content[pos:at])
        pos = match.end()
        at = content.find("<", pos)
        _tag(stack, deeper, match)
    _text(stack[-1], content[pos:])
    return root.children


def _tag(stack: list[Element], deeper: dict[str, int], match: re.Match[str]) -> None:
    """One start, end or self-closing tag onto the open elements ``stack`` (``deeper``:
    those open past :data:`MAX_DEPTH`, whose end tags close nothing on the stack)."""
    closing, name, attrs, empty = match.group(1), match.group(2), match.group(3), match.group(4)
    if closing and deeper.get(name):
        deeper[name] -= 1
        return
    if closing:
        for depth in range(len(stack) - 1, 0, -1):
            if stack[depth].type == name:
                del stack[depth:]
                return
        _text(stack[-1], match[0], raw=True)  # no such open element: the tag is text
        return
    element = Element(name, _attributes(attrs or ""))
    stack[-1].children.append(element)
    if empty:
        return
    if len(stack) <= MAX_DEPTH:
        stack.append(element)
    else:
        deeper[name] = deeper.get(name, 0) + 1


def _attributes(source: str) -> dict[str, str | bool]:
    attrs: dict[str, str | bool] = {}
    for match in _ATTR.finditer(source):
        key, double, single = match.group(1), match.group(2), match.group(3)
        value = double if double is not None else single
        if value is not None:
            attrs[key] = unescape(value)
        elif key.startswith("no-"):
            attrs[key[3:]] = False
        else:
            attrs[key] = True
    return attrs


def _text(parent: Element, source: str, *, raw: bool = False) -> None:
    """Add ``source`` to ``parent`` as text (merged with a text just before it)."""
    if not raw:
        source = _TRAIL.sub("", _LEAD.sub("", source))
        source = unescape(source)
    if not source:
        return
    last = parent.children[-1] if parent.children else None
    if last is not None and last.type == "text":
        last.text += source
    else:
        parent.children.append(Element("text", text=source))


def tag(name: str, attrs: dict[str, str] | None = None, inner: str = "") -> str:
    """One element written out: ``<name a="v"/>``, or with ``inner`` (already encoded)."""
    written = "".join(f' {k}="{escape(v, attribute=True)}"' for k, v in (attrs or {}).items())
    return f"<{name}{written}>{inner}</{name}>" if inner else f"<{name}{written}/>"
