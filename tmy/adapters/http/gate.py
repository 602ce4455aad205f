"""The middleware every request on the listener passes (mounted routes too).

In order: the connection's state (:mod:`tmy.adapters.listener`), the
``Host`` and cross-site checks (:mod:`tmy.adapters.origin`), the whole body
read within ``body_timeout`` (a JSON route's body typed JSON, 415 otherwise),
then the in-flight bound (503 with ``Retry-After``). A request holds an
in-flight slot and a busy connection only once it has wholly arrived.

A long-lived answer holds no in-flight slot: a WebSocket upgrade never takes one,
and a handler that streams for long (the console's Server-Sent Events) gives its
slot back with :func:`long_lived` once it has checked its own cap — else a few
hundred idle streams would fill the bound and refuse every message.
"""

from __future__ import annotations

import asyncio
import functools
from typing import TYPE_CHECKING, Any

from tmy import metrics
from tmy.adapters.http.api import BODY_METHODS, dumps, is_json_route
from tmy.adapters.listener import ConnectionGuard
from tmy.adapters.origin import HostPolicy
from tmy.logs import get_logger

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms of every CLI start
    from aiohttp import web

log = get_logger("tmy.adapter.http")

RETRY_AFTER = "1"  # seconds, in the 503 past max_requests_in_flight


@functools.cache
def _release_key() -> Any:
    """The request key of the callable that gives the in-flight slot back (a typed
    ``RequestKey`` where aiohttp has one, 3.13+: it warns about a plain string)."""
    from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

    key = getattr(web, "RequestKey", None)
    return "tmy.gate.release" if key is None else key("tmy.gate.release", object)


def long_lived(request: web.Request) -> None:
    """Give ``request``'s in-flight slot back: its answer is a long-lived stream, bounded
    by its own cap and by ``max_connections`` (as a WebSocket is), not by the in-flight
    bound. Once only; nothing when the request holds no slot."""
    release = request.get(_release_key())
    if release is not None:
        release()


class RequestGate:
    """Host, cross-site, content type, body deadline and in-flight bound, for one listener."""

    def __init__(self, hosts: HostPolicy, *, body_timeout: float, max_in_flight: int) -> None:
        self.hosts = hosts
        self.body_timeout = body_timeout
        self.max_in_flight = max_in_flight
        self.in_flight = 0
        self.guard: ConnectionGuard | None = None  # set once the listener runs

    def aiohttp_middleware(self) -> Any:
        """:meth:`middleware` as aiohttp takes it, marked new-style ``(request, handler)``.

        ``web.middleware`` marks it here, when the listener starts, not as a decorator
        at import: importing aiohttp costs every one-shot CLI command ~120 ms.
        """
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        web.middleware(RequestGate.middleware)  # sets the mark on the function, once or again
        return self.middleware

    async def middleware(self, request: web.Request, handler: Any) -> web.StreamResponse:
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
        held = True

        def release() -> None:
            nonlocal held
            if held:
                held = False
                self.in_flight -= 1

        request[_release_key()] = release
        try:
            return await handler(request)
        finally:
            release()

    async def _read_body(self, request: web.Request) -> web.StreamResponse | None:
        """Read the whole body within ``body_timeout``; a refusal, or None when it may go on."""
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        # a body (or a declared type) must be JSON; a bodiless POST (`curl -X POST
        # …/admin/reload`) has nothing to smuggle and is left to the Origin check
        json_route = is_json_route(request.method, request.path)
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
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

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
        return web.json_response(body, status=status, headers=headers, dumps=dumps)
