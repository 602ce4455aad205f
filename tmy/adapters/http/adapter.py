"""The daemon's one web server: ``POST /v1/messages``, ``GET /healthz``, ``GET /metrics``
and mounted routes (the admin API, ``POST /admin/reload`` and ``/admin/commands/…``, is
:mod:`tmy.commands.http`'s, mounted by the app).

Request body ``{"text", "user", "chat", "platform", "user_name", "images"}`` (only
``text`` is required; ``images``: http(s) or ``data:`` URLs, the message's image
attachments — ``IMAGES``, an LLM step's ``vision: true``); response ``{"rule",
"answer", "error", "trace_id"}``. A malformed request is a 400 with an ``error``
field, a message over the size limit a 413; a failing rule is still a 200 whose
``error`` says why. The body's ``user`` is named, not proved: ``admins:`` judge the
request's API key instead (``http:key:…`` and 12 hex digits, on the message's
platform — :func:`~tmy.adapters.http.api.admin_as`), and without keys no one.

Other adapters that need HTTP (the OneBot reverse WebSocket, the OpenAI
facade, a Telegram webhook) ``mount`` their routes here, so the daemon listens
on one ``host:port``. With API keys configured (``adapters.http.api_keys`` or
``TMY_HTTP_API_KEYS``), ``/v1/messages`` needs ``Authorization: Bearer <key>``;
:func:`api_key_problem` is the one check every keyed route uses (the admin
routes too); ``/healthz`` and ``/metrics`` stay open (states and counts, no content).

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

The middleware is :mod:`tmy.adapters.http.gate`; what keyed JSON routes
share (the API-key check, JSON out, the JSON-route rule) is
:mod:`tmy.adapters.http.api`.
"""

from __future__ import annotations

import json
from collections.abc import Awaitable, Callable, Iterable, Sequence
from typing import TYPE_CHECKING, Any

from tmy import metrics
from tmy.adapters.base import Handler
from tmy.adapters.http.api import (
    admin_as,
    api_key_problem,
    dumps,
    json_error,
    json_of,
    parse_listen,
    picture,
)
from tmy.adapters.http.gate import RequestGate
from tmy.adapters.listener import ConnectionGuard, effective_max_connections, listen_backlog
from tmy.adapters.origin import HostPolicy
from tmy.errors import AdapterError
from tmy.logs import get_logger
from tmy.message import Message, Target, id_problem

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms of every CLI start
    from aiohttp import web

log = get_logger("tmy.adapter.http")

MAX_BODY = 1024 * 1024


class HttpAdapter:
    """The daemon's one listener: its own routes, the others' mounted ones, one middleware."""

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
        self.gate = RequestGate(
            HostPolicy(self.host, allowed_hosts),
            body_timeout=body_timeout,
            max_in_flight=max_requests_in_flight,
        )
        self.shutdown_grace = shutdown_grace  # how long stop() lets requests in flight finish
        self._runner: web.AppRunner | None = None
        self._handle: Handler | None = None
        self._mounted: list[web.RouteDef] = []
        # the daemon's whole health report (given to start); without one, /healthz says "ok"
        self._health_source: Callable[[], Awaitable[dict[str, Any]]] | None = None

    @property
    def guard(self) -> ConnectionGuard | None:
        """The connections' bookkeeping (None until the listener starts)."""
        return self.gate.guard

    @property
    def hosts(self) -> HostPolicy:
        return self.gate.hosts

    @property
    def in_flight(self) -> int:
        """Requests being handled now (WebSocket sessions aside)."""
        return self.gate.in_flight

    def routes(self) -> list[web.RouteDef]:
        """None to mount: the listener serves its own routes and mounts the others'."""
        return []

    def mount(self, routes: Iterable[web.RouteDef]) -> None:
        """Serve another adapter's routes on this listener (call before ``start``).

        A route whose method and path are already served (``/healthz``, another
        adapter's) is refused: aiohttp would silently answer with the first one,
        and e.g. a OneBot implementation would retry an unreachable endpoint forever.
        """
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        if self._runner is not None:
            raise AdapterError("http: routes must be mounted before the listener starts")
        taken = {
            ("POST", "/v1/messages"),
            ("GET", "/healthz"),
            ("HEAD", "/healthz"),
            ("GET", "/metrics"),
            ("HEAD", "/metrics"),
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

    async def start(
        self,
        handle: Handler,
        *,
        health: Callable[[], Awaitable[dict[str, Any]]] | None = None,
    ) -> None:
        """Listen, answering with ``handle``; ``health`` makes the ``/healthz`` report
        (the serving app's: store, adapters, cron outbox), else it says only "ok"."""
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        self._handle = handle
        self._health_source = health
        app = web.Application(
            client_max_size=MAX_BODY, middlewares=[self.gate.aiohttp_middleware()]
        )
        app.router.add_post("/v1/messages", self._messages)
        app.router.add_get("/healthz", self._health)
        app.router.add_get("/metrics", self._metrics)
        app.router.add_routes(self._mounted)
        guard = self.gate.guard = ConnectionGuard(
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
        guard.attach(self._runner.server)
        site = web.TCPSite(
            self._runner,
            self.host,
            self.port,
            reuse_address=True,
            shutdown_timeout=self.shutdown_grace,
            backlog=listen_backlog(guard.max_connections),  # a burst of connects is not dropped
        )
        try:
            await site.start()
        except OSError as exc:
            await self._runner.cleanup()
            raise AdapterError(f"cannot listen on {self.host}:{self.port}: {exc}") from None
        sockets = getattr(site._server, "sockets", None) or []
        if sockets:
            self.port = sockets[0].getsockname()[1]
        if guard.max_connections < self.max_connections:
            log.info(
                "http.max_connections",
                configured=self.max_connections,
                effective=guard.max_connections,
                why="held to half the soft open-file limit",
            )

    async def stop(self) -> None:
        if self._runner is not None:
            await self._runner.cleanup()
            self._runner = None
        if self.guard is not None:
            self.guard.close_all()

    async def _health(self, request: web.Request) -> web.Response:
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        if self._health_source is None:
            return web.json_response({"status": "ok"})
        report = await self._health_source()
        # "degraded" (an adapter down) still serves the others: 200; a dead store is 503
        status = 503 if report.get("status") == "error" else 200
        return web.json_response(report, status=status, dumps=dumps)

    async def _metrics(self, request: web.Request) -> web.Response:
        """Prometheus text format; open like ``/healthz`` (counts, no message content)."""
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        body, content_type = metrics.render()
        return web.Response(body=body, headers={"Content-Type": content_type})

    async def _messages(self, request: web.Request) -> web.Response:
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        problem = api_key_problem(request, self.api_keys)
        if problem is not None:
            return json_error(401, problem)
        try:
            body: Any = await json_of(request)
        except RecursionError:
            return json_error(400, "the JSON body is nested too deeply")
        except (json.JSONDecodeError, UnicodeDecodeError, ValueError):
            return json_error(400, "the body must be a JSON object with a 'text' field")
        if not isinstance(body, dict):
            return json_error(400, "the body must be a JSON object with a 'text' field")
        text = body.get("text")
        if not isinstance(text, str):
            return json_error(400, "'text' is required and must be a string")
        if len(text) > self.max_chars:
            return json_error(
                413, f"message too long: {len(text)} characters (limit {self.max_chars})"
            )
        fields = {}
        for key in ("user", "chat", "platform", "user_name"):
            value = body.get(key)
            if value is None:
                continue
            if isinstance(value, int) and not isinstance(value, bool):
                value = str(value)  # numeric ids, as several platforms send them
            problem = id_problem(key, value, self.max_id_chars)
            if problem is not None:
                return json_error(400, problem)
            fields[key] = value
        fields.setdefault("platform", "http")
        images = body.get("images") or []
        pictures = [picture(url) for url in (images if isinstance(images, list) else [images])]
        if not all(pictures):
            return json_error(400, "'images' must be a list of http(s) or data: URLs")
        assert self._handle is not None
        attachments = tuple(p for p in pictures if p is not None)
        # the body names its user: admins: judge the key (key:…, on the message's platform)
        judged = admin_as(request, self.api_keys)
        message = Message.new(text, attachments=attachments, admin_as=judged, **fields)
        reply = await self._handle(message)
        return web.json_response(reply.as_dict(), dumps=dumps)
