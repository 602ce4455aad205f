"""YAML syntax errors that name the line to fix, with a one-line hint.

PyYAML reports where its parser gave up, which is often not where the mistake
is: a missing ':' or an unclosed '[' is only noticed on the next line, an
unclosed quote at the end of the file. :func:`diagnose` reads the text around
the marks and names the line that is wrong — a tab in the indentation, a
mapping where a list item was expected (a missing '-'), inconsistent
indentation, an unclosed quote or bracket, a value that must be quoted — with a
hint that says how to fix it. It works with both of PyYAML's parsers (libyaml's
and the pure-Python one), whose messages differ.
"""

from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass

import yaml

_TAB_HINT = "YAML forbids tabs for indentation; use spaces"


def _indent(line: str) -> int:
    return len(line) - len(line.lstrip(" "))


def _content_col(line: str) -> int:
    """Where the line's own content starts: after the indentation and any '- ' markers."""
    col = _indent(line)
    while line[col : col + 2] == "- " or line[col:].rstrip() == "-":
        col += 2
        col += len(line[col:]) - len(line[col:].lstrip(" "))
    return col


def _blank(line: str) -> bool:
    stripped = line.strip()
    return not stripped or stripped.startswith("#")


def _key_value(text: str) -> bool:
    """Whether ``text`` (a line's content) is ``key: value`` or ``key:`` (a plain key)."""
    body = text.split(" #", 1)[0].rstrip()
    return ": " in body or body.endswith(":")


def _unclosed_quote(line: str) -> int | None:
    """The column of a quote that opens a value on this line and is not closed on it."""
    col, n = 0, len(line)
    starts = True  # at a place where a quoted scalar may begin
    while col < n:
        ch = line[col]
        if ch == "#" and (col == 0 or line[col - 1] in " \t"):
            return None
        if ch in "\"'" and starts:
            end = col + 1
            while end < n:
                if ch == '"' and line[end] == "\\":
                    end += 2
                    continue
                if line[end] == ch:
                    if ch == "'" and line[end + 1 : end + 2] == "'":
                        end += 2
                        continue
                    break
                end += 1
            if end >= n:
                return col
            col = end + 1
            starts = False
            continue
        spaced = line[col + 1 : col + 2] in (" ", "")  # ': ' and '- ' need the space
        if ch in "[{," or (ch == ":" and spaced):
            starts = True
        elif ch == "-" and spaced and not line[:col].strip(" -"):
            starts = True  # a list item's dash
        elif ch != " ":
            starts = False
        col += 1
    return None


def _previous(lines: list[str], index: int) -> int | None:
    """The nearest line above ``index`` with content (not blank, not only a comment)."""
    for i in range(min(index, len(lines)) - 1, -1, -1):
        if not _blank(lines[i]):
            return i
    return None


def message(what: str, hint: str, where: str) -> str:
    """The error text: what is wrong, then the hint on a line of its own that says where
    too (``file:line: hint: …``, as compilers print notes), so every line names its place."""
    return f"YAML syntax error: {what}\n{where}: hint: {hint}"


Found = tuple[int | None, str, str]  # the line to fix (1-based, None: unknown), what, hint


@dataclass(frozen=True, slots=True)
class _Marks:
    """Where PyYAML gave up (``p_``: the problem mark) and what it was reading (``c_``:
    the context mark), as 0-based indexes into ``lines`` (None: no such mark)."""

    lines: list[str]
    context: str
    problem: str
    p_line: int | None
    p_col: int
    c_line: int | None
    c_col: int

    @classmethod
    def of(cls, text: str, exc: yaml.MarkedYAMLError) -> _Marks:
        lines = text.splitlines() or [""]
        pm, cm = exc.problem_mark, exc.context_mark
        last = len(lines) - 1
        return cls(
            lines,
            exc.context or "",
            exc.problem or "",
            min(pm.line, last) if pm else None,
            pm.column if pm else 0,
            min(cm.line, last) if cm else None,
            cm.column if cm else 0,
        )


def _at(index: int | None, what: str, hint: str) -> Found:
    return (index + 1 if index is not None else None), what, hint


def diagnose(text: str, exc: yaml.MarkedYAMLError) -> Found:
    """The line that is wrong (1-based), what is wrong there, and a one-line hint.

    PyYAML reports where it gave up, which is often the line *after* the
    mistake (a missing ':' or an unclosed bracket is only noticed on the next
    line) or the end of the file (an unclosed quote). Each check below looks at
    the text around the marks for one kind of mistake; the first that
    recognises it names the line to fix.
    """
    marks = _Marks.of(text, exc)
    for check in _CHECKS:
        found = check(marks)
        if found is not None:
            return found
    raw = " ".join(p for p in (marks.context, marks.problem) if p)
    index = marks.p_line if marks.p_line is not None else marks.c_line
    return _at(
        index,
        raw or str(exc),
        "check the indentation (spaces only, the same for keys of one mapping) and the "
        "quoting on this line and the one above",
    )


def _tab(m: _Marks) -> Found | None:
    """A tab in the indentation: on the problem line, or between the two marks."""
    lines, p_line = m.lines, m.p_line
    if p_line is None:
        return None
    first = min(i for i in (p_line, m.c_line) if i is not None)
    for i in range(first, p_line + 1):
        head = lines[i][: len(lines[i]) - len(lines[i].lstrip(" \t"))]
        if "\t" in head:
            return _at(i, "a tab character in the indentation", _TAB_HINT)
    if lines[p_line][m.p_col : m.p_col + 1] == "\t":
        return _at(p_line, "a tab character", _TAB_HINT + " (quote a value that holds a tab)")
    return None


def _quoted(m: _Marks) -> Found | None:
    """A bad escape in double quotes, or a quote never closed."""
    if "quoted scalar" not in m.context or m.c_line is None:
        return None
    opened = m.lines[m.c_line][m.c_col : m.c_col + 1] or '"'
    if "escape" in m.problem:
        return _at(
            m.p_line,
            f"{m.problem} in a double-quoted string",
            "in double quotes a backslash starts an escape: write \\\\ for one backslash, "
            "or use single quotes ('re:^\\d+')",
        )
    return _at(
        m.c_line,
        f"unclosed quote: the {opened} opened at column {m.c_col + 1} is never closed",
        f"close the string with {opened} on this line (a quote inside it: "
        + ('\\" in double quotes)' if opened == '"' else "'' in single quotes)"),
    )


def _flow(m: _Marks) -> Found | None:
    """An unclosed '[' or '{', or an item inside one that needs quotes."""
    if "flow sequence" not in m.context and "flow mapping" not in m.context:
        return None
    opener, closer = ("[", "]") if "sequence" in m.context else ("{", "}")
    c_line, c_col = m.c_line, m.c_col
    if c_line is not None and (m.p_line != c_line or closer not in m.lines[c_line][c_col:]):
        return _at(
            c_line,
            f"unclosed '{opener}': the {'list' if opener == '[' else 'mapping'} opened at "
            f"column {c_col + 1} is not closed on this line",
            f"close it with '{closer}' (and quote an item that holds ': ', ',' or '#')",
        )
    return _at(
        m.p_line,
        f"inside the '{opener}…{closer}' opened at column {c_col + 1}: expected ',' or "
        f"'{closer}' at column {m.p_col + 1}",
        f"quote an item that holds ': ', ',' or '{closer}' (\"a: b\")",
    )


def _simple_key(m: _Marks) -> Found | None:
    """A line that is neither ``key: value`` nor a list item (a missing ':')."""
    if "simple key" in m.context and "':'" in m.problem and m.c_line is not None:
        return _at(
            m.c_line,
            "a line that is neither 'key: value' nor a list item ('- …')",
            "missing ':'? write 'key: value' (a colon and a space), or '- ' for a list item",
        )
    return None


def _alias(m: _Marks) -> Found | None:
    """A value starting with '*' (read as an alias)."""
    if "alias" not in m.context:
        return None
    return _at(
        m.p_line if m.p_line is not None else m.c_line,
        "a value starting with '*' reads as an alias (a reference to an '&anchor')",
        "'*' starts an alias in YAML: quote a value that starts with '*' (\"*word*\")",
    )


def _cannot_start(m: _Marks) -> Found | None:
    """A plain value starting with a character YAML reserves ('@', '`', …)."""
    if "cannot start any token" not in m.problem or m.p_line is None:
        return None
    ch = m.lines[m.p_line][m.p_col : m.p_col + 1]
    return _at(m.p_line, f"a plain value cannot start with {ch!r}", f'quote the value ("{ch}…")')


def _mapping_values(m: _Marks) -> Found | None:
    """ "mapping values are not allowed here": a second ': ', a key without its space, a
    list item without its ':', or a line indented too deep."""
    if "mapping values are not allowed" not in m.problem or m.p_line is None:
        return None
    lines, p_line = m.lines, m.p_line
    line = lines[p_line]
    if _key_value(line[_content_col(line) : m.p_col]):
        return _at(
            p_line,
            f"a second ': ' on one line (column {m.p_col + 1})",
            "quote the value when it holds ': ' (key: \"a: b\")",
        )
    prev = _previous(lines, p_line)
    if prev is None:
        return None
    above = lines[prev][_content_col(lines[prev]) :]
    if not _key_value(above) and ":" in above.split(" #", 1)[0]:
        return _at(
            prev,
            "a key without a space after ':'",
            "write 'key: value' with a space after the colon (quote a value with ':')",
        )
    if (
        lines[prev].lstrip().startswith("- ")
        and ":" not in above.split(" #", 1)[0]
        and _indent(line) == _content_col(lines[prev])
    ):  # "- plugin ADJUST" followed by that item's keys: the item lacks its ':'
        return _at(
            prev,
            "a list item that is neither '- key: value' nor a plain value: "
            "the keys below it belong to it",
            "missing ':'? write '- key: value' (a colon and a space): '- plugin: ADJUST'",
        )
    return _at(
        p_line,
        f"inconsistent indentation: this line is indented {_indent(line)} spaces, "
        f"deeper than line {prev + 1} ({_content_col(lines[prev])}), so it reads as "
        f"the continuation of that line's value",
        f"indent it by {_content_col(lines[prev])} spaces to be a key next to line "
        f"{prev + 1}, or put it under a key that ends with ':'",
    )


def _block(m: _Marks) -> Found | None:
    """Inside a block mapping or list: a quote left open above, text after a complete
    value, a missing '-' or a stray one, or inconsistent indentation."""
    block = "block mapping" in m.context or "block collection" in m.context
    if not block or m.p_line is None or m.c_line is None:
        return None
    lines, p_line, p_col, c_line = m.lines, m.p_line, m.p_col, m.c_line
    for i in range(c_line, p_line):  # a quote left open further up swallows lines
        col = _unclosed_quote(lines[i])
        if col is not None:
            q = lines[i][col]
            return _at(
                i,
                f"unclosed quote: the {q} opened at column {col + 1} is not closed on this line",
                f"close the string with {q} on this line",
            )
    line = lines[p_line]
    if p_col > _indent(line):  # mid-line: more text after a complete value
        return _at(
            p_line,
            f"unexpected text at column {p_col + 1}, after a complete value",
            'quote the whole value (key: "…"), or start a new line for the next key',
        )
    if "block collection" in m.context:
        return _in_list(m, line)
    return _in_mapping(m, line)


def _in_list(m: _Marks, line: str) -> Found:
    """A block list's item at the wrong place (p_line is ``line``; both marks are set)."""
    p_line, p_col, c_line, c_col = m.p_line, m.p_col, m.c_line, m.c_col
    assert p_line is not None and c_line is not None
    if p_col == c_col and line[_indent(line) : _indent(line) + 1] != "-":
        return _at(
            p_line,
            f"a mapping where a list item was expected: this line is at the "
            f"indentation of the list items above (line {c_line + 1}) but has no '-'",
            f"missing '-'? start the item with '- ' ('- {line[_content_col(line) :].strip()}')",
        )
    return _at(
        p_line,
        f"inconsistent indentation: this line is indented {p_col} spaces, but the "
        f"list around it (line {c_line + 1}) has its items ('- ') at {c_col}",
        f"indent it by {c_col} spaces with '- ' for a new item, or by "
        f"{_content_col(m.lines[c_line])} to continue the item on line {c_line + 1}",
    )


def _in_mapping(m: _Marks, line: str) -> Found:
    """A block mapping's key at the wrong place (p_line is ``line``; both marks are set)."""
    p_line, p_col, c_line, c_col = m.p_line, m.p_col, m.c_line, m.c_col
    assert p_line is not None and c_line is not None
    if line[_indent(line) : _indent(line) + 1] == "-" and p_col == c_col:
        opening = m.lines[c_line][:c_col]
        if not (opening.strip(" ") == "-" or opening.rstrip().endswith("-")):
            return _at(
                c_line,
                f"a mapping where a list item was expected: line {p_line + 1} at the "
                f"same indentation is a list item ('- ')",
                f"missing '-'? start this line with '- ' like line {p_line + 1} "
                f"(or drop the '-' there if this is meant to be a mapping)",
            )
        return _at(
            p_line,
            f"a list item ('- ') where a key of the mapping on line {c_line + 1} was expected",
            "indent the item under the key it belongs to (a key ending with ':'), "
            "or remove the '-'",
        )
    return _at(
        p_line,
        f"inconsistent indentation: this line is indented {p_col} spaces, but the keys "
        f"of the mapping it continues (line {c_line + 1}) are at {c_col}",
        f"indent it by exactly {c_col} spaces (spaces only), or more under a key that "
        f"ends with ':'",
    )


# in order: the first check that recognises the mistake names it
_CHECKS: tuple[Callable[[_Marks], Found | None], ...] = (
    _tab,
    _quoted,
    _flow,
    _simple_key,
    _alias,
    _cannot_start,
    _mapping_values,
    _block,
)
