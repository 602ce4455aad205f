"""The console on the listener: every page behind the login, the login itself, static files.

:func:`mount` turns the page modules' :class:`~tmy.console.web.Route`\\ s into aiohttp
routes under ``console.path``, each wrapped so that

* a request without a live session is refused: an HTML ``GET`` is sent to the
  login page (303, back to the page after logging in), anything else (``?format=json``,
  the live stream, any POST) gets 401;
* a change (``Route.change``) from the viewer role is refused (403);
* a POST without the session's CSRF token (form field ``csrf`` or header
  ``X-CSRF-Token``) is refused (403) — the listener's middleware already refuses a
  POST whose ``Origin`` is another site's, and the session cookie is ``SameSite=Strict``;
* every change is logged (``console.change``) with the role and the client address;
* every answer carries headers that keep it out of frames and caches and allow
  scripts only from the console's own files.

``POST login`` (field ``password``) answers the form again with an error (401) or
sets the session cookie (``HttpOnly``, ``SameSite=Strict``, ``Secure`` when the request
came over TLS — directly or, by ``X-Forwarded-Proto``, through a proxy — and the
console's path) and redirects to the overview; past a few wrong passwords an address
must wait (:mod:`tmy.console.auth`). ``POST logout`` ends the session.
"""

from __future__ import annotations

import asyncio
import re
from collections.abc import Iterable
from typing import Any

from aiohttp import web

from tmy.adapters.http import dumps
from tmy.config import setting_error
from tmy.config.console import missing_password
from tmy.console import auth as authn
from tmy.console.web import PAGES, STATIC, ConsoleRequest, Refused, Route, Site, render
from tmy.logs import get_logger
from tmy.types import AppLike

log = get_logger("tmy.console")

COOKIE = "tmy_console"
SECURITY_HEADERS = {
    "Content-Security-Policy": "default-src 'self'; script-src 'self'; "
    "style-src 'self' 'unsafe-inline'; img-src 'self' data:; connect-src 'self'; "
    "object-src 'none'; base-uri 'none'; form-action 'self'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "X-Frame-Options": "DENY",
    "Referrer-Policy": "same-origin",
    "Cache-Control": "no-store",
}
_NEXT = re.compile(r"[A-Za-z0-9_.~/-]*(\?[A-Za-z0-9_.~%&=+:,-]*)?")
_TYPES = {".css": "text/css", ".js": "text/javascript", ".svg": "image/svg+xml",
          ".png": "image/png", ".ico": "image/x-icon"}  # fmt: skip
CHECKS_AT_ONCE = 2  # password hashes computed at once (each ~40 ms of a core)
WAITING_AT_MOST = 4  # login attempts queued for a check; past it, 429 at once
BUSY = "Too many login attempts right now: try again in a moment."
THROTTLED = "Too many wrong passwords lately: try again in {seconds} s."
LOCKED = "Too many wrong passwords: try again in {seconds} s."


def mount(
    app: AppLike, modules: Iterable[tuple[str, tuple[Route, ...]]]
) -> tuple[list[web.RouteDef], Site]:
    """The console's aiohttp routes for ``app`` and the :class:`Site` they share: the pages
    of ``modules`` ((name, ROUTES) pairs) behind the login, the login and logout, the
    static files. ConfigError when the console has no password."""
    config = app.settings.web_console
    if config.admin is None:
        raise setting_error(app.settings, "console.enabled", missing_password())
    modules = list(modules)
    names = {name for name, _ in modules}
    site = Site(app, config, authn.Auth(config), tuple(p for p in PAGES if p in names))
    guard = _Guard(site)
    page_routes = [r for _, routes in modules for r in routes]
    out = [
        web.get(config.path, guard.to_overview),
        web.get(config.url("static/{name}"), guard.static),
        web.get(config.url("login"), guard.login_form),
        web.post(config.url("login"), guard.login),
    ]
    seen = {("GET", "login"), ("POST", "login")}
    for route in [Route("POST", "logout", guard.logout), *page_routes]:
        if route.change and route.method != "POST":
            raise ValueError(f"console route {route.path!r}: a change must be a POST")
        if (route.method, route.path) in seen:
            raise ValueError(f"console route {route.method} {route.path!r} is defined twice")
        seen.add((route.method, route.path))
        if route.method == "GET":
            out.append(web.get(config.url(route.path), guard.wrap(route)))
        else:
            out.append(web.route(route.method, config.url(route.path), guard.wrap(route)))
    return out, site


def _secured(response: web.StreamResponse) -> web.StreamResponse:
    if not response.prepared:
        for name, value in SECURITY_HEADERS.items():
            response.headers.setdefault(name, value)
    return response


def _wants_json(request: web.Request) -> bool:
    return (
        request.query.get("format") == "json"
        or "X-CSRF-Token" in request.headers
        or request.content_type == "application/json"
        or "application/json" in request.headers.get("Accept", "")
    )


def _json_error(status: int, message: str) -> web.Response:
    return web.json_response({"error": message}, status=status, dumps=dumps)


class _Guard:
    """The wrapping and the login pages, for one :class:`Site`."""

    def __init__(self, site: Site) -> None:
        self.site = site
        self.auth = site.auth
        self.config = site.config
        self.checks = asyncio.Semaphore(CHECKS_AT_ONCE)
        self.waiting = 0  # login attempts waiting for ``checks``

    def session(self, request: web.Request) -> authn.Session | None:
        return self.auth.session(request.cookies.get(COOKIE))

    def wrap(self, route: Route) -> Any:
        async def handle(request: web.Request) -> web.StreamResponse:
            session = self.session(request)
            if session is None:
                return _secured(self._not_logged_in(request))
            req = ConsoleRequest(request, self.site, session)
            try:
                response = await self._run(route, req)
            except Refused as refused:
                response = self.error(req, refused.status, refused.message)
            if route.change and not req.logged and response.status < 400:
                log.info("console.change", what=route.path, role=req.role, client=req.client,
                         status=response.status)  # fmt: skip
            return _secured(response)

        return handle

    async def _run(self, route: Route, req: ConsoleRequest) -> web.StreamResponse:
        request = req.request
        if request.method != "GET" and request.method != "HEAD":
            if route.change and not req.is_admin:
                log.info("console.refused", what=route.path, role=req.role, client=req.client,
                         reason="viewer")  # fmt: skip
                raise Refused(403, "the viewer role cannot change anything: log in as admin")
            token = request.headers.get("X-CSRF-Token") or (await req.form()).get("csrf")
            if not authn.csrf_ok(req.session, token):
                log.info("console.refused", what=route.path, role=req.role, client=req.client,
                         reason="csrf")  # fmt: skip
                raise Refused(403, "missing or wrong CSRF token: reload the page and try again")
        try:
            return await route.handler(req)
        except (Refused, web.HTTPException):
            raise
        except Exception as exc:  # a page's bug: said in the log, not to the browser
            log.error("console.error", path=request.path, error=f"{type(exc).__name__}: {exc}")
            raise Refused(500, "the page failed; the daemon's log says why") from None

    def error(self, req: ConsoleRequest, status: int, message: str) -> web.Response:
        """An error as a page, or as ``{"error": …}`` for scripts."""
        if _wants_json(req.request):
            return _json_error(status, message)
        html = render(req, "error.html", {"title": f"Error {status}", "status": status,
                                          "message": message})  # fmt: skip
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")

    def _not_logged_in(self, request: web.Request) -> web.Response:
        stream = "text/event-stream" in request.headers.get("Accept", "")
        if request.method in ("GET", "HEAD") and not _wants_json(request) and not stream:
            sub = request.path_qs[len(self.config.path) + 1 :]
            query = f"?next={_quote(sub)}" if sub else ""
            return web.Response(status=303, headers={"Location": self.config.url("login") + query})
        login = self.config.url("login")
        return _json_error(401, f"not logged in: POST {login} with the console password")

    # -- the console's own pages ------------------------------------------------------------

    async def to_overview(self, request: web.Request) -> web.StreamResponse:
        return web.Response(status=308, headers={"Location": self.config.url("")})

    async def login_form(self, request: web.Request) -> web.StreamResponse:
        if self.session(request) is not None:
            return _secured(web.Response(status=303, headers={"Location": self._next(request)}))
        return _secured(self._form(request, None, 200))

    async def login(self, request: web.Request) -> web.StreamResponse:
        return _secured(await self._login(request))

    async def _login(self, request: web.Request) -> web.StreamResponse:
        client = request.remote or "unknown"
        refused = self._refusal(request, client)
        if refused is not None:
            return refused
        fields = await _login_fields(request)
        if self.waiting >= WAITING_AT_MOST:  # a flood: answered at once, holding nothing
            return self._locked(request, 1, BUSY)
        self.waiting += 1
        try:
            await self.checks.acquire()
        finally:
            self.waiting -= 1
        try:
            refused = self._refusal(request, client)  # a burst sent at once waits here
            if refused is not None:
                return refused
            role = await asyncio.to_thread(self.auth.role_of, fields.get("password", ""))
        finally:
            self.checks.release()
        if role is None:
            throttled = self.auth.throttle.failed()
            if throttled:
                log.warning("console.login_throttled", seconds=throttled)
            delay = max(self.auth.lockout.failed(client), throttled)
            log.warning("console.login_failed", client=client, wait=round(delay, 1))
            if delay > 0:
                return self._refusal(request, client) or self._locked(request, delay)
            return self._form(request, "Wrong password.", 401, fields.get("next"))
        self.auth.lockout.succeeded(client)
        old = self.session(request)
        if old is not None:  # a new id at every login: a planted cookie is worth nothing
            self.auth.end(old)
        session, cookie = self.auth.start(role)
        log.info("console.login", role=role, client=client)
        if request.query.get("format") == "json":
            response = web.json_response({"role": role, "csrf": session.csrf}, dumps=dumps)
        else:
            target = self._next(request, fields.get("next"))
            response = web.Response(status=303, headers={"Location": target})
        response.set_cookie(
            COOKIE,
            cookie,
            path=self.config.path,
            httponly=True,
            samesite="Strict",
            secure=_over_tls(request),
            max_age=int(authn.SESSION_SECONDS),
        )
        return response

    async def logout(self, req: ConsoleRequest) -> web.StreamResponse:
        self.auth.end(req.session)
        log.info("console.logout", role=req.role, client=req.client)
        response = web.Response(status=303, headers={"Location": self.config.url("login")})
        response.del_cookie(COOKIE, path=self.config.path)
        return response

    async def static(self, request: web.Request) -> web.StreamResponse:
        """The console's CSS and JavaScript (open: they are the package's, no data)."""
        name = request.match_info["name"]
        path = STATIC / name
        if "/" in name or name.startswith(".") or not path.is_file():
            return web.Response(status=404, text="not found")
        content_type = _TYPES.get(path.suffix, "application/octet-stream")
        response = web.Response(body=path.read_bytes(), content_type=content_type)
        response.headers["Cache-Control"] = "no-cache"
        return _secured(response)

    def _form(
        self, request: web.Request, error: str | None, status: int, next_: str | None = None
    ) -> web.Response:
        """The login form; ``next_``: the page asked for, kept across a wrong password.
        With ``?format=json`` a script gets ``{"error": …}`` (or ``{"login": …}``) instead."""
        if request.query.get("format") == "json":
            if error is not None:
                return _json_error(status, error)
            return web.json_response(
                {"login": "POST the field password here", "path": self.config.url("login")},
                status=status,
                dumps=dumps,
            )
        template = self.site.templates.get_template("login.html")
        html = template.render(
            title="Log in",
            error=error,
            next=next_ if isinstance(next_, str) else request.query.get("next", ""),
            console_path=self.config.path,
            static=lambda name: self.config.url(f"static/{name}"),
            url=self.config.url,
            nav=[],
        )
        return web.Response(text=html, status=status, content_type="text/html", charset="utf-8")

    def _refusal(self, request: web.Request, client: str) -> web.Response | None:
        """429 when ``client`` is locked out or every login is throttled (before any
        check: a right password then is refused the same way), else None."""
        wait = self.auth.throttle.wait()
        if wait > 0:
            return self._locked(request, wait, THROTTLED)
        wait = self.auth.lockout.wait(client)
        return self._locked(request, wait) if wait > 0 else None

    def _locked(self, request: web.Request, wait: float, why: str = LOCKED) -> web.Response:
        seconds = max(1, round(wait))
        text = why.format(seconds=seconds)
        response = self._form(request, text, 429)  # JSON for ?format=json
        response.headers["Retry-After"] = str(seconds)
        return response

    def _next(self, request: web.Request, given: str | None = None) -> str:
        """Where to go after logging in: ``next`` when it is a console page, else the overview."""
        sub = given if given is not None else request.query.get("next", "")
        if sub and _NEXT.fullmatch(sub) and not sub.startswith("/") and ".." not in sub:
            return self.config.url(sub)
        return self.config.url("")


async def _login_fields(request: web.Request) -> dict[str, str]:
    if request.content_type == "application/json":
        try:
            body = await request.json()
        except (ValueError, UnicodeDecodeError, RecursionError):
            return {}
        return (
            {k: v for k, v in body.items() if isinstance(v, str)} if isinstance(body, dict) else {}
        )
    try:
        posted = await request.post()
    except ValueError:
        return {}
    return {k: v for k, v in posted.items() if isinstance(v, str)}


def _over_tls(request: web.Request) -> bool:
    """Whether the browser reached us over TLS: directly, or through a proxy that says so
    (a client claiming it falsely only makes its own cookie stricter)."""
    proto = request.headers.get("X-Forwarded-Proto", "").split(",")[0].strip().lower()
    return request.secure or proto == "https"


def _quote(sub: str) -> str:
    from urllib.parse import quote

    return quote(sub, safe="")
