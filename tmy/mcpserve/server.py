"""The MCP server itself (the SDK's lowlevel ``Server``): ``tools/list`` and ``tools/call``.

One server object serves every transport; what differs is who the caller is, which
``caller_of(ctx)`` says for each request (stdio: the ``--user``/``--platform`` it was
started with; HTTP: what the route put in the request's scope, :mod:`tmy.mcpserve.http`).
The engine is read at each request, so a reload's rulebook is what is listed and run.
"""

from __future__ import annotations

import contextlib
from collections.abc import Callable, Iterator
from typing import TYPE_CHECKING, Any

from tmy.engine.core import Engine
from tmy.engine.inflight import InFlight
from tmy.mcp import hops
from tmy.mcpserve import tools
from tmy.mcpserve.tools import Caller

if TYPE_CHECKING:  # deferred: the SDK is ~0.5 s of every CLI start
    import mcp_types
    from mcp.server.lowlevel import Server

NAME = "tmy"
INSTRUCTIONS = (
    "The tools are a tmy bot's rules: each runs one rule as you, with its filters applied, "
    "and answers with the rule's reply."
)


class Calls(InFlight):
    """Tool calls in flight, so closing can wait for them (``drain``) as the engine waits
    for its runs: a rule is not cut off halfway because the daemon stops."""

    @contextlib.contextmanager
    def running(self) -> Iterator[None]:
        self._inflight += 1
        try:
            yield
        finally:
            self._inflight -= 1
            if self._inflight == 0:
                self._settled()


def build_server(
    engine: Callable[[], Engine],
    caller_of: Callable[[Any], Caller],
    version: str = "",
    calls: Calls | None = None,
) -> Server[Any]:
    """An MCP server exposing ``engine()``'s tool rules to whoever ``caller_of(ctx)`` names
    (``ctx``: the SDK's request context); ``calls`` counts the calls in flight."""
    calls = calls or Calls()
    import mcp_types as types  # deferred: the SDK is ~0.5 s of every CLI start
    from mcp.server.lowlevel import Server

    async def list_tools(ctx: Any, params: Any) -> mcp_types.ListToolsResult:
        listed = tools.offered(engine(), caller_of(ctx))
        return types.ListToolsResult(
            tools=[
                types.Tool(name=t.name, description=t.description, input_schema=t.parameters)
                for t in listed
            ],
            ttl_ms=0,  # the rules may reload, and the list is this caller's own
            cache_scope="private",
        )

    async def call_tool(ctx: Any, params: mcp_types.CallToolRequestParams) -> Any:
        depth = hops.incoming(params.meta)
        with calls.running():
            outcome = await tools.call(
                engine(), caller_of(ctx), params.name, params.arguments, depth
            )
        return types.CallToolResult(
            content=[types.TextContent(type="text", text=outcome.text)],
            is_error=outcome.is_error,
        )

    return Server(
        NAME,
        version=version,
        instructions=INSTRUCTIONS,
        on_list_tools=list_tools,
        on_call_tool=call_tool,
    )


def package_version() -> str:
    """tmy's version as installed ("" when it is run from a checkout that is not)."""
    from importlib.metadata import PackageNotFoundError, version

    try:
        return version("tmy")
    except PackageNotFoundError:
        return ""
