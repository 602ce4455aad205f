"""What one ``/mcp`` client may hold: sessions per API key, and open event streams.

The SDK's session manager caps sessions in all (``max_sessions``), not per client, and a
session whose event stream (``GET /mcp``) is open never idles out. Unbounded, one key —
or anyone, where no keys are set — could open every session there is (every other
client then gets 503 for the half hour they take to expire) and park an event stream on
each: a stream is a *busy* connection of the listener, which its guard never closes to
make room (:mod:`tmy.adapters.listener`), so enough of them would refuse every new
connection — OneBot webhooks, ``/v1/*``, the console — the lock-out the listener's guard
exists to prevent. So, as the console's live streams are capped (:mod:`tmy.console.live`):

* at most :data:`SESSIONS_PER_KEY` sessions are open (or being opened) per API key —
  another key still gets one; past it the opening request is answered 503;
* at most :data:`STREAMS` event streams are open in all, :data:`STREAMS_PER_KEY` per
  key — far below the listener's ``max_connections``; past it the ``GET`` is answered
  503 and holds nothing. An MCP client does without the stream (it carries only what the
  server sends unasked, which tmy's ``/mcp`` does not).

Without keys there is no per-key share: the totals alone apply.
"""

from __future__ import annotations

import contextlib
from collections import Counter
from collections.abc import Iterator
from typing import Any

SESSIONS_PER_KEY = 100  # of the manager's MAX_SESSIONS in all
STREAMS = 64  # open event streams in all
STREAMS_PER_KEY = 8  # open event streams per API key


class Refused(Exception):
    """A client asked for more than its share (the message says what; answered 503)."""


class ClientLimits:
    """The counts behind the caps above, for one ``/mcp`` route."""

    def __init__(self) -> None:
        self.streams = 0
        self._streams: Counter[str] = Counter()
        self._opening: Counter[str] = Counter()  # opening requests in flight, per key

    @contextlib.contextmanager
    def opening(self, manager: Any, key: str) -> Iterator[None]:
        """An opening request (no session id yet) of ``key``, within its share of sessions."""
        if key:
            held = open_sessions(manager, key) + self._opening[key]
            if held >= SESSIONS_PER_KEY:
                raise Refused(
                    f"too many open MCP sessions for this API key ({SESSIONS_PER_KEY}); "
                    "close some (DELETE /mcp) or let them expire"
                )
        self._opening[key] += 1
        try:
            yield
        finally:
            self._opening[key] -= 1
            if not self._opening[key]:
                del self._opening[key]

    @contextlib.contextmanager
    def stream(self, key: str) -> Iterator[None]:
        """One event stream of ``key`` while the block lasts, within the caps."""
        if self.streams >= STREAMS:
            raise Refused(f"too many MCP event streams open ({STREAMS}); retry later")
        if key and self._streams[key] >= STREAMS_PER_KEY:
            raise Refused(f"too many MCP event streams open for this API key ({STREAMS_PER_KEY})")
        self.streams += 1
        self._streams[key] += 1
        try:
            yield
        finally:
            self.streams -= 1
            self._streams[key] -= 1
            if not self._streams[key]:
                del self._streams[key]


def open_sessions(manager: Any, key: str) -> int:
    """How many of ``manager``'s sessions ``key`` opened (the SDK keeps each session's
    owner, by the ``client_id`` the route gave it, for its own check that a session is
    used only by the key that opened it; it has no public count of them)."""
    owners = getattr(manager, "_session_owners", None) or {}
    return sum(1 for owner in list(owners.values()) if owner.get("client_id") == key)
