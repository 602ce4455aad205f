"""The MCP servers' share of one app, and how steps, tools and pages reach it.

The MCP extension's lifespan (:mod:`tmy.mcp.extension`) yields one
:class:`McpRuntime` per app; the app keeps it as ``services.state["mcp"]``,
read only through :func:`mcp_of`. It owns the app's
:class:`~tmy.mcp.servers.Servers` (the connections, :mod:`tmy.mcp.servers`)
and decides *when* they start:

* **at once** (``eager``) — the daemon, ``ask``, ``chat``, operator commands and
  :mod:`tmy.testing`: the servers start when the app opens and the app waits
  (at most :data:`STARTUP_WAIT` seconds) until each has listed its tools or
  failed, so the first LLM step is offered their tools (an LLM step reads its tools
  without waiting: a server still starting would offer none). An operator command
  (``vars``, ``backup`` …) starts them too — the app does not know what it is opened
  for — and pays that wait only while a server is slow to list;
* **at first use** — an app given its own HTTP client, i.e. ``run.py test``'s
  rule tests (whose outbound HTTP is canned): no process is spawned and no URL
  connected unless a case runs an ``MCP`` step, which starts them and waits for
  its own server. Their LLM steps are offered no MCP tools, for the same reason
  their HTTP is canned: a rule test must not depend on a live server.
"""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import Mapping
from typing import Any

from tmy.errors import ExecutorError
from tmy.hints import did_you_mean
from tmy.mcp.config import McpConfig, ServerConfig
from tmy.mcp.servers import Servers, ToolInfo
from tmy.types import Services

STATE_KEY = "mcp"  # the extension's name: its lifespan's yield is services.state["mcp"]
STARTUP_WAIT = 10.0  # seconds an app opening waits at most for the servers to list their tools
IDLE = "idle"  # a server's state while the app has not started the servers (rule tests)


class McpRuntime:
    """The configured servers of one app: started now or at first use (module docstring).

    ``config`` None or without servers: nothing to start, every name unknown.
    """

    def __init__(self, config: McpConfig | None, *, eager: bool) -> None:
        self.config = config
        self.eager = eager
        self._servers: Servers | None = None
        self._stack = contextlib.AsyncExitStack()
        self._lock = asyncio.Lock()
        self._closed = False

    # -- what is configured and what is known -----------------------------------------------

    @property
    def configured(self) -> Mapping[str, ServerConfig]:
        """The server configs by name (empty without an ``mcp:`` section)."""
        return self.config.servers if self.config is not None else {}

    def names(self) -> list[str]:
        """The configured server names, sorted."""
        return sorted(self.configured)

    @property
    def servers(self) -> Servers | None:
        """The connections, once started (None before: rule tests that used no MCP step)."""
        return self._servers

    def state(self, name: str) -> dict[str, Any]:
        """One server's state (:meth:`Servers.state`); ``idle`` while not started."""
        if self._servers is None:
            transport = self.configured[name].transport
            return {"state": IDLE, "transport": transport, "tools": None, "error": None,
                    "since": None, "reconnects": 0}  # fmt: skip
        return self._servers.state(name)

    def states(self) -> dict[str, dict[str, Any]]:
        """Every configured server's state, by name."""
        return {name: self.state(name) for name in self.names()}

    def tools(self, name: str) -> list[ToolInfo] | None:
        """The tools ``name`` listed last; None while not known (never listed, not started)."""
        if self._servers is None or name not in self.configured:
            return None
        return self._servers.tools(name)

    # -- starting and stopping --------------------------------------------------------------

    async def start(self, wait: float = 0.0) -> Servers:
        """Start the servers (once) and wait up to ``wait`` seconds for their first listing."""
        if self._closed:
            raise ExecutorError("the app is closing: MCP servers are not started any more")
        async with self._lock:
            if self._servers is None:
                assert self.config is not None, "start() without an mcp: section"
                self._servers = await self._stack.enter_async_context(Servers(self.config))
        if wait > 0:
            await self._servers.wait_listed(wait)
        return self._servers

    async def ready(self, server: str) -> Servers:
        """The connections for a call to ``server`` (unknown: an error with did-you-mean),
        started if they were not, and waited for (up to its timeout) while it starts."""
        if server not in self.configured:
            raise ExecutorError(unknown_server(server, self.names()))
        servers = self._servers if self._servers is not None else await self.start()
        if servers.state(server)["state"] == "starting":  # started just now (a rule test)
            await servers.wait_listed(self.configured[server].timeout)
        return servers

    async def aclose(self) -> None:
        """Stop the servers (processes ended, sessions closed); no start afterwards."""
        self._closed = True
        async with self._lock:
            await self._stack.aclose()


def unknown_server(name: object, known: list[str]) -> str:
    """The message for a server name ``mcp.servers`` does not configure."""
    if not known:
        return (
            f"MCP server {name!r} is not configured: no mcp.servers in the config "
            "(see the mcp: section of config/tmy.yaml)"
        )
    hint = did_you_mean(name, known)
    return f"MCP server {name!r} is not configured{hint}; known: {', '.join(known)}"


def mcp_of(services: Services) -> McpRuntime:
    """The app's MCP runtime (``services.state["mcp"]``, set by the extension's lifespan)."""
    runtime = services.state.get(STATE_KEY)
    if not isinstance(runtime, McpRuntime):
        raise ExecutorError("the MCP extension is not installed in this app")
    return runtime
