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

Every request passes the listener's middleware first (mounted routes too):

* **connections** (:mod:`tmy.adapters.listener`): a connection must complete a
  request header within ``header_timeout`` and its body within
  ``body_timeout`` (408); an idle keep-alive connection closes after
  ``keepalive_timeout``; at ``max_connections`` the oldest connection that has
  sent no request gives way; past ``max_requests_in_flight`` requests being
  handled a new one is answered 503 with ``Retry-After``.
* **where from** (:mod:`tmy.adapters.origin`): the ``Host`` header must name
  this listener (its listen address, loopback names when it listens on
  loopback, any IP literal when it listens on a wildcard) or an
  ``allowed_hosts`` entry (else 421), so a DNS-rebinding page cannot read
  replies; a state-changing request (any POST, a WebSocket upgrade) with a
  cross-site ``Origin`` or ``Sec-Fetch-Site: cross-site`` is 403; the JSON
  routes take only ``Content-Type: application/json`` (415), which a web page
  cannot send cross-site without a CORS preflight this listener never grants.
"""

from __future__ import annotations

import asyncio
import hmac
import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import Any

from aiohttp import web

from tmy import metrics
from tmy.adapters.base import Handler
from tmy.adapters.listener import ConnectionGuard, effective_max_connections
from tmy.adapters.origin import HostPolicy
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Message, Target, id_problem

log = get_logger("tmy.adapter.http")

MAX_BODY = 1024 * 1024
# Routes whose body is JSON: anything else is refused (415) before it is read.
JSON_ROUTES = frozenset({"/v1/messages", "/v1/chat/completions", "/admin/reload"})
BODY_METHODS = frozenset({"POST", "PUT", "PATCH", "DELETE"})
RETRY_AFTER = "1"  # seconds, in the 503 past max_requests_in_flight


def _dumps(obj: Any) -> str:
    """Readable UTF-8 JSON (中文, ·); ASCII escapes if a lone surrogate slipped in."""
    text = json.dumps(obj, ensure_ascii=False)
    try:
        text.encode("utf-8")
    except UnicodeEncodeError:
        return json.dumps(obj)
    return text


def bearer(request: web.Request) -> str:
    """The token of ``Authorization: Bearer <token>`` ("" without one)."""
    scheme, _, given = request.headers.get("Authorization", "").partition(" ")
    return given.strip() if scheme.lower() == "bearer" else ""


def api_key_problem(request: web.Request, keys: Sequence[str]) -> str | None:
    """Why ``request`` may not use a keyed route (None when it may, or no keys are set).

    Every configured key is compared in constant time, so a timing probe learns
    neither which key is close nor how many there are.
    """
    if not keys:
        return None
    given = bearer(request)
    if not given:
        return "missing API key: send 'Authorization: Bearer <key>'"
    # bytes that are not UTF-8 arrive as lone surrogates: compare them as the raw bytes
    given_bytes = given.encode(errors="surrogateescape")
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
        *,
        header_timeout: float = 10.0,
        body_timeout: float = 30.0,
        keepalive_timeout: float = 15.0,
        max_connections: int = 1000,
        max_requests_in_flight: int = 256,
        allowed_hosts: Sequence[str] = (),
    ) -> None:
        self.host, self.port = parse_listen(listen)
        self.max_chars = max_message_chars
        self.max_id_chars = max_id_chars
        self.api_keys = tuple(api_keys)
        self.header_timeout = header_timeout
        self.body_timeout = body_timeout
        self.keepalive_timeout = keepalive_timeout
        self.max_connections = max_connections
        self.max_in_flight = max_requests_in_flight
        self.in_flight = 0
        self.hosts = HostPolicy(self.host, allowed_hosts)
        self.guard: ConnectionGuard | None = None
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
        report: dict[str, Any] = {
            "state": "connected" if self._runner is not None else "stopped",
            "listen": f"{self.host}:{self.port}",
        }
        if self.guard is not None:
            report["connections"] = self.guard.counts()
            report["in_flight"] = self.in_flight
        return report

    async def send(self, target: Target, text: str) -> None:
        raise AdapterError(
            "http: the HTTP adapter answers requests; it cannot send on its own initiative"
        )

    async def start(self, handle: Handler) -> None:
        self._handle = handle
        app = web.Application(client_max_size=MAX_BODY, middlewares=[self._guarded])
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_post("/admin/reload", self._reload)
        app.router.add_routes(self._mounted)
        self.guard = ConnectionGuard(
            header_timeout=self.header_timeout,
            keepalive_timeout=self.keepalive_timeout,
            max_connections=effective_max_connections(self.max_connections),
        )
        self._runner = web.AppRunner(
            app,
            access_log=None,
            handle_signals=False,
            # the guard's deadlines come first; aiohttp's own idle timer is only a backstop
            keepalive_timeout=max(self.header_timeout, self.keepalive_timeout) + 5,
            lingering_time=min(5.0, self.body_timeout),
        )
        await self._runner.setup()
        assert self._runner.server is not None
        self.guard.attach(self._runner.server)
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
        if self.guard.max_connections < self.max_connections:
            log.info(
                "http.max_connections",
                configured=self.max_connections,
                effective=self.guard.max_connections,
                why="held to half the soft open-file limit",
            )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.guard is not None:
            self.guard.close_all()

    # -- the middleware every request passes (mounted routes too) ----------------------------

    @web.middleware
    async def _guarded(self, request: web.Request, handler: Any) -> web.StreamResponse:
        """Connection state, Host, cross-site, in-flight bound, content type, body deadline."""
        guard = self.guard
        protocol = request.protocol
        if guard is not None:
            guard.request_reading(protocol)
        try:
            return await self._checked(request, handler)
        finally:
            if guard is not None:
                guard.request_finished(protocol)

    async def _checked(self, request: web.Request, handler: Any) -> web.StreamResponse:
        problem = self.hosts.host_problem(request.headers.get("Host"))
        if problem is not None:
            return self._refuse(request, 421, problem, "host")
        # only a GET can become a WebSocket: an Upgrade header on a POST is just a header
        upgrade = (
            request.method == "GET" and request.headers.get("Upgrade", "").lower() == "websocket"
        )
        if request.method in BODY_METHODS or upgrade:
            problem = self.hosts.cross_site_problem(request.headers)
            if problem is not None:
                return self._refuse(request, 403, problem, "cross_site")
        # the whole request must arrive before it holds anything: a client that sends a
        # header and withholds its body keeps an evictable connection and no in-flight
        # slot, so it cannot crowd out requests that did arrive (API keys are checked
        # by the handlers, once the request is whole)
        refused = await self._read_body(request)
        if refused is not None:
            return refused
        if self.guard is not None:
            self.guard.request_started(request.protocol)
        if upgrade:  # a long-lived socket, bounded by max_connections and its adapter
            return await handler(request)
        if self.in_flight >= self.max_in_flight:
            return self._refuse(
                request,
                503,
                f"too many requests in flight ({self.max_in_flight}); retry shortly",
                "max_requests_in_flight",
                headers={"Retry-After": RETRY_AFTER},
            )
        self.in_flight += 1
        try:
            return await handler(request)
        finally:
            self.in_flight -= 1

    async def _read_body(self, request: web.Request) -> web.StreamResponse | None:
        """Read the whole body within ``body_timeout``; a refusal, or None when it may go on."""
        # a body (or a declared type) must be JSON; a bodiless POST (`curl -X POST
        # …/admin/reload`) has nothing to smuggle and is left to the Origin check
        json_route = request.method in BODY_METHODS and request.path in JSON_ROUTES
        typed = request.body_exists or "Content-Type" in request.headers
        if json_route and typed and request.content_type != "application/json":
            sent = request.headers.get("Content-Type") or "none"
            return self._refuse(
                request,
                415,
                f"send the body as JSON with 'Content-Type: application/json' (got {sent})",
                "content_type",
            )
        if request.method in BODY_METHODS and request.body_exists:
            try:
                async with asyncio.timeout(self.body_timeout):
                    await request.read()  # kept by aiohttp: the handler's json() reuses it
            except TimeoutError:
                response = self._refuse(
                    request,
                    408,
                    f"the request body did not arrive within {self.body_timeout:g} s",
                    "body_timeout",
                )
                response.force_close()
                return response
            except web.HTTPRequestEntityTooLarge as exc:
                return self._refuse(
                    request, 413, exc.text or "the request body is too large", "too_large"
                )
            except (ConnectionError, RuntimeError) as exc:
                # the connection went away mid-body (its client hung up, or the guard closed
                # it to make room; aiohttp says "Connection closed." as a RuntimeError):
                # nobody is left to answer, and it is not an error of ours
                transport = request.transport
                if isinstance(exc, RuntimeError) and transport and not transport.is_closing():
                    raise
                response = web.Response(status=400)
                response.force_close()
                return response
        return None

    def _refuse(
        self,
        request: web.Request,
        status: int,
        message: str,
        reason: str,
        headers: dict[str, str] | None = None,
    ) -> web.Response:
        """A refusal in the shape the route's clients expect (OpenAI's, or tmy's own).

        Refusals are attack-driven and their details (a Host, an Origin) are the
        attacker's to vary, so each is a metric and a debug line; the warning is
        the guard's one ``http.refused`` summary per interval.
        """
        if self.guard is not None:
            self.guard.count(reason)
        else:
            metrics.http_refused(reason)
        log.debug("http.refused", reason=reason, status=status, path=request.path, error=message)
        if request.path.startswith(("/v1/chat/", "/v1/models")):
            kind = "server_error" if status >= 500 else "invalid_request_error"
            body: dict[str, Any] = {
                "error": {"message": message, "type": kind, "param": None, "code": reason},
            }
        else:
            body = {"rule": None, "answer": "", "error": message, "trace_id": None}
        return web.json_response(body, status=status, headers=headers, dumps=_dumps)

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
