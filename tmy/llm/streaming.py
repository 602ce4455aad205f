"""A streamed answer's text on its way to the message's stream sink (``stream:`` steps).

The transport (:mod:`tmy.llm.client`) hands each content delta to a
:class:`Deltas` as it is read from the provider's SSE stream. What reaches the
sink is what the final reply could show, never more:

* reasoning is held back: text inside ``<think>…</think>`` is dropped with the
  same tags :func:`tmy.llm.contracts.clean` strips from the final answer (case
  does not matter), also when a tag is split across deltas (:class:`Visible`);
  an unclosed ``<think>`` shows nothing after it. Leading whitespace is dropped
  too, as ``clean`` does;
* a turn that calls tools shows nothing from the moment its first tool-call
  delta arrives (what the model says while calling is not the answer);
* once an attempt has shown text and then fails (a cut stream, a retry, a
  fallback model), later attempts show nothing more: their text would be
  appended to the first attempt's half answer. The adapter finishes with the
  run's final reply anyway;
* a sink that raises is logged once and switched off: the answer never fails
  because a platform refused an edit.

:class:`Budget` keeps the text streamed to one sink (every streaming step of the
run together) within ``limits.max_reply_chars``: the piece that would pass it
and all after it are not sent (the final reply then fails as too long, as
without a stream). Steps with an output contract do not stream at all (see
:mod:`tmy.llm.executor`).

The TESTONLY mock streams too (:func:`replay`: its answer in a few pieces), so
rule tests without a network cover a stream.
"""

from __future__ import annotations

import re
import weakref
from collections.abc import Awaitable, Callable
from typing import Any

import structlog

log = structlog.get_logger("tmy.llm")

MOCK_PIECES = 4  # how many pieces the mock's answer streams in (fewer for short answers)
_WORD = re.compile(r"\s*\S+")
OPEN, CLOSE = "<think>", "</think>"  # the tags of contracts._THINK_RE
_OPEN_RE = re.compile(re.escape(OPEN), re.IGNORECASE)
_CLOSE_RE = re.compile(re.escape(CLOSE), re.IGNORECASE)


def _may_begin(text: str, tag: str) -> int:
    """How many characters at the end of ``text`` could be the start of ``tag``."""
    for n in range(min(len(tag) - 1, len(text)), 0, -1):
        if re.fullmatch(re.escape(tag[:n]), text[-n:], re.IGNORECASE):
            return n
    return 0


class Visible:
    """The text of one completion outside ``<think>…</think>``, fed in pieces.

    Text that may be the start of a tag is kept until the next piece tells; the
    first ``</think>`` after a ``<think>`` ends the block (``clean``'s non-greedy
    match). Leading whitespace of the answer is dropped.
    """

    def __init__(self) -> None:
        self.held = ""
        self.inside = False
        self.started = False  # something visible went out

    def feed(self, piece: str) -> str:
        """What of the text so far can be shown now (the rest is held or dropped)."""
        text, out = self.held + piece, []
        while True:
            if self.inside:
                end = _CLOSE_RE.search(text)
                if end is None:  # keep only what may begin the closing tag
                    keep = _may_begin(text, CLOSE)
                    self.held = text[len(text) - keep :] if keep else ""
                    break
                text, self.inside = text[end.end() :], False
                continue
            start = _OPEN_RE.search(text)
            if start is not None:
                out.append(text[: start.start()])
                text, self.inside = text[start.end() :], True
                continue
            keep = _may_begin(text, OPEN)
            out.append(text[: len(text) - keep])
            self.held = text[len(text) - keep :] if keep else ""
            break
        shown = "".join(out)
        if not self.started:
            shown = shown.lstrip()
            self.started = bool(shown)
        return shown


class Deltas:
    """The sink of one step's completions (retries and fallback models included)."""

    def __init__(self, send: Callable[[str], Awaitable[None]]) -> None:
        self._send = send
        self.shown = False  # some text went out
        self.off = False
        self.visible = Visible()

    async def __call__(self, piece: str) -> None:
        if self.off or not piece:
            return
        piece = self.visible.feed(piece)
        if not piece:
            return
        self.shown = True
        try:
            await self._send(piece)
        except Exception as exc:  # a sink must not fail the answer
            log.warning("llm.stream_sink_failed", error=f"{type(exc).__name__}: {exc}")
            self.off = True

    def attempt_failed(self) -> None:
        """An attempt ended in an error: if it showed text, later attempts show none;
        if not, the next one starts afresh (outside any reasoning block)."""
        if self.shown:
            self.off = True
        self.visible = Visible()


_STREAMED: weakref.WeakKeyDictionary[Any, int] = weakref.WeakKeyDictionary()


class Budget:
    """A step's way to the message's sink, within ``limit`` characters for the sink."""

    def __init__(self, sink: Any, chunks: bool, limit: int) -> None:
        self.sink = sink
        self.chunks = chunks
        self.limit = limit
        self.own = 0  # the count when the sink cannot be remembered (no weak reference)
        self.full = False

    def _count(self) -> int:
        try:
            return _STREAMED.get(self.sink, 0)
        except TypeError:
            return self.own

    def _add(self, n: int) -> None:
        try:
            _STREAMED[self.sink] = _STREAMED.get(self.sink, 0) + n
        except TypeError:
            self.own += n

    async def __call__(self, piece: str) -> None:
        if self.full:
            return
        if self._count() + len(piece) > self.limit:
            self.full = True
            log.info("llm.stream_capped", limit=self.limit, streamed=self._count())
            return
        self._add(len(piece))
        await self.sink.delta(piece, chunks=self.chunks)


def pieces(text: str, count: int = MOCK_PIECES) -> list[str]:
    """``text`` cut at word boundaries into at most ``count`` pieces that join back to it."""
    words = _WORD.findall(text)
    tail = text[sum(len(w) for w in words) :]
    if not words:
        return [text] if text else []
    size = -(-len(words) // count)
    out = ["".join(words[i : i + size]) for i in range(0, len(words), size)]
    out[-1] += tail
    return out


async def replay(deltas: Deltas, text: str) -> None:
    """The mock's answer, streamed in a few pieces."""
    for piece in pieces(text):
        await deltas(piece)
