"""The pause before trying again: capped exponential backoff with full jitter.

One definition for every reconnect and retried send — chat platforms' adapters
(tmy.adapters) and MCP servers (tmy.mcp) alike — so it sits in the bottom layer;
with it :func:`retry_after`, the pause a server asks for in HTTP's ``Retry-After``.
"""

from __future__ import annotations

import asyncio
import random
import time
from datetime import UTC, datetime
from email.utils import parsedate_to_datetime


class Backoff:
    """Capped exponential backoff with full jitter, for reconnects and retried sends.

    ``next()`` gives the pause before the next attempt (0..min(cap, base·2ⁿ),
    never below ``base / 2``); ``reset()`` after a success.

    For a long-lived connection, opening it is no success yet: a server that
    accepts (or greets) and closes at once would otherwise be called again every
    ``base`` seconds forever. :meth:`connected` when it is up and :meth:`ended`
    when it is gone start the pauses short again only when it served at least
    ``stable_after`` seconds.
    """

    def __init__(self, base: float = 1.0, cap: float = 60.0, stable_after: float = 0.0) -> None:
        self.base = base
        self.cap = cap
        self.stable_after = stable_after
        self.attempt = 0
        self._up_since: float | None = None  # monotonic time of connected(), until ended()

    def next(self) -> float:
        ceiling = min(self.cap, self.base * (2**self.attempt))
        self.attempt = min(self.attempt + 1, 30)
        return max(self.base / 2, random.uniform(0, ceiling))

    def reset(self) -> None:
        self.attempt = 0

    def connected(self) -> None:
        """A connection is up: how long it serves is counted from now."""
        self._up_since = time.monotonic()

    def ended(self, served: bool = True) -> None:
        """The connection is gone: the pauses start short again when it was up at least
        ``stable_after`` seconds and ``served`` (False: it reported a failure, or never
        became ready); otherwise they go on growing."""
        up_since, self._up_since = self._up_since, None
        if up_since is not None and served and time.monotonic() - up_since >= self.stable_after:
            self.reset()

    async def sleep(self) -> None:
        await asyncio.sleep(self.next())


def retry_after(value: str | None) -> float | None:
    """The seconds an HTTP ``Retry-After`` header asks to wait: a number of seconds or an
    HTTP date (RFC 9110 allows both), never below 0; None when it is absent or neither.
    What is too long to wait is the caller's to cap."""
    if not value or not value.strip():
        return None
    value = value.strip()
    try:
        return max(0.0, float(value))
    except ValueError:
        pass
    try:
        when = parsedate_to_datetime(value)
    except (TypeError, ValueError):
        return None
    if when.tzinfo is None:  # "-0000": UTC, as HTTP dates are
        when = when.replace(tzinfo=UTC)
    return max(0.0, (when - datetime.now(UTC)).total_seconds())
