"""What waits for a queued send's outcome: the base of every adapter's outgoing item,
and of one sent piece by piece with each piece retried."""

from __future__ import annotations

import asyncio

from tmy.backoff import Backoff
from tmy.errors import AdapterError


class PendingSend:
    """A reply (or a ``send``) waiting in a :class:`ChatQueues`: who waits for its outcome.

    Each adapter's outgoing item subclasses this for its own fields; ``done`` is
    the future ``send()`` awaits (None for replies to an incoming message), so
    a send on the bot's own initiative (a cron post) learns of a failure even
    when it happens long after the item was queued.
    """

    __slots__ = ("done",)
    platform = ""  # the adapter's name, for the error of a dropped item
    place = "chat"  # what the platform calls a chat ("channel" on Discord)

    def __init__(self, done: asyncio.Future[None] | None) -> None:
        self.done = done

    def finish(self, error: Exception | None) -> None:
        """Tell whoever waits: sent (``error`` None) or failed."""
        if self.done is not None and not self.done.done():
            if error is None:
                self.done.set_result(None)
            else:
                self.done.set_exception(error)

    def failed(self, error: Exception) -> None:
        """The adapter's send step raised something it did not handle (a network error)."""
        if isinstance(error, AdapterError):
            self.finish(error)
        else:
            self.finish(AdapterError(f"{self.platform}: not sent: {type(error).__name__}: {error}"))

    def dropped(self) -> None:
        """ChatQueues dropped it (its chat's queue was full, or tmy stopped)."""
        self.finish(
            AdapterError(
                f"{self.platform}: not sent: its {self.place} had too many messages waiting "
                "(the oldest are dropped), or tmy stopped"
            )
        )

    def stopped(self) -> None:
        """tmy stopped while it was being sent (an adapter may say so in its own words)."""
        self.dropped()


class PiecewiseSend(PendingSend):
    """A queued send of several pieces (a long text split, its images), each retried on its
    own: which piece is next, how often the current one was tried again, and its backoff.

    The adapter's send step sends piece ``index``; on success :meth:`piece_sent` moves on.
    A piece is tried again at most ``max_retries`` times, and never after a wait longer
    than ``longest_wait`` (a platform's rate limit asking more): that would block its chat,
    so the send fails instead and its sender is told.
    """

    __slots__ = ("backoff", "index", "retries")
    max_retries = 3
    longest_wait = 120.0  # seconds

    def __init__(self, done: asyncio.Future[None] | None) -> None:
        super().__init__(done)
        self.index = 0  # the next piece to send
        self.retries = 0  # of the current piece
        self.backoff = Backoff()

    def may_retry(self, wait: float = 0.0) -> bool:
        """Whether the current piece may be tried again after ``wait`` seconds (the caller
        counts the retry in ``retries`` when it does)."""
        return self.retries < self.max_retries and wait <= self.longest_wait

    def piece_sent(self, pieces: int) -> float | None:
        """The current piece went out: the next of ``pieces`` starts with no retries and a
        short backoff (``0.0``: call again once the chat's pacing allows), or, the last one
        sent, whoever waits is told (``None``: done) — a ChatQueues work's answer."""
        self.index += 1
        self.retries = 0
        self.backoff.reset()
        if self.index < pieces:
            return 0.0
        self.finish(None)
        return None
