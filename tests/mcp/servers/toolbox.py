"""A real MCP server for tmy's tests, written with the official SDK's server side (``MCPServer``).

Run it as ``python tests/mcp/servers/toolbox.py stdio`` (stdin/stdout),
``… http --port N`` (streamable HTTP at ``http://127.0.0.1:N/mcp``) or
``… sse --port N`` (the older SSE transport at ``http://127.0.0.1:N/sse``).

Tools: ``echo(text)``, ``add(a, b)``, ``slow(seconds)`` (a tool that hangs), ``delete_thing(id)``
(the one a deny glob keeps from the model), ``picture()`` (an image block, no text),
``structured()`` (structuredContent only, no content blocks), ``fail(message)`` (a tool
error: isError), ``whoami()`` (this process's id: tells a restarted server from the old one)
and ``grow()``, which adds a tool ``extra`` and announces the list change the way the
negotiated protocol does it — ``notifications/tools/list_changed`` on a handshake-era
connection, an event on the ``subscriptions/listen`` bus on a 2026-07-28 one.
With ``TOOLBOX_REVEAL`` set there is one more, ``reveal(name)``: an HTTP header or environment
variable said back, as a server echoing a credential would; with ``TOOLBOX_BIG``,
``big(megabytes)``: a text that large. ``TOOLBOX_JSON`` makes the streamable HTTP server answer
each request with one JSON body instead of an event stream. With ``TOOLBOX_GROW_ON_LIST`` the
server grows (adds ``extra`` and announces it, as ``grow()`` does) right after answering its
first ``tools/list`` — the change a client misses unless it lists again once its change
subscription is open (the announcement reaches no one: nobody is subscribed yet).

Every call appends one JSON line ``{"tool", "arguments", "pid"}`` to the file named by
``TOOLBOX_CALL_LOG`` (when set) *before* the tool does anything, so a test can prove a tool
was never called — or that a hanging one was.
"""

from __future__ import annotations

import argparse
import base64
import json
import os
from typing import Any

import anyio
from mcp.server.lowlevel import NotificationOptions
from mcp.server.mcpserver import Context, Image, MCPServer
from mcp.server.mcpserver.exceptions import ToolError
from mcp_types import CallToolResult
from starlette.requests import Request
from starlette.responses import PlainTextResponse, Response

# A 1x1 PNG (one green pixel): the smallest real image a tool can hand back.
PIXEL_PNG = base64.b64decode(
    "iVBORw0KGgoAAAANSUhEUgAAAAEAAAABCAIAAACQd1PeAAAADElEQVR4nGP4z8AAAAMBAQDJ/pLvAAAAAElFTkSuQmCC"
)
STRUCTURED = {"answer": 42, "unit": "widgets"}


def log_call(tool: str, arguments: dict[str, Any], **seen: Any) -> None:
    """Append one line for this call to ``$TOOLBOX_CALL_LOG`` (one small write per call);
    ``seen``: more fields, what the server was given (``reveal``'s value)."""
    path = os.environ.get("TOOLBOX_CALL_LOG")
    if not path:
        return
    entry = {"tool": tool, "arguments": arguments, "pid": os.getpid(), **seen}
    line = json.dumps(entry) + "\n"
    with open(path, "a", encoding="utf-8") as log:
        log.write(line)


def extra() -> str:
    """A tool that exists only after grow() was called."""
    log_call("extra", {})
    return "extra!"


def reveal(name: str, ctx: Context) -> str:
    """The HTTP header ``name`` of this request, else the environment variable ``name``:
    a server echoing a credential back (the call log's ``value`` holds it too)."""
    headers = ctx.headers
    value = headers.get(name) if headers is not None else None
    if value is None:
        value = os.environ.get(name, "")
    log_call("reveal", {"name": name}, value=value)
    return value


def big(megabytes: float) -> str:
    """A text of this many megabytes (a server that answers far more than anyone reads)."""
    log_call("big", {"megabytes": megabytes})
    return "A" * int(megabytes * 1024 * 1024)


def build() -> MCPServer:
    """The toolbox server, its tools registered."""
    server = MCPServer("toolbox", version="1.0", log_level="WARNING")

    @server.tool()
    def echo(text: str) -> str:
        """Say the text back."""
        log_call("echo", {"text": text})
        return text

    @server.tool()
    def add(a: int, b: int) -> int:
        """Add two whole numbers."""
        log_call("add", {"a": a, "b": b})
        return a + b

    @server.tool()
    async def slow(seconds: float) -> str:
        """Sleep this many seconds, then answer (a tool that hangs)."""
        log_call("slow", {"seconds": seconds})
        await anyio.sleep(seconds)
        return f"slept {seconds}"

    @server.tool()
    def delete_thing(id: str) -> str:
        """Delete a thing by id (what a deny glob should keep from the model)."""
        log_call("delete_thing", {"id": id})
        return f"deleted {id}"

    @server.tool()
    def picture() -> Image:
        """A small PNG image, as an image content block."""
        log_call("picture", {})
        return Image(data=PIXEL_PNG, format="png")

    @server.tool()
    def structured() -> CallToolResult:
        """A result with structuredContent only: no content blocks, so no text."""
        log_call("structured", {})
        return CallToolResult(content=[], structured_content=dict(STRUCTURED))

    @server.tool()
    def fail(message: str) -> str:
        """Fail with this message (the result says isError)."""
        log_call("fail", {"message": message})
        raise ToolError(message)

    if os.environ.get("TOOLBOX_REVEAL"):  # opt-in: the usual tool list stays as tests know it
        server.add_tool(reveal)
    if os.environ.get("TOOLBOX_BIG"):  # opt-in, as reveal
        server.add_tool(big)

    @server.tool()
    def whoami() -> int:
        """This server process's id."""
        log_call("whoami", {})
        return os.getpid()

    @server.tool()
    async def grow(ctx: Context) -> str:
        """Add the tool `extra` and announce that the tool list changed."""
        log_call("grow", {})
        if not any(tool.name == "extra" for tool in await server.list_tools()):
            server.add_tool(extra)
        # 2026-07-28: delivered to subscriptions/listen streams that asked for tool changes.
        await ctx.notify_tools_changed()
        # Handshake era: notifications/tools/list_changed on the connection's own channel (stdio's
        # pipe, streamable HTTP's GET stream). On a modern connection the SDK drops it by design.
        await ctx.session.send_tool_list_changed()
        return "grown"

    @server.custom_route("/pid", methods=["GET"])
    async def pid(request: Request) -> Response:
        """Not MCP: the fixture's readiness probe (this process, not another, has the port)."""
        return PlainTextResponse(str(os.getpid()))

    if os.environ.get("TOOLBOX_GROW_ON_LIST"):
        grow_on_first_list(server)
    advertise_list_changes(server)
    return server


def grow_on_first_list(server: MCPServer) -> None:
    """After answering the first ``tools/list``, add ``extra`` and announce it on the
    ``subscriptions/listen`` bus (where no client listens yet: it is still reading the list)."""
    import mcp_types as types
    from mcp.shared.subscriptions import ToolsListChanged

    lowlevel = server._lowlevel_server  # the SDK's Server behind MCPServer (no public accessor)
    answered = 0

    async def list_tools(ctx: Any, params: types.PaginatedRequestParams) -> types.ListToolsResult:
        nonlocal answered
        result = types.ListToolsResult(tools=await server.list_tools())
        answered += 1
        if answered == 1:
            server.add_tool(extra)
            await server._subscriptions.publish(ToolsListChanged())
        return result

    lowlevel.add_request_handler("tools/list", types.PaginatedRequestParams, list_tools)


def advertise_list_changes(server: MCPServer) -> None:
    """Say ``tools.listChanged: true`` in the handshake-era capabilities.

    MCPServer's transports build their initialization options with the default
    ``NotificationOptions()`` (every listChanged false) and take no argument for it; the
    2026-07-28 capabilities derive it from ``subscriptions/listen`` being served instead.
    """
    lowlevel = server._lowlevel_server  # the SDK's Server behind MCPServer (no public accessor)
    create = lowlevel.create_initialization_options

    def create_with_list_changes(
        notification_options: NotificationOptions | None = None, *args: Any, **kw: Any
    ) -> Any:
        chosen = notification_options or NotificationOptions(tools_changed=True)
        return create(chosen, *args, **kw)

    lowlevel.create_initialization_options = create_with_list_changes  # type: ignore[method-assign]


async def serve_http(server: MCPServer, app_kind: str, port: int) -> None:
    """Serve streamable HTTP (``/mcp``) or SSE (``/sse``) on 127.0.0.1:port until SIGTERM/SIGINT."""
    import uvicorn  # the SDK's own dependency for its HTTP transports

    if app_kind == "http":
        json_response = bool(os.environ.get("TOOLBOX_JSON"))  # answers as JSON, not events
        app = server.streamable_http_app(host="127.0.0.1", json_response=json_response)
    else:
        app = server.sse_app(host="127.0.0.1")
    config = uvicorn.Config(app, host="127.0.0.1", port=port, log_level="warning", lifespan="on")
    await uvicorn.Server(config).serve()


def main(argv: list[str] | None = None) -> None:
    parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    parser.add_argument("transport", choices=["stdio", "http", "sse"])
    parser.add_argument("--port", type=int, default=0)
    args = parser.parse_args(argv)
    server = build()
    if args.transport == "stdio":
        anyio.run(server.run_stdio_async)
    else:
        if not args.port:
            parser.error(f"{args.transport} needs --port")
        anyio.run(serve_http, server, args.transport, args.port)


if __name__ == "__main__":
    main()
