"""The console's Memory page: long-term memory entries and dialogue summaries per user,
a search, deletes, and what recall would return for a query.

Entries come from ``memory list --all`` and a user's summaries from ``dialog
PLATFORM:USER``; deleting is ``memory del ID`` and ``dialog clear PLATFORM:USER``
(changes: admin, CSRF token, logged). Two things no command gives are read directly:
which users have summaries (the ``mem/dialog/…`` keys) and the recall preview, which
calls :func:`tmy.memory.recall.recall` as an LLM step's ``memory:`` would for that
user in that chat — with ``touch_entries=False``, so nothing is counted, recorded or
summarised by looking.
"""

from __future__ import annotations

from datetime import datetime
from typing import Any

from aiohttp import web

from tmy.config.memory import DEFAULT_DIALOGUE, DEFAULT_MAX, RecallSpec
from tmy.console.web import ConsoleRequest, Refused, Route, changed, page, redirect, run_command
from tmy.errors import TmyError
from tmy.memory.recall import recall
from tmy.message import Message
from tmy.store.base import Store

PAGE_ROWS = 100  # entries on one page
DIALOG_PREFIX = "mem/dialog/"


def _when(ts: Any, tz: Any) -> str:
    try:
        return datetime.fromtimestamp(float(ts), tz).isoformat(timespec="minutes")
    except (TypeError, ValueError, OverflowError, OSError):
        return "?"


def owner(entry: dict[str, Any]) -> str:
    """Who an entry belongs to as ``platform:user`` (a chat or global entry: who noted it)."""
    return f"{entry.get('platform')}:{entry.get('user')}"


def entry_rows(
    entries: list[dict[str, Any]], user: str = "", q: str = "", tz: Any = None
) -> list[dict[str, Any]]:
    """The entries of ``user`` (``platform:user``; "" every one) whose text contains ``q``
    (any case), newest first, as the page lists them."""
    needle = q.casefold().strip()
    rows = []
    for e in entries:
        if user and owner(e) != user:
            continue
        if needle and needle not in str(e.get("text", "")).casefold():
            continue
        rows.append(
            {
                "id": e.get("id"),
                "text": str(e.get("text", "")),
                "scope": e.get("scope", "user"),
                "owner": owner(e),
                "chat": e.get("chat") if e.get("scope") == "chat" else "",
                "created": _when(e.get("created"), tz),
                "importance": e.get("importance", 3),
                "uses": int(e.get("uses") or 0),
                "enabled": bool(e.get("enabled", True)),
                "ts": float(e.get("created") or 0),
            }
        )
    rows.sort(key=lambda r: -r["ts"])
    return rows


def _unescape(part: str) -> str:
    return part.replace("%2F", "/").replace("%25", "%")


async def dialog_users(store: Store) -> list[str]:
    """Every ``platform:user`` with dialogue summaries (``mem/dialog/<platform>/<user>``)."""
    users = []
    for key in await store.keys(DIALOG_PREFIX):
        parts = key[len(DIALOG_PREFIX) :].split("/")
        if len(parts) == 2:
            users.append(f"{_unescape(parts[0])}:{_unescape(parts[1])}")
    return users


def summary_rows(items: list[dict[str, Any]], tz: Any = None) -> list[dict[str, Any]]:
    """A user's summaries, newest first."""
    rows = [
        {
            "created": _when(s.get("created"), tz),
            "chat": s.get("chat"),
            "text": s.get("text"),
            "extract": bool(s.get("fallback")),
            "ts": float(s.get("created") or 0),
        }
        for s in items
    ]
    rows.sort(key=lambda r: -r["ts"])
    return rows


def _number(text: str, default: float, kind: type = int) -> Any:
    try:
        return kind(text) if text.strip() else default
    except ValueError:
        return default


async def recall_data(
    services: Any, fields: dict[str, str], tz: Any = None
) -> dict[str, Any] | None:
    """What recall returns for ``fields['query']`` sent by ``platform``/``user`` in ``chat``
    (``max``, ``min_score``, ``dialogue`` as a step's ``memory:`` takes them); None without
    a query. Nothing is written."""
    query = fields.get("query", "")
    if not query.strip():
        return None
    platform = fields.get("platform") or "console"
    user = fields.get("user") or "console"
    message = Message(query, user=user, chat=fields.get("chat", ""), platform=platform)
    spec = RecallSpec(
        max=max(0, _number(fields.get("max", ""), DEFAULT_MAX)),
        min_score=_number(fields.get("min_score", ""), None, float),
        dialogue=max(0, _number(fields.get("dialogue", ""), DEFAULT_DIALOGUE)),
    )
    where = {"query": query, "platform": platform, "user": user, "chat": message.chat}
    try:
        found = await recall(services, message, spec, query, touch_entries=False, tz=tz)
    except TmyError as exc:  # no memory extension, a store that does not answer
        return {**where, "error": str(exc)}
    return {**where, "error": "", "block": found.block, **found.details()}


# -- the page ----------------------------------------------------------------------------------


_LIST_ALL = {"action": "list", "id": None, "all": True, "dialog": False, "json": False}
_RECALL_FIELDS = ("query", "platform", "user", "chat", "max", "min_score", "dialogue")


async def memory_data(req: ConsoleRequest) -> dict[str, Any]:
    """Entries (one user's or everyone's, searched, one page), that user's summaries, the
    users known to memory and, with a query, what recall would return."""
    tz = req.app.settings.tz
    who, q = req.query("who").strip(), req.query("q")
    listed = await run_command(req, "memory", dict(_LIST_ALL))
    entries = listed.data if listed.ok and isinstance(listed.data, list) else []
    rows = entry_rows(entries, who, q, tz)
    pages = max(1, -(-len(rows) // PAGE_ROWS))
    page_no = min(max(int(req.query("page", "1")) if req.query("page").isdigit() else 1, 1), pages)
    summaries: list[dict[str, Any]] = []
    if who:
        said = await run_command(req, "dialog", {"target": who, "other": None})
        if said.ok and isinstance(said.data, dict):
            summaries = summary_rows(said.data.get("summaries") or [], tz)
    users = sorted({owner(e) for e in entries} | set(await dialog_users(req.app.store)))
    fields = {k: req.query(k) for k in _RECALL_FIELDS}
    return {
        "who": who,
        "q": q,
        "users": users,
        "entries": rows[(page_no - 1) * PAGE_ROWS : page_no * PAGE_ROWS],
        "total": len(rows),
        "page": page_no,
        "pages": pages,
        "summaries": summaries,
        "recall_form": fields,
        "recall": await recall_data(req.app.engine.services, fields, tz),
        "error": "" if listed.ok else listed.text,
    }


async def _show(req: ConsoleRequest) -> web.StreamResponse:
    return await page(req, "memory.html", await memory_data(req), title="Memory")


def _back(req: ConsoleRequest, form: dict[str, str]) -> web.Response:
    """Back to the list the form was sent from (its user and search kept)."""
    return redirect(req, "memory", **{k: form[k] for k in ("who", "q") if form.get(k)})


async def _delete(req: ConsoleRequest) -> web.StreamResponse:
    form = await req.form()
    entry_id = form.get("id", "").strip()
    if not entry_id:
        raise Refused(400, "which entry? (id=…)")
    args = {**_LIST_ALL, "action": "del", "id": entry_id, "all": False}
    result = await run_command(req, "memory", args)
    if not result.ok:
        raise Refused(404, result.text)
    changed(req, "memory.del", id=entry_id)
    return _back(req, form)


async def _clear(req: ConsoleRequest) -> web.StreamResponse:
    form = await req.form()
    who = form.get("who", "").strip()
    if ":" not in who:
        raise Refused(400, "whose summaries? (who=PLATFORM:USER)")
    result = await run_command(req, "dialog", {"target": "clear", "other": who})
    if not result.ok:
        raise Refused(400, result.text)
    changed(req, "memory.clear_summaries", who=who)
    return _back(req, form)


ROUTES: tuple[Route, ...] = (
    Route("GET", "memory", _show),
    Route("POST", "memory/del", _delete, change=True),
    Route("POST", "memory/clear", _clear, change=True),
)
