"""The daemon's one web server: ``POST /v1/messages``, ``GET /healthz``, ``GET /metrics``,
``POST /admin/reload`` and mounted routes.

Request body ``{"text", "user", "chat", "platform", "user_name"}`` (only
``text`` is required); response ``{"rule", "answer", "error", "trace_id"}``.
A malformed request is a 400 with an ``error`` field, a message over the size
limit a 413; a failing rule is still a 200 whose ``error`` says why.

Other adapters that need HTTP (the OneBot reverse WebSocket, the OpenAI
facade, a Telegram webhook) ``mount`` their routes here, so the daemon listens
on one ``host:port``. With API keys configured (``adapters.http.api_keys`` or
``TMY_HTTP_API_KEYS``), ``/v1/messages`` needs ``Authorization: Bearer <key>``;
:func:`api_key_problem` is the one check every keyed route uses (``/admin/reload``
too); ``/healthz`` and ``/metrics`` stay open (states and counts, no content).
"""

from __future__ import annotations

import hmac
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from aiohttp import web

from tmy.adapters.base import Handler, Target
from tmy.engine.core import id_problem
from tmy.errors import AdapterError
from tmy.message import Message

MAX_BODY = 1024 * 1024


def _dumps(obj: Any) -> str:
    """Readable UTF-8 JSON (中文, ·); ASCII escapes if a lone surrogate slipped in."""
    text = json.dumps(obj, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj)
    return text


def api_key_problem(request: web.Request, keys: Sequence[str]) -> str | None:
    """Why ``request`` may not use a keyed route (None when it may, or no keys are set).

    Every configured key is compared in constant time, so a timing probe learns
    neither which key is close nor how many there are.
    """
    if not keys:
        return None
    header = request.headers.get("Authorization", "")
    scheme, _, given = header.partition(" ")
    if scheme.lower() != "bearer" or not given.strip():
        return "missing API key: send 'Authorization: Bearer <key>'"
    # bytes that are not UTF-8 arrive as lone surrogates: compare them as the raw bytes
    given_bytes = given.strip().encode(errors="surrogateescape")
    ok = False
    for key in keys:
        ok |= hmac.compare_digest(given_bytes, key.encode())
    return None if ok else "invalid API key"


def parse_listen(listen: str) -> tuple[str, int]:
    """``HOST:PORT`` (or ``:PORT``) → (host, port)."""
    host, sep, port = listen.rpartition(":")
    if not sep or not port.isdigit():
        raise AdapterError(f"HTTP listen address {listen!r} must be HOST:PORT, e.g. 127.0.0.1:8080")
    return (host.strip("[]") or "127.0.0.1"), int(port)


class HttpAdapter:
    name = "http"

    def __init__(
        self,
        listen: str,
        max_message_chars: int = 20_000,
        shutdown_grace: float = 30.0,
        max_id_chars: int = 256,
        api_keys: Sequence[str] = (),
    ) -> None:
        self.host, self.port = parse_listen(listen)
        self.max_chars = max_message_chars
        self.max_id_chars = max_id_chars
        self.api_keys = tuple(api_keys)
        self.shutdown_grace = shutdown_grace  # how long stop() lets requests in flight finish
        self._runner: web.AppRunner | None = None
        self._handle: Handler | None = None
        self._mounted: list[web.RouteDef] = []
        # the daemon's whole health report; without one, /healthz says only "ok"
        self.health_source: Callable[[], Awaitable[dict[str, Any]]] | None = None
        self.reload_source: Callable[[str], Awaitable[Any]] | None = None  # -> ReloadResult

    def mount(self, routes: Iterable[web.RouteDef]) -> None:
        """Serve another adapter's routes on this listener (call before ``start``).

        A route whose method and path are already served (``/healthz``, another
        adapter's) is refused: aiohttp would silently answer with the first one,
        and e.g. a OneBot implementation would retry an unreachable endpoint forever.
        """
        if self._runner is not None:
            raise AdapterError("http: routes must be mounted before the listener starts")
        taken = {
            ("POST", "/v1/messages"),
            ("GET", "/healthz"),
            ("HEAD", "/healthz"),
            ("GET", "/metrics"),
            ("HEAD", "/metrics"),
            ("POST", "/admin/reload"),
        }
        taken |= {(r.method, r.path) for r in self._mounted if isinstance(r, web.RouteDef)}
        routes = list(routes)
        for route in routes:
            if isinstance(route, web.RouteDef) and (route.method, route.path) in taken:
                raise AdapterError(
                    f"http: {route.method} {route.path} is already served on this listener; "
                    "choose another path for it"
                )
            if isinstance(route, web.RouteDef):
                taken.add((route.method, route.path))
        self._mounted.extend(routes)

    def health(self) -> dict[str, Any]:
        return {
            "state": "connected" if self._runner is not None else "stopped",
            "listen": f"{self.host}:{self.port}",
        }

    async def send(self, target: Target, text: str) -> None:
        raise AdapterError(
            "http: the HTTP adapter answers requests; it cannot send on its own initiative"
        )

    async def start(self, handle: Handler) -> None:
        self._handle = handle
        app = web.Application(client_max_size=MAX_BODY)
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/admin/reload", self._reload)
        app.router.add_routes(self._mounted)
        self._runner = web.AppRunner(app, access_log=None, handle_signals=False)
        await self._runner.setup()
        site = web.TCPSite(
            self._runner,
            self.host,
            self.port,
            reuse_address=True,
            shutdown_timeout=self.shutdown_grace,
        )
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise AdapterError(f"cannot listen on {self.host}:{self.port}: {exc}") from None
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None

    async def _health(self, request: web.Request) -> web.Response:
        if self.health_source is None:
            return web.json_response({"status": "ok"})
        report = await self.health_source()
        # "degraded" (an adapter down) still serves the others: 200; a dead store is 503
        status = 503 if report.get("status") == "error" else 200
        return web.json_response(report, status=status, dumps=_dumps)

    async def _metrics(self, request: web.Request) -> web.Response:
        """Prometheus text format; open like ``/healthz`` (counts, no message content)."""
        from tmy import metrics

        body, content_type = metrics.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _reload(self, request: web.Request) -> web.Response:
        """``run.py reload``: reload rules and plugins now; 200 when live, 422 when refused."""
        problem = api_key_problem(request, self.api_keys)
        if problem is not None:
            return _error(401, problem)
        if self.reload_source is None:
            return _error(503, "this listener cannot reload (no daemon behind it)")
        result = await self.reload_source(f"http {request.remote}")
        return web.json_response(result.as_dict(), status=200 if result.ok else 422, dumps=_dumps)

    async def _messages(self, request: web.Request) -> web.Response:
        problem = api_key_problem(request, self.api_keys)
        if problem is not None:
            return _error(401, problem)
        try:
            body: Any = await request.json()
        except RecursionError:
            return _error(400, "the JSON body is nested too deeply")
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            return _error(400, "the body must be a JSON object with a 'text' field")
        if not isinstance(body, dict):
            return _error(400, "the body must be a JSON object with a 'text' field")
        text = body.get("text")
        if not isinstance(text, str):
            return _error(400, "'text' is required and must be a string")
        if len(text) > self.max_chars:
            return _error(413, f"message too long: {len(text)} characters (limit {self.max_chars})")
        fields = {}
        for key in ("user", "chat", "platform", "user_name"):
            value = body.get(key)
            if value is None:
                continue
            if isinstance(value, int) and not isinstance(value, bool):
                value = str(value)  # numeric ids, as several platforms send them
            problem = id_problem(key, value, self.max_id_chars)
            if problem is not None:
                return _error(400, problem)
            fields[key] = value
        fields.setdefault("platform", "http")
        assert self._handle is not None
        reply = await self._handle(Message(text, **fields))
        return web.json_response(reply.as_dict(), dumps=_dumps)


def _error(status: int, message: str) -> web.Response:
    return web.json_response(
        {"rule": None, "answer": "", "error": message, "trace_id": None},
        status=status,
        dumps=_dumps,
    )
