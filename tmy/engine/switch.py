"""The chat switch: ``.tmy off`` silences the bot in one chat, ``.tmy on`` lifts it.

The switch is stored (``off/<platform>/<chat>``), so every daemon on the store
honours it; each daemon caches a verdict for :data:`OFF_CACHE_SECONDS`. The
engine asks :meth:`ChatSwitch.cached` first (no coroutine on the hot path) and
awaits :meth:`ChatSwitch.is_off` only when the cache has no fresh verdict. The
lookups asked during one turn of the event loop (a burst of messages from chats
not seen for 2 s) are one ``get_many``: the first asker yields once, reads every
key asked meanwhile, and answers the others (as :mod:`tmy.llm.reads` does for
histories).
"""

from __future__ import annotations

import asyncio
import time

from tmy.engine.keys import escape_key_part
from tmy.errors import TmyError
from tmy.logs import get_logger
from tmy.message import Message
from tmy.store.base import MISSING, Store

log = get_logger("tmy.admin")

OFF_CACHE_SECONDS = 2.0
_OFF_CACHE_MAX = 10_000


def off_key(message: Message) -> str:
    """The store key that marks ``message``'s chat as switched off."""
    return f"off/{escape_key_part(message.platform)}/{escape_key_part(message.chat)}"


class ChatSwitch:
    """Which chats are switched off, read through a short per-daemon cache."""

    def __init__(self, store: Store) -> None:
        self.store = store
        self._cache: dict[tuple[str, str], tuple[bool, float]] = {}
        # this loop turn's lookups: store key -> the futures of the callers who joined
        self._asked: dict[str, list[asyncio.Future[bool]]] | None = None
        self._tasks: set[asyncio.Task[None]] = set()  # a batch read for a cancelled leader

    def cached(self, message: Message) -> bool | None:
        """The cache's verdict for ``message``'s chat while fresh; None when unknown or stale."""
        hit = self._cache.get((message.platform, message.chat))
        if hit is not None and hit[1] > time.monotonic():
            return hit[0]
        return None

    async def is_off(self, message: Message) -> bool:
        """Whether the bot is off in ``message``'s chat (False when the store cannot say)."""
        now = time.monotonic()
        hit = self._cache.get((message.platform, message.chat))
        if hit is not None and hit[1] > now:
            return hit[0]
        off = await self._lookup(off_key(message))
        if len(self._cache) >= _OFF_CACHE_MAX:
            self._cache.clear()
        self._cache[(message.platform, message.chat)] = (off, now + OFF_CACHE_SECONDS)
        return off

    async def _lookup(self, key: str) -> bool:
        """Whether ``key`` is stored, read with the other lookups of this loop turn."""
        asked = self._asked
        if asked is not None:  # a leader reads this turn's keys: join it
            waiter = asyncio.get_running_loop().create_future()
            asked.setdefault(key, []).append(waiter)
            return await waiter
        asked = self._asked = {key: []}
        try:
            await asyncio.sleep(0)  # the other lookups of this turn join
        except BaseException:  # cancelled first: a task reads for those who joined
            self._asked = None
            self._spawn(asked)
            raise
        self._asked = None
        return (await self._read(asked))[key]

    async def _read(self, asked: dict[str, list[asyncio.Future[bool]]]) -> dict[str, bool]:
        """One ``get_many`` for ``asked``; every waiter gets its verdict (False when the
        store cannot say: the switch must not silence the bot when the store stalls)."""
        keys = list(asked)
        try:
            values = await self.store.get_many(keys)
            found = {k: v is not MISSING for k, v in zip(keys, values, strict=True)}
        except TmyError as exc:
            log.warning("chat_switch.lookup_failed", error=str(exc))
            found = dict.fromkeys(keys, False)
        except Exception as exc:  # not the store's: every asker gets it, as alone
            for waiters in asked.values():
                for waiter in waiters:
                    if not waiter.done():
                        waiter.set_exception(exc)
            raise
        except BaseException:  # the leader cancelled mid-read: a task reads for the others
            waiting = {k: w for k, w in asked.items() if w}
            if waiting:
                self._spawn(waiting)
            raise
        for key, waiters in asked.items():
            for waiter in waiters:
                if not waiter.done():
                    waiter.set_result(found[key])
        return found

    def _spawn(self, asked: dict[str, list[asyncio.Future[bool]]]) -> None:
        task = asyncio.ensure_future(self._read(asked))
        self._tasks.add(task)
        task.add_done_callback(self._done)

    def _done(self, task: asyncio.Task[None]) -> None:
        self._tasks.discard(task)
        if not task.cancelled():
            task.exception()  # its waiters got it; retrieved, so asyncio does not log it

    async def set(self, message: Message, off: bool) -> None:
        """Switch ``message``'s chat off (or on again), for every daemon on the store."""
        key = off_key(message)
        if off:
            await self.store.set(key, {"by": f"{message.platform}:{message.user}"})
        else:
            await self.store.delete(key)
        self._cache[(message.platform, message.chat)] = (off, time.monotonic() + OFF_CACHE_SECONDS)
