"""Each chat's owner and admins as its platform lists them, asked at most once per ttl.

``admins_from: [owner, admin]`` makes a group's owner and admins chat admins
*in that group* (``Message.chat_admin``), and a platform that lists a chat's
roles in one call (Telegram's ``getChatAdministrators``, Feishu's chat info) is
asked that list at most once per ``ttl`` seconds per chat, one call at a time
per chat (the runs of a busy group wait for the one answer). A call that fails
makes nobody a chat admin there for :data:`RETRY_AFTER` seconds; at most
:data:`MAX_CHATS` chats are kept (the oldest forgotten).
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Hashable
from typing import Generic, TypeVar

RETRY_AFTER = 30.0  # seconds before a chat whose list was refused is asked again
MAX_CHATS = 4096

Roles = dict[str, str]  # user id -> "owner" | "admin"
C = TypeVar("C", bound=Hashable)


class ChatRoles(Generic[C]):
    """``{user id: role}`` per chat, from ``fetch(chat)`` (None when it failed: the fetch
    logs why in its platform's words), cached ``ttl`` seconds."""

    def __init__(
        self,
        fetch: Callable[[C], Awaitable[Roles | None]],
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        self._fetch_roles = fetch
        self.ttl = ttl
        self.clock = clock
        self._roles: dict[C, tuple[float, Roles]] = {}  # chat -> (expiry, user -> role)
        self._locks: dict[C, asyncio.Lock] = {}

    async def roles(self, chat: C) -> Roles:
        """``{user id: "owner" | "admin"}`` for ``chat``, from the cache when fresh."""
        cached = self._roles.get(chat)
        if cached is not None and cached[0] > self.clock():
            return cached[1]
        async with self._locks.setdefault(chat, asyncio.Lock()):
            cached = self._roles.get(chat)  # another run may have fetched it meanwhile
            if cached is not None and cached[0] > self.clock():
                return cached[1]
            roles = await self._fetch_roles(chat)
            if roles is None:
                return self._keep(chat, {}, RETRY_AFTER)
            return self._keep(chat, roles, self.ttl)

    def _keep(self, chat: C, roles: Roles, ttl: float) -> Roles:
        self._roles.pop(chat, None)
        self._roles[chat] = (self.clock() + ttl, roles)
        if len(self._roles) > MAX_CHATS:
            oldest = next(iter(self._roles))
            self._roles.pop(oldest)
            self._locks.pop(oldest, None)
        return roles
