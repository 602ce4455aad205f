"""Who a Slack user is: their name (``USER_NAME``, mentions) and workspace role, cached.

Slack's message events carry only user ids. ``users.info`` gives a user's
display name and whether they are an owner (``is_owner``/``is_primary_owner``)
or admin (``is_admin``) of the workspace; ``adapters.slack.admins_from: [owner,
admin]`` makes those users admins in every channel of the workspace
(``Message.chat_admin``; Slack roles are workspace-wide, so DMs included). One
call per user every :attr:`Users.ttl` seconds (a promotion shows after at most
that long); concurrent runs asking about the same user share one call. When
Slack refuses (a missing ``users:read`` scope, a network error) the user is
shown by id and counts as no admin for :data:`RETRY_AFTER` seconds, logged
once as ``slack.users_failed``.
"""

from __future__ import annotations

import asyncio
import time
from collections import OrderedDict
from collections.abc import Awaitable, Callable, Iterable
from typing import Any

from tmy.logs import get_logger

log = get_logger("tmy.adapter.slack")

RETRY_AFTER = 30.0  # seconds before a refused users.info is asked again
MAX_USERS = 4096  # users kept (the least recently fetched forgotten past it)


class Users:
    """``users.info`` answers per user id, kept ``ttl`` seconds (see module doc)."""

    ttl = 300.0

    def __init__(self, fetch: Callable[[str], Awaitable[dict[str, Any]]]) -> None:
        self._fetch = fetch  # users.info -> the "user" object
        self._known: OrderedDict[str, tuple[float, dict[str, Any]]] = OrderedDict()
        self._asking: dict[str, asyncio.Future[dict[str, Any]]] = {}

    async def info(self, user: str) -> dict[str, Any]:
        """The user object ({} when Slack would not say)."""
        now = time.monotonic()
        known = self._known.get(user)
        if known is not None and known[0] > now:
            return known[1]
        asking = self._asking.get(user)
        if asking is not None:
            return await asyncio.shield(asking)
        future: asyncio.Future[dict[str, Any]] = asyncio.get_running_loop().create_future()
        self._asking[user] = future
        try:
            try:
                found, ttl = await self._fetch(user), self.ttl
            except Exception as exc:
                log.warning("slack.users_failed", user=user, error=f"{type(exc).__name__}: {exc}")
                found, ttl = {}, RETRY_AFTER
            self._keep(user, found, ttl)
            future.set_result(found)
            return found
        finally:
            self._asking.pop(user, None)
            if not future.done():
                future.cancel()

    async def name(self, user: str) -> str:
        """The name Slack shows for ``user`` (their id when unknown)."""
        info = await self.info(user)
        profile = info.get("profile") or {}
        return str(
            profile.get("display_name")
            or profile.get("real_name")
            or info.get("real_name")
            or info.get("name")
            or user
        )

    async def names(self, users: Iterable[str]) -> dict[str, str]:
        users = list(users)
        found = await asyncio.gather(*(self.name(u) for u in users))
        return dict(zip(users, found, strict=True))

    async def is_admin(self, user: str, wanted: Iterable[str]) -> bool:
        """Is ``user`` an owner/admin of the workspace, as ``admins_from`` asks?"""
        wanted = frozenset(wanted)
        if not wanted:
            return False
        info = await self.info(user)
        owner = bool(info.get("is_owner") or info.get("is_primary_owner"))
        return ("owner" in wanted and owner) or ("admin" in wanted and bool(info.get("is_admin")))

    def _keep(self, user: str, info: dict[str, Any], ttl: float) -> None:
        self._known.pop(user, None)
        self._known[user] = (time.monotonic() + ttl, info)
        while len(self._known) > MAX_USERS:
            self._known.popitem(last=False)
