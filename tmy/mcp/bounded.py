"""A bound on what one HTTP answer of an MCP server may make tmy read: :data:`MAX_BODY_BYTES`.

A tool result is cut to ``limits.max_reply_chars`` once it is read (:mod:`tmy.mcp.results`),
but the SDK reads a streamable HTTP server's JSON answer whole first (its event-stream
answers are bounded per event, 1 MB) — a server answering with hundreds of megabytes would
have them held, parsed and validated in the daemon's memory. The HTTP client tmy gives the
SDK therefore has a transport that counts the bytes of each ``application/json`` answer and
fails it past the bound (the SDK turns it into that request's error: the call fails, the
session goes on). Event streams are left to the SDK's own per-event bound: they are long-lived.
"""

from __future__ import annotations

import functools
from typing import Any

MAX_BODY_BYTES = 16 * 1024 * 1024  # one JSON answer of an MCP server, at most


def transport() -> Any:
    """A new ``httpx2`` transport with the bound (for ``httpx2.AsyncClient(transport=…)``)."""
    return _classes()[0]()


@functools.cache
def _classes() -> tuple[type, type]:
    import httpx2  # deferred: the SDK's HTTP client is part of its ~0.5 s import

    class Bounded(httpx2.AsyncByteStream):  # type: ignore[misc]
        def __init__(self, inner: Any) -> None:
            self._inner = inner

        async def __aiter__(self) -> Any:
            seen = 0
            async for chunk in self._inner:
                seen += len(chunk)
                if seen > MAX_BODY_BYTES:
                    raise httpx2.StreamError(
                        f"the server's answer passed {MAX_BODY_BYTES // (1024 * 1024)} MB: not read"
                    )
                yield chunk

        async def aclose(self) -> None:
            await self._inner.aclose()

    class BoundedTransport(httpx2.AsyncHTTPTransport):  # type: ignore[misc]
        async def handle_async_request(self, request: Any) -> Any:
            response = await super().handle_async_request(request)
            kind = response.headers.get("content-type", "").lower()
            if kind.startswith("text/event-stream"):
                return response
            response.stream = Bounded(response.stream)
            return response

    return BoundedTransport, Bounded
