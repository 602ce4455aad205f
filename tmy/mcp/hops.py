"""How many MCP calls deep a run is, so tmy calling itself through MCP cannot loop for ever.

Within one process a tool call that leads to another is bounded by the LLM answerer's own
depth (:data:`tmy.llm.tools.MAX_DEPTH`); that count does not cross an HTTP request. A bot
whose MCP servers include its own ``/mcp`` (or another tmy that calls back) could otherwise
go round — a tool rule whose LLM step calls an MCP tool that runs the same rule — one
request deeper each time until every listener slot is taken. So a call tmy makes from a run
that itself came in over MCP carries ``_meta: {"tmy/hops": N}`` (the hops so far, plus one),
and tmy's MCP server (:mod:`tmy.mcpserve.tools`) refuses a call past :data:`MAX_HOPS`.
A server that is not tmy ignores the key (``_meta`` is an open map).
"""

from __future__ import annotations

import contextlib
from collections.abc import Iterator, Mapping
from contextvars import ContextVar
from typing import Any

META_KEY = "tmy/hops"
MAX_HOPS = 4  # tools/call requests deep, counting the first

_HOPS: ContextVar[int] = ContextVar("tmy_mcp_hops", default=0)


def outgoing() -> dict[str, Any] | None:
    """The ``_meta`` of a call made now (None outside a run that came in over MCP)."""
    hops = _HOPS.get()
    return {META_KEY: hops + 1} if hops else None


def incoming(meta: Mapping[str, Any] | None) -> int:
    """The hops a request says it is (1: a first call, from a client that is not tmy)."""
    value = (meta or {}).get(META_KEY)
    return value if isinstance(value, int) and not isinstance(value, bool) and value > 0 else 1


@contextlib.contextmanager
def serving(hops: int) -> Iterator[None]:
    """While a call that came in ``hops`` deep runs: the calls it makes say one more."""
    token = _HOPS.set(hops)
    try:
        yield
    finally:
        _HOPS.reset(token)
