"""A streamed answer's text on its way to the message's stream sink (``stream:`` steps).

The transport (:mod:`tmy.llm.client`) hands each content delta to a
:class:`Deltas` as it is read from the provider's SSE stream. Three rules:

* a turn that calls tools shows nothing from the moment its first tool-call
  delta arrives (what the model says while calling is not the answer);
* once an attempt has shown text and then fails (a cut stream, a retry, a
  fallback model), later attempts show nothing more: their text would be
  appended to the first attempt's half answer. The adapter finishes with the
  run's final reply anyway;
* a sink that raises is logged once and switched off: the answer never fails
  because a platform refused an edit.

The TESTONLY mock streams too (:func:`replay`: its answer in a few pieces), so
rule tests without a network cover a stream.
"""

from __future__ import annotations

import re
from collections.abc import Awaitable, Callable

import structlog

log = structlog.get_logger("tmy.llm")

MOCK_PIECES = 4  # how many pieces the mock's answer streams in (fewer for short answers)
_WORD = re.compile(r"\s*\S+")


class Deltas:
    """The sink of one step's completions (retries and fallback models included)."""

    def __init__(self, send: Callable[[str], Awaitable[None]]) -> None:
        self._send = send
        self.shown = False  # some text went out
        self.off = False

    async def __call__(self, piece: str) -> None:
        if self.off or not piece:
            return
        self.shown = True
        try:
            await self._send(piece)
        except Exception as exc:  # a sink must not fail the answer
            log.warning("llm.stream_sink_failed", error=f"{type(exc).__name__}: {exc}")
            self.off = True

    def attempt_failed(self) -> None:
        """An attempt ended in an error: if it showed text, later attempts show none."""
        if self.shown:
            self.off = True


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
