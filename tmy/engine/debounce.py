"""Follow-ups after silence (seed 003): a burst inside a session is answered once.

A rule with ``session: {seconds: 60, debounce: 5}`` does not answer each
follow-up that reaches it through its open session at once. The follow-ups of
one user in one chat are collected, per (platform, chat, user, rule), and when
``debounce`` seconds pass without another one the last message's run answers
them all: ``QUESTION`` is their texts joined by newlines, ``BURST`` the list.
The earlier messages get an empty reply (the adapter sends nothing) that says
they were debounced.

The collection is in-process (a daemon's own memory, like a chat's typing
state): with several daemons behind one platform connection each still sees a
given chat's messages in one place. A burst is answered at the latest after
:data:`MAX_BURST` messages, so a user who never pauses still gets an answer.
"""

from __future__ import annotations

import asyncio
from dataclasses import dataclass, field

MAX_BURST = 20  # messages collected at most: the one that fills a burst answers it at once

BurstKey = tuple[str, str, str, str]  # (platform, chat, user, rule id)


@dataclass(slots=True)
class _Burst:
    texts: list[str] = field(default_factory=list)
    waiter: asyncio.Future[bool] | None = None  # the newest message's: True when it answers
    closed: bool = False  # being answered: a message arriving now starts the next burst
    timer: asyncio.TimerHandle | None = None  # the newest message's silence timer

    def settle(self) -> None:
        """The silence lasted: the newest message answers this burst."""
        self.closed = True
        if self.waiter is not None and not self.waiter.done():
            self.waiter.set_result(True)


class Debouncer:
    """The bursts being collected now, by (platform, chat, user, rule)."""

    def __init__(self) -> None:
        self._bursts: dict[BurstKey, _Burst] = {}

    def __len__(self) -> int:
        return len(self._bursts)

    async def collect(self, key: BurstKey, text: str, delay: float) -> list[str] | None:
        """Add ``text`` to the burst of ``key``; the whole burst (oldest first) when this
        message is the one to answer it — ``delay`` seconds passed with no newer one —
        or None as soon as a newer message takes the burst over."""
        burst = self._bursts.get(key)
        if burst is None or burst.closed:
            burst = self._bursts[key] = _Burst()
        burst.texts.append(text)
        if burst.timer is not None:
            burst.timer.cancel()
        if burst.waiter is not None and not burst.waiter.done():
            burst.waiter.set_result(False)  # superseded: the older message returns now
        if len(burst.texts) >= MAX_BURST:
            burst.closed = True
            del self._bursts[key]
            return burst.texts
        loop = asyncio.get_running_loop()
        waiter = burst.waiter = loop.create_future()
        timer = burst.timer = loop.call_later(delay, burst.settle)
        try:
            answers = await waiter
        finally:
            timer.cancel()
            mine = self._bursts.get(key) is burst and burst.waiter is waiter
            if waiter.cancelled() and mine:  # this task was cancelled (a shutdown): drop it
                del self._bursts[key]
        if not answers:
            return None
        if self._bursts.get(key) is burst:
            del self._bursts[key]
        return burst.texts
