"""The console's Chats page: the chats seen recently and the bot's on/off switch per chat.

Switching is the ``on`` / ``off`` command (:mod:`tmy.commands.switch`) run for that
chat, so it reaches every daemon on the store as ``.tmy off`` does (a change: admin,
CSRF token, logged). Which chats are off is read from the switch's own keys
(``off/<platform>/<chat>``, :func:`tmy.engine.switch.off_key`): no command lists them.
The chats seen recently are the console's counters' (:func:`tmy.console.feed.recent_chats`,
counted since the daemon started); a chat that is off shows even when nobody has written
there lately.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp import web

from tmy.console.feed import recent_chats
from tmy.console.web import ConsoleRequest, Refused, Route, changed, page, redirect, run_command
from tmy.message import Message, id_problem
from tmy.store.base import MISSING, Store

OFF_PREFIX = "off/"
MAX_ROWS = 500  # chats listed at most (the recent ones first)


def _unescape(part: str) -> str:
    return part.replace("%2F", "/").replace("%25", "%")


async def off_chats(store: Store) -> dict[tuple[str, str], str]:
    """(platform, chat) → who switched it off, for every chat the switch keeps off."""
    keys = [k for k in await store.keys(OFF_PREFIX) if k.count("/") == 2]
    values = await store.get_many(keys) if keys else []
    out = {}
    for key, value in zip(keys, values, strict=True):
        if value is MISSING:
            continue
        _, platform, chat = key.split("/")
        by = value.get("by") if isinstance(value, dict) else None
        out[(_unescape(platform), _unescape(chat))] = str(by or "?")
    return out


def chat_rows(
    recent: list[dict[str, Any]], off: dict[tuple[str, str], str]
) -> list[dict[str, Any]]:
    """The recent chats (``platform``, ``chat`` and what the counters say of them), each
    with its switch, then the chats that are off but not recent."""
    rows, seen = [], set()
    for item in recent:
        where = (str(item.get("platform", "")), str(item.get("chat", "")))
        if not all(where) or where in seen:
            continue
        seen.add(where)
        rows.append({**item, "platform": where[0], "chat": where[1], "off": where in off,
                     "by": off.get(where, "")})  # fmt: skip
    for where, by in sorted(off.items()):
        if where not in seen:
            rows.append({"platform": where[0], "chat": where[1], "off": True, "by": by})
    return rows[:MAX_ROWS]


def _when(at: Any, tz: Any) -> str:
    if not isinstance(at, (int, float)):
        return ""
    return datetime.fromtimestamp(at, tz).isoformat(timespec="seconds")


async def chats_data(req: ConsoleRequest) -> dict[str, Any]:
    """The chats seen lately (newest first) and the chats switched off, each with its switch."""
    tz = req.app.settings.tz
    recent = [{**c, "last_seen": _when(c.get("at"), tz)} for c in recent_chats(req.app, MAX_ROWS)]
    rows = chat_rows(recent, await off_chats(req.app.store))
    return {"chats": rows, "off": sum(1 for r in rows if r["off"]), "total": len(rows)}


async def _list(req: ConsoleRequest) -> web.StreamResponse:
    return await page(req, "chats.html", await chats_data(req), title="Chats")


async def _switch(req: ConsoleRequest) -> web.StreamResponse:
    form = await req.form()
    platform, chat = form.get("platform", "").strip(), form.get("chat", "").strip()
    state = form.get("state", "")
    if state not in ("on", "off"):
        raise Refused(400, "state is on or off")
    limit = req.app.settings.max_id_chars
    for name, value in (("platform", platform), ("chat", chat)):
        problem = id_problem(name, value, limit) if value else f"{name} is needed"
        if problem is not None:
            raise Refused(400, problem)
    who = Message("", user="console", chat=chat, platform=platform)
    result = await run_command(req, state, {}, who=who)
    if not result.ok:
        raise Refused(400, result.text)
    changed(req, "chats.switch", platform=platform, chat=chat, state=state)
    return redirect(req, "chats")


ROUTES: tuple[Route, ...] = (
    Route("GET", "chats", _list),
    Route("POST", "chats/switch", _switch, change=True),
)
