"""An LLM step's deadline on a loop timer it shares with the steps that end near it.

``asyncio.timeout`` gives every step a timer of its own: with a thousand
conversations in flight that is a thousand entries in the event loop's heap,
each push and each cancelled entry's removal a dozen Python-level comparisons
(about 30,000 instructions a step, ``bench/llm_fanout.py``'s profile). Here the
steps whose deadlines fall in the same :data:`GRAIN` of the loop's clock share
one timer, which cancels those still running when it fires; the step then ends
with :class:`TimeoutError`, as ``asyncio.timeout`` would end it.

The shared timer fires up to one grain after the deadline, so only deadlines
long enough for that not to matter take it (:func:`bound`): at least
:data:`SHARED_FROM` seconds, and ending at least :data:`MARGIN` before the step's
own timeout (the engine's, which must not win the race: its error says less).
Shorter ones, and a step inside a tool call (same task as the step that called
it), keep a timer of their own. The shared timers are :mod:`tmy.engine.timers`'
(the engine's step timeouts wait on the same kind).
"""

from __future__ import annotations

import asyncio
import contextlib
from contextlib import AbstractAsyncContextManager

from tmy.engine.timers import Deadline, Grains

GRAIN = 0.05  # seconds: the steps ending within one grain share a timer
SHARED_FROM = 1.0  # shorter deadlines get a timer of their own
MARGIN = 0.2  # seconds the shared timer must leave before the step's own timeout


ATTEMPTS = Grains()  # every runtime's non-streaming request attempts (see attempt)
_UNBOUNDED = contextlib.nullcontext()  # reusable: it keeps no state


def attempt(seconds: float | None) -> AbstractAsyncContextManager[None]:
    """What ``asyncio.timeout(seconds)`` is to one non-streaming request attempt: the
    model's ``timeout`` over the whole attempt (connecting, sending, the answer), on a
    timer shared with the attempts ending in the same grain when it is long enough for a
    grain not to matter. aiohttp's own read timeout would re-arm a timer in the loop's
    heap at every chunk (:mod:`tmy.llm.transport`); a streaming attempt keeps it (each
    wait for data: a long stream is not cut). None: no bound (the caller's own ends it)."""
    if seconds is None:
        return _UNBOUNDED
    if seconds < SHARED_FROM:
        return asyncio.timeout(seconds)
    return Deadline(ATTEMPTS, seconds)


class Deadlines:
    """The shared timers of one runtime's LLM steps (by grain of the loop's clock)."""

    def __init__(self, grain: float = GRAIN, shared_from: float = SHARED_FROM) -> None:
        self.grain = grain
        self.shared_from = shared_from
        self.grains = Grains(grain)

    def bound(
        self, seconds: float, step_timeout: float, alone: bool
    ) -> AbstractAsyncContextManager[None]:
        """What ``asyncio.timeout(seconds)`` is to the block, on a shared timer when the
        deadline allows it (``alone``: the caller must have its own, e.g. nested)."""
        if alone or seconds < self.shared_from or step_timeout - seconds < MARGIN + self.grain:
            return asyncio.timeout(seconds)
        return Deadline(self.grains, seconds)
