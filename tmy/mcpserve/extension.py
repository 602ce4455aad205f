"""tmy as an MCP server, as an extension: the ``/mcp`` route and the session manager behind it.

* a lifespan that yields the app's :class:`~tmy.mcpserve.http.HttpState`
  (``services.state["mcpserve"]``, read through :func:`state_of`) — nothing opens
  until the app serves;
* the serving part: the SDK's streamable HTTP session manager, for as long as the
  daemon serves with its HTTP listener on;
* the routes ``GET``/``POST``/``DELETE /mcp`` on that listener, behind the API keys.

``python run.py mcp-serve`` (stdio) is a CLI program, not part of this object: it
opens the app as ``ask`` does and serves one caller (:mod:`tmy.mcpserve.stdio`).
"""

from __future__ import annotations

import contextlib
from collections.abc import AsyncIterator
from typing import Any

from tmy.extension import Extension
from tmy.mcpserve import http
from tmy.mcpserve.http import HttpState
from tmy.types import Services

STATE_KEY = "mcpserve"


def state_of(services: Services) -> HttpState:
    """The app's ``/mcp`` state (``services.state["mcpserve"]``, set by the lifespan)."""
    state = services.state.get(STATE_KEY)
    if not isinstance(state, HttpState):
        raise RuntimeError("the mcpserve extension is not installed in this app")
    return state


@contextlib.asynccontextmanager
async def lifespan(services: Services) -> AsyncIterator[HttpState]:
    yield HttpState()


@contextlib.asynccontextmanager
async def serving(services: Services) -> AsyncIterator[None]:
    if not services.settings.adapters.http.enabled:  # no listener: no /mcp to serve
        yield
        return
    async with http.running(services, state_of(services)):
        yield


def routes(services: Services) -> list[Any]:
    return http.routes(services, state_of(services))


EXTENSION = Extension(
    name=STATE_KEY,
    lifespan=lifespan,
    serving=serving,
    routes=routes,
    doc="tmy's rules marked tool: as MCP tools: /mcp on the listener (and mcp-serve on stdio)",
)
