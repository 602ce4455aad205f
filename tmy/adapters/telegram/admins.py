"""Chat admins by Telegram's roles (``adapters.telegram.admins_from``), cached per chat.

``admins_from: [owner, admin]`` makes a group's creator (``owner``) and its
administrators (``admin``) admins *in that group*: ``Message.chat_admin`` is
set for ``admin_only`` rules and chat-scoped admin commands. The list comes from
``getChatAdministrators`` and is kept ``admins_ttl`` seconds per chat (one call
at a time per chat; a promotion shows after at most that long). When Telegram
refuses the call (the bot left the chat, a network error) nobody counts as a
chat admin for :data:`RETRY_AFTER` seconds, logged as ``telegram.admins_failed``.
Private chats have no admins.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from tmy.adapters.telegram.errors import describe
from tmy.logs import get_logger

log = get_logger("tmy.adapter.telegram")

ROLES = {"creator": "owner", "administrator": "admin"}  # Telegram's status -> admins_from
RETRY_AFTER = 30.0  # seconds before a refused getChatAdministrators is asked again
MAX_CHATS = 4096  # chats whose lists are kept (the oldest forgotten past it)


class ChatAdmins:
    """Who is owner or admin of a chat, asked of Telegram at most once per ``ttl``."""

    def __init__(
        self,
        fetch: Callable[[int], Awaitable[Iterable[Any]]],
        wanted: Iterable[str],
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch = fetch  # bot.get_chat_administrators
        self.wanted = frozenset(wanted)
        self.ttl = ttl
        self.clock = clock
        self._roles: dict[int, tuple[float, dict[str, str]]] = {}  # chat -> (expiry, user -> role)
        self._locks: dict[int, asyncio.Lock] = {}

    async def is_admin(self, chat: int, user: str) -> bool:
        """Is ``user`` one of the roles in ``admins_from`` in ``chat``?"""
        if not self.wanted or chat > 0:  # nothing asked for, or a private chat
            return False
        roles = await self.roles(chat)
        return roles.get(user) in self.wanted

    async def roles(self, chat: int) -> dict[str, str]:
        """``{user id: "owner" | "admin"}`` for ``chat``, from the cache when fresh."""
        cached = self._roles.get(chat)
        if cached is not None and cached[0] > self.clock():
            return cached[1]
        lock = self._locks.setdefault(chat, asyncio.Lock())
        async with lock:
            cached = self._roles.get(chat)  # another run may have fetched it meanwhile
            if cached is not None and cached[0] > self.clock():
                return cached[1]
            try:
                members = await self._fetch(chat)
            except Exception as exc:
                log.warning("telegram.admins_failed", chat=str(chat), error=describe(exc))
                self._keep(chat, {}, RETRY_AFTER)
                return {}
            roles = {
                str(m.user.id): ROLES[m.status]
                for m in members
                if getattr(m, "status", None) in ROLES and getattr(m, "user", None) is not None
            }
            self._keep(chat, roles, self.ttl)
            return roles

    def _keep(self, chat: int, roles: dict[str, str], ttl: float) -> None:
        self._roles.pop(chat, None)
        self._roles[chat] = (self.clock() + ttl, roles)
        if len(self._roles) > MAX_CHATS:
            oldest = next(iter(self._roles))
            self._roles.pop(oldest)
            self._locks.pop(oldest, None)
