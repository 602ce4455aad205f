"""The shell commands of a Markdown file's fenced ``sh``/``bash``/``shell``/``console`` blocks.

tests/e2e/test_readme.py runs every one of the README's; this module only reads them.
A command is one logical line: ``\\``-continued lines joined, a trailing ``# comment``
(outside quotes) dropped, comment-only lines skipped. In a ``console`` block the commands
are the ``$ `` lines and the other lines are what they print.
"""

from __future__ import annotations

import re
from dataclasses import dataclass, field

FENCE = re.compile(
    r"^(?P<indent> *)```(?P<lang>[\w-]*)[^\n]*\n(?P<body>.*?)^(?P=indent)```", re.M | re.S
)
SHELL = {"sh", "bash", "shell", "console"}


@dataclass(frozen=True)
class Command:
    """One command as the reader would type it, where it is, and (console) what it prints."""

    text: str
    line: int
    output: tuple[str, ...] = field(default=())


def strip_comment(line: str) -> str:
    """``line`` without a shell comment: a ``#`` at the start or after blank, outside quotes."""
    quote = ""
    for i, ch in enumerate(line):
        if quote:
            if ch == quote:
                quote = ""
            elif ch == "\\" and quote == '"':
                continue
        elif ch in "'\"":
            quote = ch
        elif ch == "#" and (i == 0 or line[i - 1] in " \t"):
            return line[:i].rstrip()
    return line.rstrip()


def _logical(lines: list[tuple[int, str]]) -> list[tuple[int, str]]:
    """Join ``\\``-continued lines; each result keeps the number of its first line."""
    out: list[tuple[int, str]] = []
    pending: tuple[int, str] | None = None
    for number, raw in lines:
        text = raw.strip() if pending else raw.rstrip()
        if pending:
            number, text = pending[0], pending[1] + " " + text
        if text.endswith("\\"):
            pending = (number, text[:-1].rstrip())
            continue
        pending = None
        out.append((number, text))
    if pending:
        out.append(pending)
    return out


def commands(markdown: str) -> list[Command]:
    """Every command of the shell blocks of ``markdown``, in order."""
    found: list[Command] = []
    for block in FENCE.finditer(markdown):
        if block["lang"] not in SHELL:
            continue
        first = markdown.count("\n", 0, block.start("body")) + 1
        indent = len(block["indent"])
        lines = [(first + i, raw[indent:]) for i, raw in enumerate(block["body"].splitlines())]
        if block["lang"] == "console":
            found.extend(_console(lines))
            continue
        for number, text in _logical(lines):
            text = strip_comment(text.strip())
            if text:
                found.append(Command(text, number))
    return found


def _console(lines: list[tuple[int, str]]) -> list[Command]:
    found: list[Command] = []
    current: tuple[int, str] | None = None
    output: list[str] = []
    for number, raw in lines:
        if raw.startswith("$ "):
            if current:
                found.append(Command(current[1], current[0], tuple(output)))
            current, output = (number, strip_comment(raw[2:].strip())), []
        elif current:
            output.append(raw)
    if current:
        found.append(Command(current[1], current[0], tuple(output)))
    return found
