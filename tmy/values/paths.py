"""Variable paths: ``name[key][0][key2]``.

A path names a position inside a variable: the root name, then bracketed
segments. An integer segment (``0``, ``-1``) indexes a list; anything else is a
map key (quotes optional: ``['a b']``). On a map an integer segment is the key
``"0"`` — JSON maps only have string keys, so that is what a stored map holds.

Reading a missing part is an error that names the path; writing creates the
missing map levels, pads a list with nulls up to a position past its end, and
replaces whatever stood at the final position.
"""

from __future__ import annotations

import re
from dataclasses import dataclass
from typing import Any

from tmy.errors import PathError
from tmy.values.cost import MAX_RESULT_UNITS

Segment = str | int

_NAME = r"[^\W\d]\w*"
_NAME_RE = re.compile(_NAME)
_INT_RE = re.compile(r"-?\d+")
# the highest list index a write may pad up to: the cost model's bound on a value's members
MAX_LIST_INDEX = MAX_RESULT_UNITS - 1


@dataclass(frozen=True, slots=True)
class Path:
    """A parsed variable path: root name plus segments."""

    root: str
    segments: tuple[Segment, ...] = ()

    def __str__(self) -> str:
        return self.root + "".join(f"[{s}]" for s in self.segments)


def parse_path(text: str) -> Path:
    """Parse ``a[b][0]`` into a :class:`Path`; a clear PathError otherwise."""
    text = text.strip()
    m = _NAME_RE.match(text)
    if not m:
        raise PathError(f"invalid variable path {text!r}: it must start with a variable name")
    root = m.group(0)
    pos = m.end()
    segments: list[Segment] = []
    while pos < len(text):
        if text[pos] != "[":
            raise PathError(
                f"invalid variable path {text!r}: unexpected {text[pos]!r} at column {pos + 1}"
                " (segments are written [key] or [0])"
            )
        end = _segment_end(text, pos + 1)
        if end < 0:
            raise PathError(
                f"invalid variable path {text!r}: '[' at column {pos + 1} is not closed"
            )
        segments.append(_segment(text[pos + 1 : end]))
        pos = end + 1
    return Path(root, tuple(segments))


def _segment_end(text: str, start: int) -> int:
    """Index of the ``]`` closing a segment that starts at ``start``; quotes may hold ``]``."""
    if start < len(text) and text[start] in "'\"":
        quote = text[start]
        close = text.find(quote, start + 1)
        if close < 0:
            return -1
        return close + 1 if close + 1 < len(text) and text[close + 1] == "]" else -1
    return text.find("]", start)


def _segment(raw: str) -> Segment:
    raw_stripped = raw.strip()
    if len(raw_stripped) >= 2 and raw_stripped[0] == raw_stripped[-1] and raw_stripped[0] in "'\"":
        return raw_stripped[1:-1]
    if _INT_RE.fullmatch(raw_stripped):
        return int(raw_stripped)
    if not raw_stripped:
        raise PathError("empty [] segment in variable path")
    return raw_stripped


def describe(value: Any) -> str:
    """A short description of a value's type for error messages."""
    if isinstance(value, dict):
        keys = ", ".join(map(str, list(value)[:5]))
        more = ", …" if len(value) > 5 else ""
        return f"a map with keys [{keys}{more}]" if value else "an empty map"
    if isinstance(value, list):
        return f"a list of {len(value)}"
    return f"a {type(value).__name__}"


def get_in(value: Any, path: Path, start: int = 0) -> Any:
    """Read ``path.segments[start:]`` inside ``value``; PathError names what is missing."""
    current = value
    for i in range(start, len(path.segments)):
        seg = path.segments[i]
        here = Path(path.root, path.segments[:i])
        if isinstance(current, list):
            if not isinstance(seg, int):
                raise PathError(f"{path}: {here} is {describe(current)}; [{seg}] needs an integer")
            try:
                current = current[seg]
            except IndexError:
                raise PathError(
                    f"{path}: index {seg} is out of range ({here} is {describe(current)})"
                ) from None
        elif isinstance(current, dict):
            if seg in current:
                current = current[seg]
            elif isinstance(seg, int) and str(seg) in current:
                current = current[str(seg)]
            else:
                raise PathError(f"{path}: no key {seg!r} in {here} ({describe(current)})")
        elif current is None:  # a local set to "none here" (REPLY_TO with no quote, …)
            raise PathError(
                f"{path}: {here} is null (not set for this message), it has no [{seg}]; "
                f'guard the step with when: "?= {here}" (or use {here}[…] only where it is set)'
            )
        else:
            raise PathError(f"{path}: {here} is {describe(current)}, it has no [{seg}]")
    return current


def _pad(items: list[Any], index: int, path: Path) -> None:
    """Nulls up to ``index`` (exclusive), refused past :data:`MAX_LIST_INDEX`:
    ``lst[10000000000]`` must not allocate gigabytes."""
    if index > MAX_LIST_INDEX:
        raise PathError(
            f"{path}: index {index} is too far past the end of a list of {len(items)}"
            f" (a list may have at most {MAX_LIST_INDEX + 1:,} members)"
        )
    items.extend([None] * (index - len(items)))


def set_in(value: Any, path: Path, new: Any) -> Any:
    """Return the root value with ``new`` stored at ``path``; mutates containers in place.

    Missing levels (and scalars standing where a level is needed) become maps;
    the final position is replaced whatever its type. Writing index ``len`` of a
    list appends; an index past that pads the list with nulls up to it (at most
    :data:`MAX_LIST_INDEX`); a negative index must name a member.
    """
    if not path.segments:
        return new
    root = value if isinstance(value, (dict, list)) else {}
    current: Any = root
    for i, seg in enumerate(path.segments):
        last = i == len(path.segments) - 1
        if isinstance(current, list):
            if not isinstance(seg, int):
                here = Path(path.root, path.segments[:i])
                raise PathError(f"{path}: {here} is {describe(current)}; [{seg}] needs an integer")
            if seg >= len(current):
                _pad(current, seg, path)
                current.append(new if last else {})
            elif -len(current) <= seg:
                if last:
                    current[seg] = new
                elif not isinstance(current[seg], (dict, list)):
                    current[seg] = {}
            else:
                raise PathError(f"{path}: index {seg} is out of range for a list of {len(current)}")
            if not last:
                current = current[seg]
        else:
            key: Any = seg
            if isinstance(seg, int) and seg not in current:
                key = str(seg)
            if last:
                current[key] = new
            else:
                nxt = current.get(key)
                if not isinstance(nxt, (dict, list)):
                    nxt = {}
                    current[key] = nxt
                current = nxt
    return root
