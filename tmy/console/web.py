"""The page framework every console page module uses.

A page module exposes ``ROUTES: tuple[Route, ...]``; each :class:`Route` names a
path under ``console.path`` and a handler taking a :class:`ConsoleRequest` (the
logged-in operator's request). :mod:`tmy.console.guard` puts the routes on the
listener behind the login, so a handler never sees a request that is not logged
in, a change (``Route.change``) from the viewer role, or a POST without its CSRF
token. A handler answers with :func:`page` (HTML from a template, or the same
data as JSON for ``?format=json``), :func:`redirect` (after a POST), or raises
:class:`Refused` (an error page / JSON error with its status). It runs
operator commands through :func:`run_command`, as the CLI, chat and the HTTP
API do, and says what it changed with :func:`changed`.

Templates (``tmy/console/templates``) extend ``base.html`` and fill ``{% block
content %}``; Jinja escapes every value (autoescape), so a user name is text,
never markup. Besides the page's own data a template gets ``req``, ``csrf`` (put
it in every POST form: ``<input type="hidden" name="csrf" value="{{ csrf }}">``),
``role``, ``is_admin``, ``nav``, ``title``, ``url`` (``url("rules")``) and
``static`` (``static("console.css")``). The pages' Content-Security-Policy allows
scripts only from the console's own static files: no inline ``<script>`` or
``onclick=``; put behaviour in ``static/*.js``.
"""

from __future__ import annotations

import asyncio
import email.policy
import json
from collections.abc import Awaitable, Callable, Mapping
from dataclasses import dataclass, field
from email.parser import BytesParser
from pathlib import Path
from typing import TYPE_CHECKING, Any
from urllib.parse import urlencode

import jinja2
from aiohttp import web

from tmy.adapters.http import dumps
from tmy.command import Invocation, Result, args_by_name, jsonable
from tmy.config.console import WebConsoleConfig
from tmy.errors import TmyError
from tmy.logs import get_logger
from tmy.message import Message

if TYPE_CHECKING:
    from tmy.console.auth import Auth, Session
    from tmy.types import AppLike

log = get_logger("tmy.console")

HERE = Path(__file__).parent
TEMPLATES = HERE / "templates"
STATIC = HERE / "static"
# the nav's pages, in order (those whose module is installed are shown)
PAGES = ("overview", "rules", "playground", "live", "variables", "schedules", "memory", "chats")

Handler = Callable[["ConsoleRequest"], Awaitable[web.StreamResponse]]


@dataclass(frozen=True)
class Route:
    """One console endpoint, mounted at ``console.path + "/" + path``.

    ``path``: ``""`` (the overview), ``"rules"``, ``"rules/reload"``, … (no leading
    ``/``). ``change``: a state-changing request — a POST that needs the admin role
    (the viewer gets 403) and is logged as ``console.change`` with the role and the
    client address. Every POST, change or not, needs the session's CSRF token.
    """

    method: str  # "GET" | "POST"
    path: str
    handler: Handler
    change: bool = False


class Refused(Exception):
    """Raised by a handler: answer ``status`` with ``message`` (an error page, or JSON)."""

    def __init__(self, status: int, message: str) -> None:
        super().__init__(message)
        self.status = status
        self.message = message


@dataclass
class Site:
    """What the console's pages share in one running daemon: the app, the config, the
    login, the templates, the nav, and ``state`` (a page module's own objects, by name)."""

    app: AppLike
    config: WebConsoleConfig
    auth: Auth
    pages: tuple[str, ...] = ()  # the nav's pages that are installed
    state: dict[str, Any] = field(default_factory=dict)
    templates: jinja2.Environment = field(default_factory=lambda: environment())

    def nav(self, current: str) -> list[dict[str, Any]]:
        return [
            {
                "name": name,
                "label": name.capitalize(),
                "url": self.config.url("" if name == "overview" else name),
                "current": name == current,
            }
            for name in self.pages
        ]


def environment() -> jinja2.Environment:
    """The console's Jinja environment: its templates, every value escaped."""
    return jinja2.Environment(
        loader=jinja2.FileSystemLoader(TEMPLATES),
        autoescape=True,
        trim_blocks=True,
        lstrip_blocks=True,
        auto_reload=False,
    )


class ConsoleRequest:
    """A logged-in request, as a page handler gets it."""

    def __init__(self, request: web.Request, site: Site, session: Session) -> None:
        self.request = request
        self.site = site
        self.session = session
        self.logged = False  # changed() was called (the guard then logs no second line)
        self._form: dict[str, str] | None = None

    @property
    def app(self) -> AppLike:
        return self.site.app

    @property
    def role(self) -> str:
        """``admin`` or ``viewer``."""
        return self.session.role

    @property
    def is_admin(self) -> bool:
        return self.session.role == "admin"

    @property
    def client(self) -> str:
        """The client's address (the proxy's when behind one)."""
        return self.request.remote or "unknown"

    @property
    def csrf(self) -> str:
        """The session's CSRF token (every POST form carries it as ``csrf``)."""
        return self.session.csrf

    async def form(self) -> dict[str, str]:
        """The POST's fields: a form (urlencoded or multipart; uploads left out) or a JSON
        object (true → ``"on"`` as a checked box sends, false/null → ``""``, numbers as
        text, lists and objects as JSON text). Read once, kept."""
        if self._form is None:
            self._form = await _fields(self.request)
        return self._form

    def query(self, name: str, default: str = "") -> str:
        return self.request.query.get(name, default)

    def wants_json(self) -> bool:
        """``?format=json``: the page's data as JSON, for scripts."""
        return self.request.query.get("format") == "json"

    def url(self, sub: str = "", **query: Any) -> str:
        """The console page ``sub`` (``url("rules/rule", id="x")``: ``…/rules/rule?id=x``)."""
        path = self.site.config.url(sub)
        given = {k: v for k, v in query.items() if v is not None}
        return f"{path}?{urlencode(given)}" if given else path


async def _fields(request: web.Request) -> dict[str, str]:
    if request.method not in ("POST", "PUT", "PATCH", "DELETE") or not request.body_exists:
        return {}
    if request.content_type == "application/json":
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError, RecursionError):
            raise Refused(400, "the body must be a JSON object") from None
        if not isinstance(body, dict):
            raise Refused(400, "the body must be a JSON object")
        return {str(k): _text(v) for k, v in body.items()}
    if request.content_type == "multipart/form-data":
        return _multipart(request.headers.get("Content-Type", ""), await request.read())
    try:
        posted = await request.post()
    except ValueError as exc:
        raise Refused(400, f"unreadable form: {exc}") from None
    out: dict[str, str] = {}
    for key, value in posted.items():
        if isinstance(value, str):
            out.setdefault(key, value)
    return out


def _multipart(content_type: str, body: bytes) -> dict[str, str]:
    """A multipart form's text fields (uploads left out). Parsed from the bytes the
    listener already read (aiohttp's own reader wants the unread stream)."""
    message = BytesParser(policy=email.policy.HTTP).parsebytes(
        f"Content-Type: {content_type}\r\n\r\n".encode("latin-1") + body
    )
    if not message.is_multipart():
        raise Refused(400, "unreadable form: not a multipart body")
    out: dict[str, str] = {}
    for part in message.iter_parts():
        name = part.get_param("name", header="content-disposition")
        if not isinstance(name, str) or part.get_filename() is not None:
            continue
        payload = part.get_payload(decode=True) or b""
        charset = part.get_content_charset() or "utf-8"
        out.setdefault(name, payload.decode(charset, errors="replace"))
    return out


def _text(value: Any) -> str:
    if value is True:
        return "on"
    if value is None or value is False:
        return ""
    if isinstance(value, str):
        return value
    if isinstance(value, (int, float)):
        return str(value)
    return json.dumps(value, ensure_ascii=False)


async def page(
    req: ConsoleRequest,
    template: str,
    data: Mapping[str, Any],
    *,
    title: str,
    status: int = 200,
    current: str | None = None,
    off_loop: bool = False,
) -> web.Response:
    """``template`` rendered with ``data`` (plus the framework's variables, which win over
    the data's), or ``data`` itself as JSON when ``?format=json`` — the same data for scripts.

    ``current``: the nav entry to mark (default: the first part of the path).
    ``off_loop``: render (or encode) in a thread — a large page takes a core a while, and
    the event loop keeps answering messages meanwhile.
    """
    if req.wants_json():
        if off_loop:
            text = await asyncio.to_thread(lambda: dumps(jsonable(dict(data))))
            return web.Response(text=text, status=status, content_type="application/json")
        return web.json_response(jsonable(dict(data)), status=status, dumps=dumps)
    if current is None:
        sub = req.request.path[len(req.site.config.path) + 1 :]
        current = sub.split("/", 1)[0] or "overview"
    context = {**data, "title": title, "nav": req.site.nav(current)}
    if off_loop:
        html = await asyncio.to_thread(render, req, template, context)
    else:
        html = render(req, template, context)
    return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")


def render(req: ConsoleRequest, template: str, data: Mapping[str, Any]) -> str:
    """``template`` as HTML, with the framework's variables."""
    site = req.site
    context = {
        **data,
        "req": req,
        "csrf": req.csrf,
        "role": req.role,
        "is_admin": req.is_admin,
        "url": req.url,
        "static": lambda name: site.config.url(f"static/{name}"),
        "console_path": site.config.path,
    }
    context.setdefault("nav", site.nav(""))
    return site.templates.get_template(template).render(context)


async def run_command(
    req: ConsoleRequest, name: str, args: Mapping[str, Any], *, who: Message | None = None
) -> Result:
    """Run the registered command ``name`` on the ``console`` front with ``args`` by name
    (as the HTTP API's ``{"args": …}``: checked, defaults filled). ``who``: whom it acts
    for (default: user ``console`` on platform ``console``, not a chat admin — ``explain``
    simulates its sender from it). A misuse (CommandError, any TmyError) is
    ``Result(text, ok=False)`` with the error's words."""
    app = req.app
    command = app.commands.get(name)
    if command is None or not command.offered_on("console"):
        return Result(f"unknown command {name!r}", ok=False)
    sender = who or Message("", user="console", platform="console")
    try:
        parsed = args_by_name(command, dict(args), "console")
        log.info("console.command", command=name, role=req.role, client=req.client)
        inv = Invocation(
            parsed, sender, "console", app, app.settings, compact=False, commands=app.commands
        )
        return await command.run(inv)
    except TmyError as exc:
        return Result(str(exc), ok=False)


def changed(req: ConsoleRequest, what: str, **fields: Any) -> None:
    """Log a change made through the console (``console.change``: what, role, client, …)."""
    req.logged = True
    log.info("console.change", what=what, role=req.role, client=req.client, **fields)


def redirect(req: ConsoleRequest, sub: str, **query: Any) -> web.Response:
    """303 to the console page ``sub`` (POST-redirect-GET)."""
    return web.Response(status=303, headers={"Location": req.url(sub, **query)})
