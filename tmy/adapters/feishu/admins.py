"""Chat admins by Feishu's roles (``adapters.feishu.admins_from``), cached per chat.

``admins_from: [owner, admin]`` makes a group's owner (``owner_id``) and its
managers (``user_manager_id_list``) — both from ``GET /open-apis/im/v1/chats/{chat_id}``
with ``user_id_type=open_id`` — admins *in that group* (``Message.chat_admin``).
A chat's roles are kept :data:`TTL` seconds; when Feishu refuses the call nobody
counts as a chat admin there for :data:`~tmy.adapters.chatroles.RETRY_AFTER` seconds
(``feishu.admins_failed``). Private chats have no admins. The cache is
:class:`~tmy.adapters.chatroles.ChatRoles`.
"""

from __future__ import annotations

from collections.abc import Iterable

import aiohttp

from tmy.adapters.chatroles import ChatRoles, Roles
from tmy.adapters.feishu.api import Rest
from tmy.errors import AdapterError
from tmy.logs import get_logger

log = get_logger("tmy.adapter.feishu")

TTL = 300.0  # seconds a chat's owner and managers are remembered


class ChatAdmins(ChatRoles[str]):
    """Who is owner or manager of a chat, asked of Feishu at most once per :data:`TTL`."""

    def __init__(self, rest: Rest, wanted: Iterable[str]) -> None:
        super().__init__(self._lookup, TTL)
        self.rest = rest
        self.wanted = frozenset(wanted)

    async def is_admin(self, chat: str, user: str, private: bool) -> bool:
        if not self.wanted or private or not chat:
            return False
        return (await self.roles(chat)).get(user) in self.wanted

    async def _lookup(self, chat: str) -> Roles | None:
        try:
            answer = await self.rest.call(
                "GET", f"/open-apis/im/v1/chats/{chat}", params={"user_id_type": "open_id"}
            )
        except (aiohttp.ClientError, TimeoutError, AdapterError) as exc:
            log.warning("feishu.admins_failed", chat=chat, error=str(exc))
            return None
        if not answer.ok:
            log.warning("feishu.admins_failed", chat=chat, error=answer.describe())
            return None
        data = answer.data
        roles = {str(m): "admin" for m in data.get("user_manager_id_list") or []}
        if data.get("owner_id"):
            roles[str(data["owner_id"])] = "owner"
        return roles
