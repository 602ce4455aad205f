"""One aiohttp request answered by an ASGI application (the SDK's streamable HTTP server).

The listener is aiohttp; the SDK's server side is ASGI. This is the small bridge
between them, written here rather than taken from ``aiohttp-asgi`` (0.7.1), which
does not fit this listener: it reads the body from ``request.content``, which the
listener's gate has already read in full (the application would get an empty body),
and after the body its ``receive`` returns at once, forever, never
``http.disconnect`` — a Server-Sent Events response (sse-starlette) waits for the
disconnect in a ``while True: await receive()`` loop, which would then spin without
yielding and stall the daemon.

Here ``receive`` gives the body once, then waits until the response is complete or
the client's connection is gone and says ``http.disconnect``; ``send`` streams each
body chunk as it comes (an SSE event reaches the client when it is sent).
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, MutableMapping
from typing import TYPE_CHECKING, Any

from tmy.logs import get_logger

if TYPE_CHECKING:  # deferred: aiohttp is ~120 ms of every CLI start
    from aiohttp import web

log = get_logger("tmy.mcpserve")

Scope = MutableMapping[str, Any]
AsgiApp = Callable[
    [Scope, Callable[[], Awaitable[dict[str, Any]]], Callable[[dict[str, Any]], Awaitable[None]]],
    Awaitable[None],
]

DISCONNECT_POLL = 1.0
"""How often (seconds) a ``receive`` waiting for the end looks whether the client left."""


def scope_of(request: web.Request, extra: dict[str, Any] | None = None) -> Scope:
    """The ASGI HTTP scope of ``request`` (plus ``extra`` keys)."""
    peer = request.transport.get_extra_info("peername") if request.transport else None
    sock = request.transport.get_extra_info("sockname") if request.transport else None
    return {
        "type": "http",
        "asgi": {"version": "3.0", "spec_version": "2.3"},
        "http_version": f"{request.version.major}.{request.version.minor}",
        "method": request.method,
        "scheme": request.scheme,
        "path": request.path,
        "raw_path": request.raw_path.split("?", 1)[0].encode("latin-1"),
        "query_string": request.query_string.encode("latin-1"),
        "root_path": "",
        "headers": [(k.lower(), v) for k, v in request.raw_headers],
        "client": tuple(peer[:2]) if isinstance(peer, tuple) else None,
        "server": tuple(sock[:2]) if isinstance(sock, tuple) else None,
        "state": {},
        **(extra or {}),
    }


async def answer(app: AsgiApp, request: web.Request, scope: Scope) -> web.StreamResponse:
    """Run ``app`` for ``request`` and stream what it sends back."""
    from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

    body = await request.read()  # read (and kept) by the listener's gate already
    exchange = _Exchange(request, body)
    try:
        await app(scope, exchange.receive, exchange.send)
    except Exception as exc:  # once answering, a failure (the client left) ends the stream
        if exchange.response is None:
            raise
        log.debug("mcpserve.http_ended", path=request.path, error=repr(exc))
    finally:
        exchange.complete.set()
    response = exchange.response
    if response is None:
        log.warning("mcpserve.no_response", path=request.path, method=request.method)
        return web.Response(status=500, text="the MCP server sent no response")
    if not exchange.ended:
        with contextlib.suppress(ConnectionError):
            await response.write_eof()
    return response


class _Exchange:
    """The ``receive``/``send`` pair of one request."""

    def __init__(self, request: web.Request, body: bytes) -> None:
        self.request = request
        self.body: bytes | None = body
        self.response: web.StreamResponse | None = None
        self.ended = False
        self.complete = asyncio.Event()  # the response is whole, or the app returned

    async def receive(self) -> dict[str, Any]:
        if self.body is not None:
            body, self.body = self.body, None
            return {"type": "http.request", "body": body, "more_body": False}
        while not self.complete.is_set() and not self._gone():
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self.complete.wait(), DISCONNECT_POLL)
        return {"type": "http.disconnect"}

    def _gone(self) -> bool:
        transport = self.request.transport
        return transport is None or transport.is_closing()

    async def send(self, message: dict[str, Any]) -> None:
        from aiohttp import web  # deferred: aiohttp is ~120 ms of every CLI start

        kind = message["type"]
        if kind == "http.response.start":
            response = web.StreamResponse(status=message["status"])
            for name, value in message.get("headers") or ():
                response.headers.add(name.decode("latin-1"), value.decode("latin-1"))
            self.response = response
            await response.prepare(self.request)
        elif kind == "http.response.body":
            if self.response is None or self.ended:
                raise RuntimeError(f"ASGI: {kind} out of order")
            chunk = message.get("body") or b""
            if chunk:
                await self.response.write(chunk)
            if not message.get("more_body", False):
                self.ended = True
                await self.response.write_eof()
                self.complete.set()
