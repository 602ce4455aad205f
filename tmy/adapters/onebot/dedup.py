"""A message delivered twice runs once: the first-delivery check of the OneBot adapter.

A message id seen again within :data:`DEDUP_WINDOW` seconds (a replay after a
reconnect, or the same account on two transports) runs once: the claim is an
atomic ``update`` in the store, so it also holds across daemons sharing Redis.
If the store cannot be reached the message runs anyway (answering twice beats
never answering). Without a store the window is kept in this process.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from typing import Any

from tmy.errors import StoreError
from tmy.logs import get_logger
from tmy.store.base import MISSING, Store

log = get_logger("tmy.adapter.onebot")

DEDUP_WINDOW = 300.0  # seconds a message id is remembered (store key dedup/onebot/<self>/<id>)


class Deliveries:
    """Message ids seen per account within the window, in the store (or this process)."""

    def __init__(self, store: Store | None) -> None:
        self.store = store
        self._seen: OrderedDict[str, float] = OrderedDict()  # dedup without a store

    async def first(self, self_id: str, message_id: str) -> bool:
        """True the first time this account's ``message_id`` is seen within the window."""
        if not message_id:
            return True
        key = f"dedup/onebot/{self_id}/{message_id}"
        if self.store is None:
            return self._first_local(key)
        try:
            return bool(await self.store.update(key, _claim, ttl=DEDUP_WINDOW))
        except StoreError as exc:
            log.warning("onebot.dedup_unavailable", key=key, error=str(exc))
            return True

    def _first_local(self, key: str) -> bool:
        now = time.monotonic()
        while self._seen and next(iter(self._seen.values())) < now:
            self._seen.popitem(last=False)
        if key in self._seen:
            return False
        self._seen[key] = now + DEDUP_WINDOW
        return True


def _claim(current: Any) -> tuple[Any, bool]:
    """Store update: mark the key seen; the result says whether it was new."""
    return True, current is MISSING
