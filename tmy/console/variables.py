"""The console's Variables page: persistent variables by scope, one value as a structure,
edit with the declared type checked, delete.

Why it reads the store's keys itself: no command lists *every* chat's or user's value
(``vars list`` shows one identity's), so browsing walks ``var/global/…``,
``var/chat/<platform>/<chat>/…`` and ``var/user/<platform>/<user>/…``
(:func:`tmy.engine.keys.variable_key`). Reading, setting and deleting one value go
through the ``vars`` command, as the identity that owns the key, so the console checks
a new value exactly as ``vars set`` does (the declared default's type; no ``--force``
here) and keeps a ranked variable's leaderboard in step.

A value is shown as nested lists and maps within a budget (:func:`shape`): a 4 MB value
shows its first items with "show all" (``all=1``), which gives the value as JSON text —
on the page its first :data:`SHOW_ALL_CHARS` characters, with a download of the whole
value (``download=1``; ``?format=json`` has the whole text too). The view of a large
value is built, and its page rendered, in a thread: a 4 MB value takes a core a while,
and the event loop answers messages meanwhile (:mod:`tmy.console.valueview`). A value
is edited here up to :data:`EDIT_BYTES` (the listener takes at most ``MAX_BODY`` a
request; a larger one is ``vars set``'s). Edits and deletes are changes (admin, CSRF
token, logged by who and from where).
"""

from __future__ import annotations

import asyncio
import copy
import json
from dataclasses import asdict, dataclass
from typing import Any

import orjson
from aiohttp import web

from tmy.commands.variables import split_force
from tmy.console.valueview import BIG, SHOW_ALL_CHARS, type_name, value_view
from tmy.console.web import ConsoleRequest, Refused, Route, changed, page, redirect, run_command
from tmy.engine.keys import variable_key
from tmy.logs import preview
from tmy.message import Message
from tmy.rulebook.model import Rulebook, VariableDecl
from tmy.store.base import MISSING, Store

SCOPES = ("global", "chat", "user")
PAGE_ROWS = 100  # rows of one browse page
ROOT = "var/"


# -- whose value -------------------------------------------------------------------------------


@dataclass(frozen=True)
class Holder:
    """Whose copy of a variable: its scope and the ids that pick the store key."""

    scope: str
    platform: str = ""
    chat: str = ""
    user: str = ""

    def who(self) -> Message:
        """The identity the ``vars`` command runs as to reach this copy."""
        if self.scope == "chat":
            return Message("", user="console", chat=self.chat, platform=self.platform)
        if self.scope == "user":
            return Message("", user=self.user, platform=self.platform)
        return Message("", user="console", platform="console")

    def label(self) -> str:
        if self.scope == "chat":
            return f"chat {self.platform}:{self.chat}"
        if self.scope == "user":
            return f"user {self.platform}:{self.user}"
        return "global"


def holder_of(fields: Any) -> Holder:
    """The holder named by query or form fields (``scope``, ``platform``, ``chat``, ``user``)."""
    scope = fields.get("scope") or "global"
    if scope not in SCOPES:
        raise ValueError(f"scope is one of {', '.join(SCOPES)}, not {scope!r}")
    platform, chat, user = (str(fields.get(k) or "") for k in ("platform", "chat", "user"))
    if scope == "chat" and not (platform and chat):
        raise ValueError("a chat's variable needs platform and chat")
    if scope == "user" and not (platform and user):
        raise ValueError("a user's variable needs platform and user")
    if scope == "global":
        return Holder("global")
    return Holder(scope, platform, chat if scope == "chat" else "", user if scope == "user" else "")


def _unescape(part: str) -> str:
    """A key part as the id it was (``escape_key_part`` undone)."""
    return part.replace("%2F", "/").replace("%25", "%")


def parse_key(key: str) -> tuple[Holder, str] | None:
    """``var/…`` key → (holder, variable name); None for a key of no known shape."""
    parts = key.split("/")
    if len(parts) == 3 and parts[:2] == ["var", "global"]:
        return Holder("global"), parts[2]
    if len(parts) == 5 and parts[0] == "var" and parts[1] in ("chat", "user"):
        platform, owner, name = _unescape(parts[2]), _unescape(parts[3]), parts[4]
        if parts[1] == "chat":
            return Holder("chat", platform, chat=owner), name
        return Holder("user", platform, user=owner), name
    return None


# -- browsing ----------------------------------------------------------------------------------


def declared_rows(rulebook: Rulebook) -> list[dict[str, Any]]:
    """Every declared variable: name, scope, declared type, default, where it is declared."""
    return [
        {
            "name": d.name,
            "scope": d.scope,
            "type": type_name(d.default),
            "default": preview(d.default, 80),
            "rank": d.rank,
            "where": f"{d.file}:{d.line}",
        }
        for _, d in sorted(rulebook.variables.items())
    ]


def _row(holder: Holder, name: str, value: Any, decl: VariableDecl | None) -> dict[str, Any]:
    link = {"scope": holder.scope, "name": name}
    link.update({k: v for k, v in asdict(holder).items() if v and k != "scope"})
    return {
        "name": name,
        **asdict(holder),
        "holder": holder.label(),
        "declared": decl is not None and decl.scope == holder.scope,
        "stored": value is not MISSING,
        "value": preview(decl.default if value is MISSING and decl else value, 120),
        "link": link,
    }


async def browse_data(
    store: Store, rulebook: Rulebook, scope: str, q: str = "", page_no: int = 1
) -> dict[str, Any]:
    """One page of the stored copies of ``scope``'s variables (the declared globals too).

    ``q`` keeps rows whose name, platform, chat or user contains it (any case).
    """
    if scope not in SCOPES:
        raise ValueError(f"scope is one of {', '.join(SCOPES)}, not {scope!r}")
    found: list[tuple[Holder, str, str]] = []
    for key in await store.keys(f"{ROOT}{scope}/"):
        parsed = parse_key(key)
        if parsed is not None:
            found.append((parsed[0], parsed[1], key))
    if scope == "global":  # a declared global is there even before it is first written
        stored = {name for _, name, _ in found}
        for name, decl in rulebook.variables.items():
            if decl.scope == "global" and name not in stored:
                found.append((Holder("global"), name, ""))
        found.sort(key=lambda f: f[1])
    needle = q.casefold().strip()
    if needle:
        found = [f for f in found if needle in " ".join((f[1], *asdict(f[0]).values())).casefold()]
    pages = max(1, -(-len(found) // PAGE_ROWS))
    page_no = min(max(page_no, 1), pages)
    shown = found[(page_no - 1) * PAGE_ROWS : page_no * PAGE_ROWS]
    keys = [k for _, _, k in shown if k]
    values = dict(zip(keys, await store.get_many(keys), strict=True)) if keys else {}
    rows = [
        _row(h, name, values.get(key, MISSING), rulebook.variables.get(name))
        for h, name, key in shown
    ]
    return {
        "scope": scope,
        "scopes": list(SCOPES),
        "q": q,
        "page": page_no,
        "pages": pages,
        "total": len(found),
        "rows": rows,
        "declared": declared_rows(rulebook),
    }


# -- one value as a structure ------------------------------------------------------------------


# -- the pages ---------------------------------------------------------------------------------


def _vars(action: str, name: str, value: str | None = None) -> dict[str, Any]:
    return {"action": action, "name": name, "value": value, "force": False}


def _key(holder: Holder, name: str) -> str:
    """The store key of ``name``'s copy held by ``holder`` (declared or not)."""
    return variable_key(VariableDecl(name, holder.scope, None, "", 0), holder.who())


def _link(holder: Holder, name: str) -> dict[str, str]:
    return {k: v for k, v in {**asdict(holder), "name": name}.items() if v}


async def _browse(req: ConsoleRequest) -> web.StreamResponse:
    scope = req.query("scope", "global")
    if scope not in SCOPES:
        raise Refused(400, f"scope is one of {', '.join(SCOPES)}, not {scope!r}")
    page_no = int(req.query("page", "1")) if req.query("page", "1").isdigit() else 1
    data = await browse_data(req.app.store, req.app.engine.rulebook, scope, req.query("q"), page_no)
    return await page(req, "variables.html", data, title="Variables")


async def _one(
    req: ConsoleRequest,
    holder: Holder,
    name: str,
    show_all: bool,
    error: str = "",
    tried: str | None = None,
) -> web.Response:
    """The page of one value (``error``: why an edit was refused, above the value ``tried``)."""
    decl = req.app.engine.rulebook.variables.get(name)
    declared = decl is not None and decl.scope == holder.scope
    key = _key(holder, name)
    stored = await req.app.store.get(key)
    if declared and stored is MISSING:  # what `vars get` reads: the stored copy, or the default
        value = copy.deepcopy(decl.default) if decl is not None else None
    elif stored is MISSING:
        raise Refused(404, f"no variable {name!r} ({holder.label()}) is declared or stored")
    else:  # the stored copy, read here rather than by `vars get`: that formats it as
        value = stored  # indented text in Python, 1 s of the event loop for 4 MB
    cap = None if req.wants_json() else SHOW_ALL_CHARS
    view = await asyncio.to_thread(value_view, value, decl if declared else None, show_all, cap)
    if tried is not None:
        view["edit"] = tried
    if view["json_cut"]:  # the page links the whole value as a download
        view["download"] = req.url("variables/view", **_link(holder, name), download="1")
    data = {
        "name": name,
        "holder": asdict(holder),
        "label": holder.label(),
        "declared": declared,
        "where": f"{decl.file}:{decl.line}" if declared and decl else "",
        "stored": stored is not MISSING,
        "key": key,
        "link": _link(holder, name),
        "error": error,
        **view,
    }
    status = 400 if error else 200
    big = view["bytes"] > BIG  # its page rendered in a thread
    return await page(
        req, "variable.html", data, title=f"Variable {name}", status=status, off_loop=big
    )


def _target(req: ConsoleRequest, fields: Any) -> tuple[Holder, str]:
    """The holder and the declared variable a request names; Refused otherwise."""
    try:
        holder = holder_of(fields)
    except ValueError as exc:
        raise Refused(400, str(exc)) from None
    name = str(fields.get("name") or "")
    if not name:
        raise Refused(400, "which variable? (name=…)")
    return holder, name


def _declared(req: ConsoleRequest, holder: Holder, name: str) -> None:
    """Refuse a change to a copy that is not of a declared variable of that scope."""
    decl = req.app.engine.rulebook.variables.get(name)
    if decl is None or decl.scope != holder.scope:
        known = f"it is declared with scope {decl.scope}" if decl else "it is not declared"
        raise Refused(400, f"{name!r} has no {holder.scope} copy to change: {known}")


async def _view(req: ConsoleRequest) -> web.StreamResponse:
    holder, name = _target(req, req.request.query)
    if req.query("download") == "1":
        return await _download(req, holder, name)
    return await _one(req, holder, name, req.query("all") == "1")


async def _download(req: ConsoleRequest, holder: Holder, name: str) -> web.Response:
    """The whole value as a JSON file (what the page leaves out past ``SHOW_ALL_CHARS``)."""
    decl = req.app.engine.rulebook.variables.get(name)
    value = await req.app.store.get(_key(holder, name))
    if value is MISSING:
        if decl is None or decl.scope != holder.scope:
            raise Refused(404, f"no variable {name!r} ({holder.label()}) is declared or stored")
        value = decl.default
    try:
        body = await asyncio.to_thread(orjson.dumps, value, option=orjson.OPT_INDENT_2)
    except (TypeError, orjson.JSONEncodeError):
        body = json.dumps(value, ensure_ascii=False, indent=2).encode()
    filename = "".join(c if c.isalnum() or c in "-_." else "_" for c in name) or "value"
    disposition = f'attachment; filename="{filename}.json"'
    return web.Response(body=body, content_type="application/json",
                        headers={"Content-Disposition": disposition})  # fmt: skip


async def _set(req: ConsoleRequest) -> web.StreamResponse:
    form = await req.form()
    holder, name = _target(req, form)
    _declared(req, holder, name)
    value = form.get("value", "")
    if split_force(value, False)[1]:  # `vars set`'s chat form would read it as --force
        error = "a value ending in --force is not taken here: the console keeps the declared type"
    else:
        result = await run_command(req, "vars", _vars("set", name, value), who=holder.who())
        error = "" if result.ok else result.text
    if error:
        return await _one(req, holder, name, show_all=True, error=error, tried=value)
    changed(req, "variables.set", name=name, holder=holder.label(), bytes=len(value.encode()))
    return redirect(req, "variables/view", **_link(holder, name))


async def _delete(req: ConsoleRequest) -> web.StreamResponse:
    form = await req.form()
    holder, name = _target(req, form)
    _declared(req, holder, name)
    result = await run_command(req, "vars", _vars("del", name), who=holder.who())
    if not result.ok:
        raise Refused(400, result.text)
    changed(req, "variables.del", name=name, holder=holder.label())
    return redirect(req, "variables", scope=holder.scope)


ROUTES: tuple[Route, ...] = (
    Route("GET", "variables", _browse),
    Route("GET", "variables/view", _view),
    Route("POST", "variables/set", _set, change=True),
    Route("POST", "variables/del", _delete, change=True),
)
