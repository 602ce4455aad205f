"""The chat switch: ``.tmy off`` silences the bot in one chat, ``.tmy on`` lifts it.

The switch is stored (``off/<platform>/<chat>``), so every daemon on the store
honours it; each daemon caches a verdict for :data:`OFF_CACHE_SECONDS`. The
engine asks :meth:`ChatSwitch.cached` first (no coroutine on the hot path) and
awaits :meth:`ChatSwitch.is_off` only when the cache has no fresh verdict. The
lookups asked during one turn of the event loop (a burst of messages from chats
not seen for 2 s) are one ``get_many`` (:class:`tmy.store.joined.ReadBatch`, as
the LLM steps' history reads are).
"""

from __future__ import annotations

import time

from tmy.engine.keys import escape_key_part
from tmy.errors import TmyError
from tmy.logs import get_logger
from tmy.message import Message
from tmy.store.base import MISSING, Store
from tmy.store.joined import ReadBatch

log = get_logger("tmy.admin")

OFF_CACHE_SECONDS = 2.0
# the verdicts' clock: the engine's (it reads it once per message and tests a verdict
# against that reading, :meth:`tmy.engine.core.Engine._planned`)
_clock = time.perf_counter
_OFF_CACHE_MAX = 10_000


def off_key(message: Message) -> str:
    """The store key that marks ``message``'s chat as switched off."""
    return f"off/{escape_key_part(message.platform)}/{escape_key_part(message.chat)}"


class ChatSwitch:
    """Which chats are switched off, read through a short per-daemon cache."""

    def __init__(self, store: Store) -> None:
        self.store = store
        # platform -> chat -> (off, fresh until on the perf_counter clock): the engine reads
        # it inline on its FAQ way, as :meth:`cached` does (two lookups of strings whose
        # hash is kept, not a (platform, chat) key built, hashed and compared per message)
        self.verdicts: dict[str, dict[str, tuple[bool, float]]] = {}
        self._kept = 0  # verdicts in all platforms' dicts (at most _OFF_CACHE_MAX)
        self._reads = ReadBatch()  # this loop turn's lookups, read together

    def cached(self, message: Message) -> bool | None:
        """The cache's verdict for ``message``'s chat while fresh; None when unknown or stale."""
        return self._fresh(message, _clock())

    def _fresh(self, message: Message, now: float) -> bool | None:
        chats = self.verdicts.get(message.platform)
        hit = None if chats is None else chats.get(message.chat)
        return hit[0] if hit is not None and hit[1] > now else None

    async def is_off(self, message: Message) -> bool:
        """Whether the bot is off in ``message``'s chat (False when the store cannot say)."""
        now = _clock()
        cached = self._fresh(message, now)
        if cached is not None:
            return cached
        off = await self._lookup(off_key(message))
        self._keep(message, off, now + OFF_CACHE_SECONDS)
        return off

    def _keep(self, message: Message, off: bool, until: float) -> None:
        """Cache a verdict, at most :data:`_OFF_CACHE_MAX` in all (platform names come from
        callers): past that every one is dropped and read again."""
        if self._kept >= _OFF_CACHE_MAX:
            self.verdicts.clear()
            self._kept = 0
        chats = self.verdicts.get(message.platform)
        if chats is None:
            chats = self.verdicts[message.platform] = {}
        if message.chat not in chats:
            self._kept += 1
        chats[message.chat] = (off, until)

    async def _lookup(self, key: str) -> bool:
        """Whether ``key`` is stored, read with the other lookups of this loop turn (False
        when the store cannot say: the switch must not silence the bot when the store stalls)."""
        try:
            (value,) = await self._reads.get_many(self.store, [key])
        except TmyError as exc:
            log.warning("chat_switch.lookup_failed", error=str(exc))
            return False
        return value is not MISSING

    async def set(self, message: Message, off: bool) -> None:
        """Switch ``message``'s chat off (or on again), for every daemon on the store."""
        key = off_key(message)
        if off:
            await self.store.set(key, {"by": f"{message.platform}:{message.user}"})
        else:
            await self.store.delete(key)
        self._keep(message, off, _clock() + OFF_CACHE_SECONDS)
