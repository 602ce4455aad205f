"""Discord's text: the bot's mentions read off a message, replies cut into messages.

Discord takes at most :data:`MAX_TEXT` characters per message. A reply is cut
on line breaks, and a code block open at a cut is closed and reopened with its
language tag, so each piece renders on its own.
"""

from __future__ import annotations

import re

MAX_TEXT = 2000  # Discord's limit for one message's content, in characters
MAX_FENCE_TAG = 32  # a longer ``` language tag is not repeated when a code block is reopened

_FENCE = "```"
_TAG_RE = re.compile(rf"[A-Za-z0-9_+.#-]{{1,{MAX_FENCE_TAG}}}")  # a code block's language


def strip_mention(text: str, bot_id: int, role_id: int | None = None) -> tuple[str, bool]:
    """(text without the bot's mentions, was the bot mentioned?).

    ``<@id>`` and ``<@!id>`` (and ``<@&role>`` for the bot's managed role) are
    removed with the spaces before them; a leading mention takes the comma or
    colon after it too (``<@1>, ping`` → ``ping``).
    """
    pattern = rf"<@!?{bot_id}>"
    if role_id is not None:
        pattern = rf"(?:{pattern}|<@&{role_id}>)"
    stripped, count = re.subn(rf"[ \t]*{pattern}", "", text)
    if not count:
        return text.strip(), False
    return stripped.strip().lstrip(",:，：").strip(), True


def _fence_after(line: str, fence: str | None) -> str | None:
    """The code block open after ``line``: None outside one, else its language tag.

    Discord (unlike CommonMark) opens and closes a block at every triple backtick, even in
    mid-line, so each one toggles; the tag is the word right after an opening one.
    """
    parts = line.split(_FENCE)
    if len(parts) % 2:  # an even number of fences: the state is unchanged
        return fence
    if fence is not None:
        return None
    tag = parts[-1].strip()
    return tag if _TAG_RE.fullmatch(tag) else ""


def split_message(text: str, limit: int = MAX_TEXT) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters, cut on line breaks.

    A code block open at a cut is closed at the end of that piece and reopened
    (with the same language tag) at the start of the next, so each piece
    renders on its own. A line longer than a piece can hold is cut hard.
    Blank pieces are dropped (Discord refuses empty messages).
    """
    if limit < 2 * (len(_FENCE) + MAX_FENCE_TAG + 8):
        raise ValueError(f"limit {limit} is too small to hold a reopened code block")
    close = "\n" + _FENCE
    pieces: list[str] = []
    lines: list[str] = []  # the piece being built
    size = -1  # len("\n".join(lines)); -1 while empty
    fence: str | None = None  # the code block open at the end of ``lines``
    has_body = False  # ``lines`` holds more than a (re)opening fence carried to its start
    opened_last = False  # the last line of ``lines`` opened the code block

    def add(line: str, after: str | None) -> None:
        nonlocal size, has_body, fence, opened_last
        lines.append(line)
        size += 1 + len(line)
        has_body = True
        opened_last = fence is None and after is not None
        fence = after

    def flush() -> None:
        nonlocal lines, size, has_body, fence, opened_last
        head = _FENCE + fence if fence is not None else None
        if opened_last:  # don't end a piece on an empty code block: move its opening along
            head = lines.pop()
            fence = None
        body = "\n".join(lines)
        if body.strip():
            pieces.append(body + (close if fence is not None else ""))
        lines, size, has_body, opened_last = [], -1, False, False
        if head is not None:
            lines.append(head)
            size = len(head)
            fence = _fence_after(head, None)

    for line in text.split("\n"):
        while True:
            after = _fence_after(line, fence)
            if size + 1 + len(line) + (len(close) if after is not None else 0) <= limit:
                add(line, after)
                break
            if has_body and not (opened_last and len(lines) == 1):
                flush()
                continue
            # even a fresh piece cannot hold the line: cut it hard (room for a closing fence kept)
            room = limit - (size + 1) - len(close)
            head, line = line[:room], line[room:]
            add(head, _fence_after(head, fence))
            opened_last = False
            flush()
    body = "\n".join(lines)
    if has_body and body.strip():
        pieces.append(body)
    return pieces
