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

**Decided on arrival** (:class:`Arrivals`, OneBot's way): a socket read hands
over dozens of events at once under load; each is checked against the map as
it arrives, and the ids of one pass of the event loop go to the store in one
``claim_many`` (one SQLite transaction, one Redis pipeline), before any of them
is queued for its chat. A message waits for its claim in a list, not in a
suspended run: what the claim costs a message is its row in the statement, not
a task step through the store's layers. The claims are the same ones, decided
by the same statement, in the order the messages came; only a message the
store refuses never enters its chat's queue. (A message claimed and then dropped
from a full chat queue is not run by a replay within the window: the overload
already dropped it once.)

The claims stay ordinary value keys of the store (``get``, ``keys``, ``delete``,
backups see ``dedup/…`` as they see any key with a TTL), as on Redis, where a
claim is a ``SET NX PX``: a separate claims table would save a SQLite claim
about a third of its statement, but ``get``/``delete``/backup would then have to
look in two places on one backend and one on the other.
"""

from __future__ import annotations

import asyncio
import time
from collections import deque
from collections.abc import Callable, Sequence
from typing import Generic, TypeVar

from tmy.errors import StoreError
from tmy.logs import get_logger
from tmy.store.base import Store

K = TypeVar("K")
T = TypeVar("T")

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
        if not self.first_here(key):
            return False
        if self.store is None:
            return True
        try:
            return await self.store.claim(key, DEDUP_WINDOW)
        except StoreError as exc:
            log.warning(f"{self.platform}.dedup_unavailable", key=key, error=str(exc))
            return True

    async def claim_all(self, keys: Sequence[str]) -> list[bool]:
        """The store's claims of ``keys`` (each already :meth:`first_here`), in order: one
        ``claim_many`` where the store has it; all True when there is no store, or it
        cannot be reached (answering twice beats never answering)."""
        store = self.store
        if store is None or not keys:
            return [True] * len(keys)
        try:
            many = getattr(store, "claim_many", None)
            if many is not None:
                answers: list[bool] = await many(keys, DEDUP_WINDOW)
                return answers
            return list(await asyncio.gather(*(store.claim(k, DEDUP_WINDOW) for k in keys)))
        except StoreError as exc:
            log.warning(f"{self.platform}.dedup_unavailable", key=keys[0], claims=len(keys),
                        error=str(exc))  # fmt: skip
            return [True] * len(keys)

    def first_here(self, key: str) -> bool:
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


class Arrivals(Generic[K, T]):
    """Deliveries decided as they arrive, a pass of the event loop at a time (see the
    module docstring): ``accept(where, item)`` for a first delivery (a chat queue's
    ``put``, called directly), ``refuse(where, item)`` for a replay, always in the order
    :meth:`put` was called."""

    def __init__(
        self,
        deliveries: Deliveries,
        accept: Callable[[K, T], object],
        refuse: Callable[[K, T], object],
    ) -> None:
        self.deliveries = deliveries
        self._accept = accept
        self._refuse = refuse
        self._waiting: list[tuple[str | None, K, T]] = []  # (store key or None: no id, …)
        self._task: asyncio.Task[None] | None = None

    def put(self, self_id: str, message_id: str, where: K, item: T) -> None:
        """Decide ``item`` (this account's ``message_id``, for ``where``): a replay this
        daemon took is refused now; anything else waits for the store's claims of this pass."""
        key: str | None = None
        deliveries = self.deliveries
        if message_id:
            key = f"dedup/{deliveries.platform}/{self_id}/{message_id}"
            if not deliveries.first_here(key):
                self._refuse(where, item)
                return
        if deliveries.store is None and not self._waiting:
            self._accept(where, item)  # the map is the whole window: nothing to wait for
            return
        self._waiting.append((key, where, item))
        if self._task is None:
            self._task = asyncio.get_running_loop().create_task(self._claims())

    async def _claims(self) -> None:
        """Claim what waits, one batch per pass (a batch waiting on the store gathers the
        next), and hand each item on in order."""
        try:
            while self._waiting:
                batch, self._waiting = self._waiting, []
                keys = [key for key, _, _ in batch if key is not None]
                try:
                    answers = iter(await self.deliveries.claim_all(keys))
                except Exception:  # a bug, not the store's refusal: run them (not lose them)
                    log.exception(f"{self.deliveries.platform}.dedup_failed", claims=len(keys))
                    answers = iter([True] * len(keys))
                accept, refuse = self._accept, self._refuse
                for key, where, item in batch:
                    try:
                        if key is None or next(answers):
                            accept(where, item)
                        else:
                            refuse(where, item)
                    except Exception:
                        log.exception(f"{self.deliveries.platform}.arrival_failed")
        finally:
            if self._task is asyncio.current_task():  # not one a put() started during close()
                self._task = None

    async def close(self) -> None:
        """Forget what waits and stop the claims in flight (a stop: nothing is queued now)."""
        self._waiting = []
        task, self._task = self._task, None
        if task is not None:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
