"""Chat admins by the platform's guild roles (``adapters.satori.admins_from``), cached.

Satori has no standard "owner/admin" field: platforms report roles differently.
A role counts when its id or name is ``owner`` (→ owner) or ``admin`` /
``administrator`` (→ admin) — what Koishi's OneBot/QQ adapters put in
``member.roles``. The roles come from the event itself when it carries
``member.roles`` (no call), else from ``guild.member.get``, kept
:data:`TTL` seconds per (account, guild, user). A platform whose roles are ids
(Discord) never matches: nobody is a chat admin there by role, only by ``admins:``.
Private chats have no admins. A refused call counts as no role for :data:`RETRY_AFTER`.
"""

from __future__ import annotations

import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from tmy.logs import get_logger

log = get_logger("tmy.adapter.satori")

ROLES = {"owner": "owner", "admin": "admin", "administrator": "admin"}
TTL = 300.0  # seconds a member's roles are kept
RETRY_AFTER = 30.0  # seconds before a refused guild.member.get is asked again
MAX_ENTRIES = 8192

Key = tuple[str, str, str, str]  # platform, self id, guild, user
Fetch = Callable[[str, str, str, str], Awaitable[Any]]


def role_words(roles: Iterable[Any]) -> set[str]:
    """``owner`` / ``admin`` among ``roles`` (strings or ``{id, name}`` maps)."""
    found = set()
    for role in roles:
        names = (role.get("id"), role.get("name")) if isinstance(role, dict) else (role,)
        for name in names:
            word = ROLES.get(str(name or "").strip().lower())
            if word:
                found.add(word)
    return found


class ChatAdmins:
    """Whether a member holds one of the wanted roles, asked at most once per TTL."""

    def __init__(
        self, fetch: Fetch, wanted: Iterable[str], clock: Callable[[], float] = time.monotonic
    ) -> None:
        self._fetch = fetch  # (platform, self id, guild, user) -> GuildMember
        self.wanted = frozenset(wanted)
        self.clock = clock
        self._cache: OrderedDict[Key, tuple[float, set[str]]] = OrderedDict()

    async def is_admin(self, key: Key, carried: tuple[str, ...] | None) -> bool:
        """``key``'s member is owner/admin by ``admins_from``; ``carried``: the event's roles."""
        if not self.wanted or not key[2] or not key[3]:
            return False
        if carried is not None:
            return bool(role_words(carried) & self.wanted)
        return bool(await self._roles(key) & self.wanted)

    async def _roles(self, key: Key) -> set[str]:
        cached = self._cache.get(key)
        if cached is not None and cached[0] > self.clock():
            return cached[1]
        try:
            member = await self._fetch(*key)
        except Exception as exc:
            log.warning("satori.admins_failed", guild=key[2], user=key[3], error=str(exc))
            self._keep(key, set(), RETRY_AFTER)
            return set()
        roles = member.get("roles") if isinstance(member, dict) else None
        words = role_words(roles) if isinstance(roles, list) else set()
        self._keep(key, words, TTL)
        return words

    def _keep(self, key: Key, words: set[str], ttl: float) -> None:
        self._cache.pop(key, None)
        self._cache[key] = (self.clock() + ttl, words)
        while len(self._cache) > MAX_ENTRIES:
            self._cache.popitem(last=False)
