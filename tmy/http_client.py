"""The one pooled HTTP client every outbound call of a daemon shares (LLM, HTTP steps, memory).

It is an httpx client on aiohttp's connection pool (httpx-aiohttp, the backend
the openai SDK offers): httpcore's pool is quadratic in open connections, which
made 1,000 concurrent LLM calls take seconds of CPU. It lives here, below the
engine and the executors, so that neither reaches into the other for it.
"""

from __future__ import annotations

from typing import TYPE_CHECKING

from tmy.bodies import ACCEPT_ENCODING

if TYPE_CHECKING:  # deferred: httpx is ~50 ms of every CLI start
    import httpx

HTTP_MAX_CONNECTIONS = 2000  # one per in-flight LLM/HTTP call at peak; idle ones are kept


def new_http_client() -> httpx.AsyncClient:
    """A pooled client: 30 s timeout, redirects followed, only encodings bodies.py can bound.

    aiohttp is imported here, not with this module: it is ~120 ms of every one-shot CLI
    command, most of which never make an outbound call (``serve`` imports it at start-up).
    """
    import aiohttp  # deferred: see the docstring
    import httpx  # deferred: httpx is ~50 ms of every CLI start
    from httpx_aiohttp import HttpxAiohttpClient
    from httpx_aiohttp import transport as _aiohttp_transport

    # httpx-aiohttp 0.2 maps every aiohttp ClientConnectionError (a refused
    # connection, a server that hung up) to httpx.ConnectTimeout, so "connection
    # refused" would read as "timed out". Map the family to NetworkError instead;
    # its more specific entries (ClientConnectorError -> ConnectError, payload
    # errors -> ReadError, real timeouts) still win. (The same entry each time.)
    _aiohttp_transport.AIOHTTP_EXC_MAP[aiohttp.ClientConnectionError] = httpx.NetworkError
    return HttpxAiohttpClient(
        timeout=httpx.Timeout(30.0),
        limits=httpx.Limits(
            max_connections=HTTP_MAX_CONNECTIONS,
            max_keepalive_connections=HTTP_MAX_CONNECTIONS,
        ),
        follow_redirects=True,
        headers={"Accept-Encoding": ACCEPT_ENCODING},
    )
