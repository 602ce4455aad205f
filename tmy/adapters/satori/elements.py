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

_TOKEN = re.compile(
    r"<!--[\s\S]*?-->"  # a comment
    r"|<(/?)([A-Za-z][\w:-]*)((?:\s+[^\s=/>]+(?:\s*=\s*(?:\"[^\"]*\"|'[^']*'))?)*)\s*(/?)>"
)
_ATTR = re.compile(r"([^\s=/>]+)(?:\s*=\s*(?:\"([^\"]*)\"|'([^']*)'))?")
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
    """``content`` as a list of top-level elements (see the module docstring)."""
    root = Element("template")
    stack: list[Element] = [root]
    pos = 0
    for match in _TOKEN.finditer(content):
        _text(stack[-1], content[pos : match.start()])
        pos = match.end()
        closing, name, attrs, empty = match.group(1), match.group(2), match.group(3), match.group(4)
        if name is None:  # a comment
            continue
        if closing:
            opened = [i for i, e in enumerate(stack) if i and e.type == name]
            if opened:
                del stack[opened[-1] :]
            else:
                _text(stack[-1], match[0], raw=True)
            continue
        element = Element(name, _attributes(attrs or ""))
        stack[-1].children.append(element)
        if not empty:
            stack.append(element)
    _text(stack[-1], content[pos:])
    return root.children


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
