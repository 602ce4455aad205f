"""Cutting a long reply into messages a platform accepts, at line breaks where it can.

Every chat platform caps one message (characters, UTF-16 units, bytes), and a
reply longer than that is sent as several. The rule is the same everywhere: a
piece ends at the last line break in its second half, else at the last space
there, else exactly at the limit (a cut in the first half would leave a stub
of a message). Two ways of treating white space share it:

* :func:`split_trimmed` — each piece is stripped at both ends (QQ, Feishu,
  Matrix: the platform trims a message anyway, and a piece of only spaces
  would be refused);
* :func:`split_verbatim` — the text is kept as written but for the one line
  break or space a cut is made at, and blank pieces are dropped (Telegram,
  Slack: their entities and mrkdwn count positions in what is sent).

``fit(text)`` says how many leading characters of ``text`` fit one message,
for limits that are not in characters (default: ``min(len(text), limit)``).
"""

from __future__ import annotations

from collections.abc import Callable

Fit = Callable[[str], int]  # how many leading characters of a text fit one message


def _break(window: str) -> int:
    """Where to end a piece that fills ``window``: its last line break in the second half,
    else its last space there; -1 when neither is there."""
    half = len(window) // 2
    cut = window.rfind("\n")
    if cut < half:
        cut = window.rfind(" ")
    return cut if cut >= half else -1


def split_trimmed(text: str, limit: int, fit: Fit | None = None) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters (or what ``fit`` allows), each
    stripped at both ends; none is blank."""
    measure = fit or (lambda rest: min(len(rest), limit))
    pieces: list[str] = []
    rest = text.strip()
    while rest:
        size = measure(rest)
        if size < len(rest):
            cut = _break(rest[:size])
            size = cut if cut >= 0 else size
        piece, rest = rest[:size].rstrip(), rest[size:].strip()
        if piece:
            pieces.append(piece)
    return pieces


def split_verbatim(
    text: str, limit: int, fit: Fit | None = None, hard_cut: Fit | None = None
) -> list[str]:
    """``text`` in pieces of at most ``limit`` characters (or what ``fit`` allows), white
    space kept but the line break or space cut at; blank pieces dropped. Where no break
    is found the piece is cut at the limit, or where ``hard_cut(window)`` says (never
    inside an escape sequence, say)."""
    measure = fit or (lambda rest: min(len(rest), limit))
    pieces: list[str] = []
    while text:
        size = measure(text)
        if size >= len(text):
            piece, text = text, ""
        else:
            window = text[:size]
            cut = _break(window)
            if cut >= 0:
                piece, text = window[:cut], text[cut + 1 :]
            else:
                cut = hard_cut(window) if hard_cut is not None else size
                piece, text = window[:cut], text[cut:]
        if piece.strip():
            pieces.append(piece)
    return pieces
