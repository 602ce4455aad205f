"""Chat admins by Telegram's roles (``adapters.telegram.admins_from``), cached per chat.

``admins_from: [owner, admin]`` makes a group's creator (``owner``) and its
administrators (``admin``) admins *in that group*: ``Message.chat_admin`` is
set for ``admin_only`` rules and chat-scoped admin commands. The list comes from
``getChatAdministrators`` and is kept ``admins_ttl`` seconds per chat (one call
at a time per chat; a promotion shows after at most that long). When Telegram
refuses the call (the bot left the chat, a network error) nobody counts as a
chat admin for :data:`~tmy.adapters.chatroles.RETRY_AFTER` seconds, logged as
``telegram.admins_failed``. Private chats have no admins. The cache is
:class:`~tmy.adapters.chatroles.ChatRoles`.
"""

from __future__ import annotations

import time
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from tmy.adapters.chatroles import ChatRoles, Roles
from tmy.adapters.telegram.errors import describe
from tmy.logs import get_logger

log = get_logger("tmy.adapter.telegram")

ROLES = {"creator": "owner", "administrator": "admin"}  # Telegram's status -> admins_from


class ChatAdmins(ChatRoles[int]):
    """Who is owner or admin of a chat, asked of Telegram at most once per ``ttl``."""

    def __init__(
        self,
        fetch: Callable[[int], Awaitable[Iterable[Any]]],
        wanted: Iterable[str],
        ttl: float,
        clock: Callable[[], float] = time.monotonic,
    ) -> None:
        super().__init__(self._lookup, ttl, clock)
        self._fetch = fetch  # bot.get_chat_administrators
        self.wanted = frozenset(wanted)

    async def is_admin(self, chat: int, user: str) -> bool:
        """Is ``user`` one of the roles in ``admins_from`` in ``chat``?"""
        if not self.wanted or chat > 0:  # nothing asked for, or a private chat
            return False
        roles = await self.roles(chat)
        return roles.get(user) in self.wanted

    async def _lookup(self, chat: int) -> Roles | None:
        try:
            members = await self._fetch(chat)
        except Exception as exc:
            log.warning("telegram.admins_failed", chat=str(chat), error=describe(exc))
            return None
        return {
            str(m.user.id): ROLES[m.status]
            for m in members
            if getattr(m, "status", None) in ROLES and getattr(m, "user", None) is not None
        }
