"""A server that announces tool list changes without end: re-listed at most a few times a
second, not once per announcement (each listing that differs is a log line)."""

from __future__ import annotations

import asyncio
import sys
import textwrap
from pathlib import Path

import pytest

from tmy.mcp import connection
from tmy.mcp.config import parse_mcp
from tmy.mcp.servers import Servers

pytestmark = pytest.mark.slow  # starts a server process

# Handshake era (notifications/tools/list_changed); every listing differs from the one before
# and is counted in the file named by argv[1].
FLOODER = textwrap.dedent(
    """
    import sys
    import anyio
    import mcp_types as types
    from mcp.server.lowlevel import NotificationOptions, Server
    from mcp.server.runner import serve_loop
    from mcp.server.stdio import stdio_server

    lists = 0

    async def list_tools(ctx, params):
        global lists
        lists += 1
        with open(sys.argv[1], "w") as f:
            f.write(str(lists))
        tool = types.Tool(name=f"t{lists}", input_schema={"type": "object"})
        flood = types.Tool(name="flood", input_schema={"type": "object"})
        return types.ListToolsResult(tools=[flood, tool])

    async def call_tool(ctx, params):
        for _ in range(300):
            await ctx.session.send_tool_list_changed()
            await anyio.sleep(0.002)
        return types.CallToolResult(content=[types.TextContent(type="text", text="flooded")])

    server = Server("flooder", on_list_tools=list_tools, on_call_tool=call_tool)

    async def main():
        async with stdio_server() as (read, write), server.lifespan(server) as state:
            options = server.create_initialization_options(NotificationOptions(tools_changed=True))
            await serve_loop(server, read, write, lifespan_state=state, init_options=options)

    anyio.run(main)
    """
)


async def test_a_flood_of_list_changes_is_listed_a_few_times_a_second(tmp_path: Path) -> None:
    script, count = tmp_path / "flooder.py", tmp_path / "lists.txt"
    script.write_text(FLOODER, encoding="utf-8")
    config = {"command": sys.executable, "args": [str(script), str(count)]}
    async with Servers(parse_mcp({"servers": {"f": config}})) as servers:
        await servers.wait_listed(20)
        assert (await servers.call("f", "flood", {})).text == "flooded"  # ~0.6 s of announcements
        await asyncio.sleep(connection.RELIST_PAUSE * 2)
    lists = int(count.read_text())
    assert lists <= 2 + 1 / connection.RELIST_PAUSE * 2, lists  # the first, then a few a second
    assert lists >= 2  # the changes were seen
