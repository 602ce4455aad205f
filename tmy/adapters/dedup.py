"""A message delivered twice runs once: the first-delivery check every chat adapter uses.

A platform's message id seen again within :data:`DEDUP_WINDOW` seconds (a replay
after a reconnect, a webhook the platform delivered again because the answer was
slow, the same account on two transports) runs once, in two layers:

* **In this process** a bounded map of the ids this daemon has taken
  (:data:`FRONT_SIZE` at most, each for the window) answers a replay within
  the same daemon at once, without touching the store: the common replay
  (NapCat re-sending after a reconnect to the same daemon, Slack retrying a webhook)
  costs a dict lookup.
* **Across daemons** sharing a store, the first delivery is a
  :meth:`~tmy.store.base.Store.claim` of ``dedup/<platform>/<self>/<id>``: one
  statement (SQLite ``INSERT … ON CONFLICT … WHERE expired``, Redis
  ``SET NX PX``), true for exactly one claimant while the window lasts.

An id is put in the map before its claim is awaited, so two deliveries to the
same daemon at the same moment also run once. The map forgets the oldest ids
first when it is full; a forgotten id still meets the store's claim, so the
bound costs a store round-trip, never a duplicate run. If the store cannot
be reached the message runs anyway (answering twice beats never answering).
Without a store the map is the whole window.
"""

from __future__ import annotations

import time
from collections import deque

from tmy.errors import StoreError
from tmy.logs import get_logger
from tmy.store.base import Store

log = get_logger("tmy.adapter")

# seconds a message id is remembered (store key dedup/<platform>/<self>/<id>): past Slack's
# last webhook retry (after 1 and then 5 minutes), so a retry whose first answer was lost still
# runs once. Feishu retries an unanswered event for up to 6 h, but each adapter answers 200 at
# once (before running), so only a lost answer is retried, and at 15 s first
DEDUP_WINDOW = 600.0
FRONT_SIZE = 200_000  # ids this daemon remembers in memory (~30 MB at most; 10 min at 300/s)


class Deliveries:
    """Message ids seen per account within the window: this process's map, then the store.

    ``platform`` names the key space (``onebot``, ``slack`` …): ids of two platforms
    never meet."""

    def __init__(self, store: Store | None, platform: str, size: int = FRONT_SIZE) -> None:
        self.store = store
        self.platform = platform
        self.size = size
        self._seen: dict[str, float] = {}  # key -> monotonic expiry
        self._order: deque[tuple[float, str]] = deque()  # (expiry, key), oldest first

    async def first(self, self_id: str, message_id: str) -> bool:
        """True the first time this account's ``message_id`` is seen within the window."""
        if not message_id:
            return True
        key = f"dedup/{self.platform}/{self_id}/{message_id}"
        if not self._first_here(key):
            return False
        if self.store is None:
            return True
        try:
            return await self.store.claim(key, DEDUP_WINDOW)
        except StoreError as exc:
            log.warning(f"{self.platform}.dedup_unavailable", key=key, error=str(exc))
            return True

    def _first_here(self, key: str) -> bool:
        """True (and remembered) unless this process took ``key`` within the window."""
        now = time.monotonic()
        seen = self._seen
        expires = seen.get(key)
        if expires is not None and expires > now:
            return False
        until = now + DEDUP_WINDOW
        seen[key] = until
        order = self._order
        order.append((until, key))
        # forget what expired, and the oldest past the bound: two per delivery, so the
        # map shrinks back after a burst (each delivery adds one)
        for _ in range(2):
            oldest, old = order[0]
            if oldest > now and len(order) <= self.size:
                break
            order.popleft()
            if seen.get(old) == oldest:  # not taken again since (a later entry has it)
                del seen[old]
        return True
