"""The daemon's MCP tool servers: kept connected, their tools known, their calls bounded.

:class:`Servers` is entered in the MCP extension's lifespan. It starts one supervisor
task per configured server (:class:`tmy.mcp.supervisor.Supervisor`: connect, list, watch,
connect again after a growing pause) and returns at once; the daemon serves while servers
connect. Calls to one server never wait on another.

A call to a server that is not connected right now (it crashed, it was restarted, it
has not come up yet) does not wait out the supervisor's growing pause: it ends it, so an
attempt to connect starts now — a stdio server is spawned again on demand — and waits
for that attempt: a server that is back answers this very call. The wait is at most
:data:`RECONNECT_WAIT` seconds (5), and never more than the call's own timeout, which it
counts against. Calls waiting together share the attempt. A server still down fails the
call as soon as the attempt fails (a refused connection: at once) with an :class:`McpError`
saying why (``MCP server 'web' is not connected (reconnecting: ConnectError: …)``), or
after the 5 s (``…; waited 5 s for it``); calls to other servers are untouched.

A call gets the server's ``timeout`` (or its own): past it, it fails alone with
:class:`McpTimeout` (``MCP server 'x': tool 'slow' did not answer within 2 s``) and
the server is told to cancel it. A streamable HTTP session the server has forgotten
(404 to a request with ``Mcp-Session-Id``, e.g. after a restart) is replaced by a new
one, and the call — which the server never ran — is sent once more within its time.
What a tool says back has tmy's configured secrets masked (:mod:`tmy.mcp.results`).

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
from tmy.errors import TmyError
from tmy.hints import did_you_mean
from tmy.logs import get_logger
from tmy.mcp.config import McpConfig
from tmy.mcp.connection import Connection, describe
from tmy.mcp.listing import ToolInfo
from tmy.mcp.results import DEFAULT_MAX_RESULT_CHARS, CallResult, to_result
from tmy.mcp.supervisor import Supervisor

if TYPE_CHECKING:  # deferred: the SDK is ~0.5 s of every CLI start (tmy.mcp.connection)
    import mcp_types as types
    from mcp.shared.exceptions import MCPError

__all__ = ["CallResult", "McpError", "McpTimeout", "Servers", "ToolInfo"]

log = get_logger("tmy.mcp")

RECONNECT_WAIT = 5.0  # seconds a call waits for a server that is not connected (see above)
STOP_GRACE = 10.0  # seconds __aexit__ waits for supervisors before cancelling them
CALL_GRACE = 2.0  # past the SDK's own timeout, a call is cut off here regardless


class McpError(TmyError):
    """An MCP call failed: unknown server, server down, timeout, protocol error (one line)."""


class McpTimeout(McpError):
    """A call passed its timeout (the server was told to cancel it)."""


class Servers:
    """The configured MCP servers, each kept connected by its own supervisor task."""

    def __init__(
        self, config: McpConfig, *, max_result_chars: int = DEFAULT_MAX_RESULT_CHARS
    ) -> None:
        self._servers = {
            name: Supervisor(cfg, self._changed, self._tools_changed)
            for name, cfg in config.servers.items()
        }
        self._max_result_chars = max_result_chars
        self._callbacks: list[Callable[[str], None]] = []
        self._stopping = False
        self._tick = asyncio.Event()  # set (and replaced) on every state or tool list change

    async def __aenter__(self) -> Servers:
        for server in self._servers.values():
            server.task = asyncio.create_task(server.run(), name=f"mcp:{server.config.name}")
        return self

    async def __aexit__(
        self,
        exc_type: type[BaseException] | None,
        exc: BaseException | None,
        tb: TracebackType | None,
    ) -> None:
        self._stopping = True
        for server in self._servers.values():
            server.stop()
        self._changed()  # calls waiting for a connection give up
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

    def _get(self, name: str) -> Supervisor:
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

    def _tools_changed(self, name: str) -> None:
        for callback in list(self._callbacks):
            try:
                callback(name)
            except Exception as exc:  # a listener's fault must not stop the supervisor
                log.error("mcp.callback_failed", server=name, error=describe(exc))

    # -- calling --------------------------------------------------------------------------

    async def call(
        self, server: str, tool: str, arguments: dict[str, Any], timeout: float | None = None
    ) -> CallResult:
        """Call ``tool`` on ``server``; McpError when it cannot be had (see the module's doc)."""
        target = self._get(server)
        limit = target.config.timeout if timeout is None else timeout
        deadline = time.monotonic() + limit
        conn = target.usable() or await self._connection(target, deadline)
        started = time.perf_counter()
        try:
            raw = await self._send(target, conn, tool, arguments, limit, deadline)
        except McpError as exc:
            outcome = "timeout" if isinstance(exc, McpTimeout) else "error"
            metrics.mcp_call(server, outcome, time.perf_counter() - started)
            log.warning("mcp.call_failed", server=server, tool=tool, error=str(exc))
            raise
        result = to_result(raw, self._max_result_chars)
        if conn is target.conn:
            target.served = True  # the server did work: its pause is reset when it is lost
        outcome = "tool_error" if result.is_error else "ok"
        metrics.mcp_call(server, outcome, time.perf_counter() - started)
        return result

    async def _connection(self, target: Supervisor, deadline: float) -> Connection:
        """A server that is not connected, connected now: its supervisor woken to try at once,
        waited for up to RECONNECT_WAIT seconds within ``deadline`` (McpError past it)."""
        bound = max(0.0, min(RECONNECT_WAIT, deadline - time.monotonic()))
        started = time.monotonic()
        conn = await self._next(target, None, bound)
        if conn is None:
            name = target.config.name
            metrics.mcp_call(name, "down")
            why = f": {target.error}" if target.error else ""
            waited = time.monotonic() - started >= bound and not self._stopping
            more = f"; waited {bound:.3g} s for it" if waited else ""
            raise McpError(f"MCP server {name!r} is not connected ({target.state}{why}){more}")
        return conn

    async def _next(
        self, target: Supervisor, old: Connection | None, wait: float
    ) -> Connection | None:
        """A usable connection other than ``old`` within ``wait`` seconds (None: the attempt
        made for it failed, or none came); the supervisor is told to connect now."""
        target.waiting += 1
        attempt = target.want()
        try:
            await self._until(
                lambda: (
                    self._stopping or target.ended >= attempt or target.usable() not in (None, old)
                ),
                wait,
            )
        finally:
            target.waiting -= 1
        found = target.usable()
        return None if self._stopping or found is old else found

    async def _send(
        self,
        target: Supervisor,
        conn: Connection,
        tool: str,
        arguments: dict[str, Any],
        limit: float,
        deadline: float,
    ) -> types.CallToolResult:
        import mcp_types as types  # deferred: the SDK is ~0.5 s of every CLI start
        from mcp.shared.exceptions import MCPError

        name = target.config.name
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

    async def _reconnected(
        self, target: Supervisor, old: Connection, deadline: float
    ) -> Connection:
        """The server's next connection after ``old`` ended, within ``deadline``."""
        conn = await self._next(target, old, deadline - time.monotonic())
        if conn is None:
            raise McpError(
                f"MCP server {target.config.name!r}: its session expired and a new one "
                f"could not be started in time ({target.error or target.state})"
            )
        return conn

    def _refused(self, target: Supervisor, tool: str, exc: MCPError) -> str:
        name = target.config.name
        known = [t.name for t in target.tools or ()]
        if target.tools is not None and tool not in known:
            return f"MCP server {name!r} has no tool {tool!r}{did_you_mean(tool, known)}"
        return f"MCP server {name!r}: tool {tool!r} failed: {describe(exc)}"


def _late(server: str, tool: str, seconds: float) -> str:
    shown = f"{seconds:g}"
    return f"MCP server {server!r}: tool {tool!r} did not answer within {shown} s"
