"""The HTTP admin API: ``POST /admin/commands/{name}`` and ``POST /admin/reload``.

Both sit on the daemon's listener behind its API keys (``adapters.http.api_keys``,
the same :func:`~tmy.adapters.http.api_key_problem` check as ``/v1/messages``)
and its middleware (Host, cross-site and JSON-only checks). The API-key holder
is the operator, as the CLI user is.

``POST /admin/commands/{name}`` takes ``{"args": {NAME: VALUE, …}}`` (the
command's arguments by name, as the CLI parses them: the full rendering) or
``{"argv": "rest of the line"}`` (as typed after ``.tmy NAME`` in chat: the chat
rendering), plus optional ``user``, ``chat``, ``platform``, ``user_name`` (whom
the command acts for: default user ``http`` on platform ``http``). It answers
``{"command", "ok", "text", "data"}``: 200 when the command ran (``ok`` says
whether it succeeded), 400 for misuse (``text`` is ``error: …`` as chat says it),
404 for an unknown command (``data.commands`` lists the known ones), 401 without
a valid key. ``POST /admin/reload`` (``run.py reload`` of old) answers the
reload's own JSON: 200 when live, 422 when refused.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from typing import TYPE_CHECKING, Any

from tmy.adapters.http import api_key_problem, dumps, json_error
from tmy.command import CommandError, Invocation, Result, args_by_name, parse_words
from tmy.errors import TmyError
from tmy.logs import get_logger
from tmy.message import Message, id_problem

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms of every CLI start
    from aiohttp import web

if TYPE_CHECKING:
    from tmy.types import AppLike

log = get_logger("tmy.admin")

_WHO = ("user", "chat", "platform", "user_name")


def routes(app: AppLike) -> list[web.RouteDef]:
    """The admin routes for ``app``'s listener (the app mounts them when it serves)."""
    from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

    api = _AdminApi(app)
    return [
        web.post("/admin/commands/{name}", api.command),
        web.post("/admin/reload", api.reload),
    ]


def _answer(name: str, result: Result, status: int = 200) -> web.Response:
    from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

    body = {"command": name, **result.as_json()}
    return web.json_response(body, status=status, dumps=dumps)


def _who(body: Mapping[str, Any], max_id_chars: int) -> Message:
    fields: dict[str, Any] = {"user": "http", "platform": "http"}
    for key in _WHO:
        value = body.get(key)
        if value is None:
            continue
        if isinstance(value, int) and not isinstance(value, bool):
            value = str(value)
        problem = id_problem(key, value, max_id_chars)
        if problem is not None:
            raise CommandError(problem)
        fields[key] = value
    return Message("", is_admin=True, **fields)


class _AdminApi:
    """The handlers, bound to one app."""

    def __init__(self, app: AppLike) -> None:
        self.app = app

    def _refused(self, request: web.Request) -> web.Response | None:
        problem = api_key_problem(request, self.app.settings.http_api_keys)
        return None if problem is None else json_error(401, problem)

    async def command(self, request: web.Request) -> web.Response:
        refused = self._refused(request)
        if refused is not None:
            return refused
        name = request.match_info["name"]
        table = self.app.commands
        command = table.get(name)
        if command is None or "http" not in command.fronts:
            known = sorted(n for n, c in table.items() if "http" in c.fronts)
            text = f"unknown command {name!r}; known: {', '.join(known)}"
            return _answer(name, Result(text, {"commands": known}, ok=False), 404)
        try:
            body = await _body(request)
            who = _who(body, self.app.settings.max_id_chars)
            compact = "argv" in body
            if compact:
                if not isinstance(body["argv"], str):
                    raise CommandError("'argv' must be the rest of the line, as text")
                args = parse_words(command, body["argv"], front="chat")
            else:
                args = args_by_name(command, body.get("args", {}), "http")
            log.info("admin.command", command=name, user=who.user, platform=who.platform)
            inv = Invocation(args, who, "http", self.app, self.app.settings, compact=compact,
                             commands=table)  # fmt: skip
            result = await command.run(inv)
        except TmyError as exc:
            return _answer(name, Result(f"error: {exc}", ok=False), 400)
        return _answer(name, result)

    async def reload(self, request: web.Request) -> web.Response:
        """``run.py reload`` of old: reload rules and plugins now; 200 when live, 422 refused."""
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        refused = self._refused(request)
        if refused is not None:
            return refused
        result = await self.app.reload(f"http {request.remote}")
        status = 200 if result.ok else 422
        return web.json_response(result.as_dict(), status=status, dumps=dumps)


async def _body(request: web.Request) -> dict[str, Any]:
    """The JSON object sent (``{}`` for a bodiless POST); CommandError for anything else."""
    if not request.body_exists:
        return {}
    try:
        body = await request.json()
    except RecursionError:
        raise CommandError("the JSON body is nested too deeply") from None
    except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
        raise CommandError("the body must be a JSON object") from None
    if not isinstance(body, dict):
        raise CommandError("the body must be a JSON object")
    return body
