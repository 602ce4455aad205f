"""The daemon's MCP tool servers: kept connected, their tools known, their calls bounded.

:class:`Servers` is entered in the MCP extension's lifespan. It starts one supervisor
task per configured server and returns at once; the daemon serves while servers
connect. Each supervisor (:func:`_supervise`) loops: connect and negotiate
(:func:`tmy.mcp.connection.connect`), list the tools, watch the connection (tool list
changes re-list), and when it ends — the process exited, the HTTP server went away,
the session expired — connect again after a pause that grows (capped exponential
backoff with jitter, reset once a connection has held for a while). Nothing waits for a
server that is down: a call to it fails at once with an :class:`McpError` saying so,
and calls to other servers are untouched.

A call gets the server's ``timeout`` (or its own): past it, it fails alone with
:class:`McpTimeout` (``MCP server 'x': tool 'slow' did not answer within 2 s``) and
the server is told to cancel it. A streamable HTTP session the server has forgotten
(404 to a request with ``Mcp-Session-Id``, e.g. after a restart) is replaced by a new
one, and the call — which the server never ran — is sent once more within its time.

State per server (:meth:`Servers.state`): ``starting`` (first attempt), ``connected``,
``reconnecting`` (it was connected; attempts go on), ``failed`` (it never connected;
attempts go on, ``error`` says why). Secrets never appear in it (see tmy.mcp.config).
Metrics: ``tmy_mcp_server_up``, ``tmy_mcp_calls_total``, ``tmy_mcp_call_seconds``,
``tmy_mcp_reconnects_total``. Log events (``tmy.mcp``): ``mcp.connected``,
``mcp.disconnected``, ``mcp.connect_failed``, ``mcp.tools_changed``, ``mcp.tools_skipped``
(:mod:`tmy.mcp.listing`), ``mcp.call_failed``; a stdio server's ``mcp.stderr``,
``mcp.stderr_dropped`` and ``mcp.orphans`` (:mod:`tmy.mcp.stderr`: its stderr is relayed
into the log, never onto tmy's own, and what it leaves running when stopped is ended).
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from types import TracebackType
from typing import TYPE_CHECKING, Any

from tmy import metrics
from tmy.backoff import Backoff
from tmy.errors import TmyError
from tmy.hints import did_you_mean
from tmy.logs import get_logger
from tmy.mcp.config import McpConfig, ServerConfig
from tmy.mcp.connection import Connection, connect, describe, why_failed
from tmy.mcp.listing import ToolInfo, kept
from tmy.mcp.results import DEFAULT_MAX_RESULT_CHARS, CallResult, to_result
from tmy.mcp.stderr import StderrRelay

RETRY_BASE = 0.5  # seconds: the first pause before connecting a lost server again
RETRY_CAP = 30.0  # the longest pause between attempts

if TYPE_CHECKING:  # deferred: the SDK is ~0.5 s of every CLI start (tmy.mcp.connection)
    import anyio
    import mcp_types as types
    from mcp.shared.exceptions import MCPError

__all__ = ["CallResult", "McpError", "McpTimeout", "Servers", "ToolInfo"]

log = get_logger("tmy.mcp")

STABLE = 10.0  # a connection that held this long resets the pause
STOP_GRACE = 10.0  # seconds __aexit__ waits for supervisors before cancelling them
CALL_GRACE = 2.0  # past the SDK's own timeout, a call is cut off here regardless


class McpError(TmyError):
    """An MCP call failed: unknown server, server down, timeout, protocol error (one line)."""


class McpTimeout(McpError):
    """A call passed its timeout (the server was told to cancel it)."""


class _Server:
    """One server's live state, written by its supervisor only."""

    def __init__(self, config: ServerConfig) -> None:
        self.config = config
        self.state = "starting"
        self.error: str | None = None
        self.since = time.time()
        self.reconnects = 0
        self.tools: list[ToolInfo] | None = None
        self.conn: Connection | None = None
        self.scope: anyio.CancelScope | None = None  # the connect attempt, cancelled on stop
        self.wake = asyncio.Event()  # ends a pause between attempts (stop)
        self.task: asyncio.Task[None] | None = None

    def view(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "transport": self.config.transport,
            "tools": None if self.tools is None else len(self.tools),
            "error": self.error,
            "since": self.since,
            "reconnects": self.reconnects,
        }


class Servers:
    """The configured MCP servers, each kept connected by its own supervisor task."""

    def __init__(
        self, config: McpConfig, *, max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    ) -> None:
        self._servers = {name: _Server(cfg) for name, cfg in config.servers.items()}
        self._max_result_chars = max_result_chars
        self._callbacks: list[Callable[[str], None]] = []
        self._stopping = False
        self._tick = asyncio.Event()  # set (and replaced) on every state or tool list change

    async def __aenter__(self) -> Servers:
        for server in self._servers.values():
            server.task = asyncio.create_task(
                self._supervise(server), name=f"mcp:{server.config.name}"
            )
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping = True
        for server in self._servers.values():
            server.wake.set()
            if server.conn is not None:
                server.conn.end("tmy is stopping")  # a clean close: stdio stdin closed, HTTP DELETE
            elif server.scope is not None:
                server.scope.cancel()  # connecting: anyio's cancel keeps the SDK's shielded cleanup
        tasks = [s.task for s in self._servers.values() if s.task is not None]
        if not tasks:
            return
        _, pending = await asyncio.wait(tasks, timeout=STOP_GRACE)
        for task in pending:
            task.cancel()
        await asyncio.gather(*tasks, return_exceptions=True)

    # -- reading --------------------------------------------------------------------------

    def names(self) -> list[str]:
        return list(self._servers)

    def state(self, name: str) -> dict[str, Any]:
        return self._get(name).view()

    def tools(self, name: str) -> list[ToolInfo] | None:
        found = self._get(name).tools
        return None if found is None else list(found)

    def on_tools_changed(self, callback: Callable[[str], None]) -> None:
        """``callback(server)`` after each listing that differs from the one before."""
        self._callbacks.append(callback)

    async def wait_listed(self, timeout: float) -> None:
        """Until every server has listed its tools once, or failed — or ``timeout`` passed."""
        await self._until(
            lambda: all(s.tools is not None or s.state == "failed" for s in self._servers.values()),
            timeout,
        )

    def _get(self, name: str) -> _Server:
        server = self._servers.get(name)
        if server is None:
            hint = did_you_mean(name, self._servers) if self._servers else " (none is configured)"
            raise McpError(f"unknown MCP server {name!r}{hint}")
        return server

    async def _until(self, done: Callable[[], bool], timeout: float) -> bool:
        deadline = time.monotonic() + timeout
        while not done():
            tick = self._tick
            remaining = deadline - time.monotonic()
            if remaining <= 0:
                return False
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(tick.wait(), remaining)
        return True

    def _changed(self) -> None:
        self._tick.set()
        self._tick = asyncio.Event()

    # -- calling --------------------------------------------------------------------------

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], timeout: float | None = None
    ) -> CallResult:
        """Call ``tool`` on ``server``; McpError when it cannot be had (see the module's doc)."""
        target = self._get(server)
        limit = target.config.timeout if timeout is None else timeout
        conn = target.conn
        if conn is None or target.state != "connected":
            metrics.mcp_call(server, "down")
            why = f": {target.error}" if target.error else ""
            raise McpError(f"MCP server {server!r} is not connected ({target.state}{why})")
        started = time.perf_counter()
        try:
            raw = await self._send(target, conn, tool, arguments, limit)
        except McpError as exc:
            outcome = "timeout" if isinstance(exc, McpTimeout) else "error"
            metrics.mcp_call(server, outcome, time.perf_counter() - started)
            log.warning("mcp.call_failed", server=server, tool=tool, error=str(exc))
            raise
        result = to_result(raw, self._max_result_chars)
        outcome = "tool_error" if result.is_error else "ok"
        metrics.mcp_call(server, outcome, time.perf_counter() - started)
        return result

    async def _send(
        self, target: _Server, conn: Connection, tool: str, arguments: dict[str, Any], limit: float
    ) -> types.CallToolResult:
        import mcp_types as types  # deferred: the SDK is ~0.5 s of every CLI start
        from mcp.shared.exceptions import MCPError

        name = target.config.name
        deadline = time.monotonic() + limit
        for attempt in (1, 2):
            remaining = max(0.001, deadline - time.monotonic())
            try:
                async with asyncio.timeout(remaining + CALL_GRACE):
                    return await conn.call(tool, arguments, remaining)
            except TimeoutError:
                raise McpTimeout(_late(name, tool, limit)) from None
            except MCPError as exc:
                if exc.code == types.REQUEST_TIMEOUT:
                    raise McpTimeout(_late(name, tool, limit)) from None
                if conn.session_expired and attempt == 1:
                    conn.end("the server no longer knows the session (HTTP 404)")
                    conn = await self._reconnected(target, conn, deadline)
                    continue
                if exc.code == types.CONNECTION_CLOSED or conn.ended.is_set():
                    conn.end("the connection closed during a call")
                    raise McpError(
                        f"MCP server {name!r}: the connection closed during tool {tool!r}"
                    ) from None
                raise McpError(self._refused(target, tool, exc)) from None
            except Exception as exc:  # an invalid result, a transport fault
                raise McpError(
                    f"MCP server {name!r}: tool {tool!r} failed: {describe(exc)}"
                ) from None
        raise AssertionError("unreachable")  # pragma: no cover

    async def _reconnected(self, target: _Server, old: Connection, deadline: float) -> Connection:
        """The server's next connection after ``old`` ended, within ``deadline``."""

        def back() -> bool:
            return (
                target.conn is not None and target.conn is not old and target.state == "connected"
            )

        if not await self._until(back, deadline - time.monotonic()) or target.conn is None:
            raise McpError(
                f"MCP server {target.config.name!r}: its session expired and a new one "
                f"could not be started in time ({target.error or target.state})"
            )
        return target.conn

    def _refused(self, target: _Server, tool: str, exc: MCPError) -> str:
        name = target.config.name
        known = [t.name for t in target.tools or ()]
        if target.tools is not None and tool not in known:
            return f"MCP server {name!r} has no tool {tool!r}{did_you_mean(tool, known)}"
        return f"MCP server {name!r}: tool {tool!r} failed: {describe(exc)}"

    # -- supervising ----------------------------------------------------------------------

    async def _supervise(self, server: _Server) -> None:
        """Connect, list, watch; on an end, pause and connect again — until stopped."""
        relay = StderrRelay(server.config.name) if server.config.transport == "stdio" else None
        try:
            await self._supervising(server, relay)
        finally:
            if relay is not None:
                await relay.aclose()
        metrics.mcp_server_up(server.config.name, False)

    async def _supervising(self, server: _Server, relay: StderrRelay | None) -> None:
        backoff = Backoff(RETRY_BASE, RETRY_CAP)
        while not self._stopping:
            opened = time.monotonic()
            lost = await self._attempt(server, relay)
            if self._stopping:
                break
            if lost and time.monotonic() - opened >= STABLE:
                backoff.reset()
            pause = backoff.next()
            if lost is None:  # the session expired: a new one at once
                pause = 0.0
            server.wake.clear()
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(server.wake.wait(), pause)

    async def _attempt(self, server: _Server, relay: StderrRelay | None = None) -> bool | None:
        """One connection, start to end: True when it was connected and then lost (None when
        its HTTP session expired), False when it never connected."""
        import anyio  # deferred: the SDK is ~0.5 s of every CLI start

        name = server.config.name
        connected = False
        conn: Connection | None = None
        if relay is not None:
            relay.clear_tail()
        try:
            with anyio.CancelScope() as server.scope:
                errlog = relay.file if relay is not None else None
                async with connect(server.config, errlog) as conn:
                    tools = await conn.list_tools()
                    server.conn, connected = conn, True
                    server.scope = None  # from here on, stop ends the connection instead
                    self._connected(server, conn)
                    self._listed(server, tools)
                    await conn.run(lambda listed: self._listed(server, listed))
            reason = conn.reason if conn is not None and conn.reason else "closed"
        except Exception as exc:
            reason = why_failed(exc, connected, server.config)
            if relay is not None and not connected:
                await relay.settle()  # what the process wrote before it died, read
                if relay.tail():
                    reason = f"{reason}; its stderr: {relay.tail()}"
        finally:
            server.conn = None
            server.scope = None
        if relay is not None:
            await relay.reap()  # what the stopped server left running
        if self._stopping:
            return connected
        if connected:
            log.info("mcp.disconnected", server=name, reason=reason)
            self._set(server, "reconnecting", reason)
            return None if conn is not None and conn.session_expired else True
        log.warning("mcp.connect_failed", server=name, where=server.config.describe(), error=reason)
        self._set(
            server, "failed" if server.state in ("starting", "failed") else "reconnecting", reason
        )
        return False

    def _connected(self, server: _Server, conn: Connection) -> None:
        name = server.config.name
        again = server.state == "reconnecting"
        if again:
            server.reconnects += 1
            metrics.mcp_reconnect(name)
        log.info(
            "mcp.connected",
            server=name,
            transport=server.config.transport,
            where=server.config.describe(),
            protocol=conn.protocol,
            reconnect=again,
        )
        self._set(server, "connected", None)

    def _set(self, server: _Server, state: str, error: str | None) -> None:
        if (state, error) != (server.state, server.error):
            server.since = time.time()
        server.state, server.error = state, error
        metrics.mcp_server_up(server.config.name, state == "connected")
        self._changed()

    def _listed(self, server: _Server, tools: list[types.Tool]) -> None:
        name = server.config.name
        infos, skipped = kept(name, tools)
        before = server.tools
        server.tools = infos
        self._changed()
        if before == infos:
            return
        if skipped:
            log.warning("mcp.tools_skipped", server=name, tools=skipped[:20], count=len(skipped))
        old = {t.name for t in before or ()}
        new = {t.name for t in infos}
        log.info(
            "mcp.tools_changed",
            server=name,
            tools=len(infos),
            added=sorted(new - old),
            removed=sorted(old - new),
        )
        for callback in list(self._callbacks):
            try:
                callback(name)
            except Exception as exc:  # a listener's fault must not stop the supervisor
                log.error("mcp.callback_failed", server=name, error=describe(exc))


def _late(server: str, tool: str, seconds: float) -> str:
    shown = f"{seconds:g}"
    return f"MCP server {server!r}: tool {tool!r} did not answer within {shown} s"
