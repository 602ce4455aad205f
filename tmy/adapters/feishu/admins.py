"""Chat admins by Feishu's roles (``adapters.feishu.admins_from``), cached per chat.

``admins_from: [owner, admin]`` makes a group's owner (``owner_id``) and its
managers (``user_manager_id_list``) — both from ``GET /open-apis/im/v1/chats/{chat_id}``
with ``user_id_type=open_id`` — admins *in that group* (``Message.chat_admin``).
A chat's roles are kept :data:`TTL` seconds; when Feishu refuses the call nobody
counts as a chat admin there for :data:`RETRY_AFTER` seconds
(``feishu.admins_failed``). Private chats have no admins.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Iterable

import aiohttp

from tmy.adapters.feishu.api import Rest
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.feishu")

TTL = 300.0  # seconds a chat's owner and managers are remembered
RETRY_AFTER = 30.0  # seconds before a refused chat lookup is asked again
MAX_CHATS = 4096


class ChatAdmins:
    """Who is owner or manager of a chat, asked of Feishu at most once per :data:`TTL`."""

    def __init__(self, rest: Rest, wanted: Iterable[str]) -> None:
        self.rest = rest
        self.wanted = frozenset(wanted)
        self._roles: dict[str, tuple[float, dict[str, str]]] = {}
        self._locks: dict[str, asyncio.Lock] = {}

    async def is_admin(self, chat: str, user: str, private: bool) -> bool:
        if not self.wanted or private or not chat:
            return False
        return (await self.roles(chat)).get(user) in self.wanted

    async def roles(self, chat: str) -> dict[str, str]:
        """``{open_id: "owner" | "admin"}`` for ``chat``, from the cache when fresh."""
        cached = self._roles.get(chat)
        if cached is not None and cached[0] > time.monotonic():
            return cached[1]
        async with self._locks.setdefault(chat, asyncio.Lock()):
            cached = self._roles.get(chat)
            if cached is not None and cached[0] > time.monotonic():
                return cached[1]
            try:
                answer = await self.rest.call(
                    "GET", f"/open-apis/im/v1/chats/{chat}", params={"user_id_type": "open_id"}
                )
            except (aiohttp.ClientError, TimeoutError, AdapterError) as exc:
                log.warning("feishu.admins_failed", chat=chat, error=str(exc))
                return self._keep(chat, {}, RETRY_AFTER)
            if not answer.ok:
                log.warning("feishu.admins_failed", chat=chat, error=answer.describe())
                return self._keep(chat, {}, RETRY_AFTER)
            data = answer.data
            roles = {str(m): "admin" for m in data.get("user_manager_id_list") or []}
            if data.get("owner_id"):
                roles[str(data["owner_id"])] = "owner"
            return self._keep(chat, roles, TTL)

    def _keep(self, chat: str, roles: dict[str, str], ttl: float) -> dict[str, str]:
        self._roles.pop(chat, None)
        self._roles[chat] = (time.monotonic() + ttl, roles)
        if len(self._roles) > MAX_CHATS:
            oldest = next(iter(self._roles))
            self._roles.pop(oldest)
            self._locks.pop(oldest, None)
        return roles
