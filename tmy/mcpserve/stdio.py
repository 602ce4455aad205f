"""``python run.py mcp-serve``: the MCP server over stdin/stdout, for one caller.

The MCP client (Claude Desktop, an IDE) starts the process and speaks as the one
caller the command line names. stdout is the protocol: the SDK points file
descriptor 1 at stderr while serving, so nothing else can reach it, and tmy's
logs go to stderr (or the log file) as for every CLI command.

With ``watch`` on (the config's default), edits under the rules and plugins folders
reload the rules as the daemon's watcher does, and a client that began with the
``initialize`` handshake is told ``notifications/tools/list_changed``.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Awaitable, Callable, Sequence
from pathlib import Path
from typing import Any

from tmy.engine.core import Engine
from tmy.logs import get_logger
from tmy.mcpserve.server import build_server, package_version
from tmy.mcpserve.tools import Caller
from tmy.reload import watch

log = get_logger("tmy.mcpserve")

Reload = Callable[[str], Awaitable[Any]]  # App.reload: a result with ``ok``


async def serve_stdio(
    engine: Engine,
    caller: Caller,
    *,
    reload: Reload | None = None,
    folders: Sequence[Path] = (),
) -> None:
    """Serve ``engine``'s tool rules to ``caller`` until the client closes stdin;
    ``reload`` (with the ``folders`` to watch) follows edits of the rules."""
    from mcp.server.lowlevel.server import NotificationOptions  # deferred: the SDK is ~0.5 s
    from mcp.server.stdio import stdio_server

    sessions: list[Any] = []  # the one client's session, once it has sent a request

    def caller_of(ctx: Any) -> Caller:
        if not sessions:
            sessions.append(ctx.session)
        return caller

    async def reloaded(reason: str) -> None:
        assert reload is not None
        result = await reload(reason)
        if getattr(result, "ok", False) and sessions:
            await _announce(sessions[0])

    server = build_server(lambda: engine, caller_of, package_version())
    watching = reload is not None and bool(folders)
    options = server.create_initialization_options(NotificationOptions(tools_changed=watching))
    async with stdio_server() as (read, write), _watching(folders if watching else (), reloaded):
        await server.run(read, write, options)


async def _announce(session: Any) -> None:
    """``notifications/tools/list_changed`` (a client on the 2026 protocol subscribes instead,
    which this server does not offer: it lists afresh when it asks)."""
    try:
        await session.send_tool_list_changed()
    except Exception as exc:  # the client left, or its protocol has no such notification
        log.debug("mcpserve.list_changed_failed", error=str(exc))


@contextlib.asynccontextmanager
async def _watching(folders: Sequence[Path], reload: Callable[[str], Awaitable[None]]) -> Any:
    if not folders:
        yield
        return
    stop = asyncio.Event()
    task = asyncio.create_task(watch(list(folders), reload, stop))
    try:
        yield
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
