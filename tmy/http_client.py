"""The one pooled HTTP client every outbound call of a daemon shares (LLM, HTTP steps, memory).

It is an httpx client on aiohttp's connection pool (httpx-aiohttp, the backend
the openai SDK offers): httpcore's pool is quadratic in open connections, which
made 1,000 concurrent LLM calls take seconds of CPU. It lives here, below the
engine and the executors, so that neither reaches into the other for it.
"""

from __future__ import annotations

import aiohttp
import httpx
from httpx_aiohttp import HttpxAiohttpClient
from httpx_aiohttp import transport as _aiohttp_transport

from tmy.bodies import ACCEPT_ENCODING

HTTP_MAX_CONNECTIONS = 2000  # one per in-flight LLM/HTTP call at peak; idle ones are kept

# httpx-aiohttp 0.2 maps every aiohttp ClientConnectionError (a refused
# connection, a server that hung up) to httpx.ConnectTimeout, so "connection
# refused" would read as "timed out". Map the family to NetworkError instead;
# its more specific entries (ClientConnectorError -> ConnectError, payload
# errors -> ReadError, real timeouts) still win.
_aiohttp_transport.AIOHTTP_EXC_MAP[aiohttp.ClientConnectionError] = httpx.NetworkError


def new_http_client() -> httpx.AsyncClient:
    """A pooled client: 30 s timeout, redirects followed, only encodings bodies.py can bound."""
    return HttpxAiohttpClient(
        timeout=httpx.Timeout(30.0),
        limits=httpx.Limits(
            max_connections=HTTP_MAX_CONNECTIONS,
            max_keepalive_connections=HTTP_MAX_CONNECTIONS,
        ),
        follow_redirects=True,
        headers={"Accept-Encoding": ACCEPT_ENCODING},
    )
