"""One MCP server kept connected: its live state, and the task that connects it again.

:class:`Supervisor` is one configured server's state (``starting``, ``connected``,
``reconnecting``, ``failed``; its tools, its live connection) and :meth:`Supervisor.run`,
the task :class:`tmy.mcp.servers.Servers` starts for it. The task loops: connect and
negotiate (:func:`tmy.mcp.connection.connect`), list the tools, watch the connection (tool
list changes re-list), and when it ends — the process exited, the HTTP server went away,
the session expired — connect again after a pause that grows (capped exponential backoff
with jitter).

A call that finds the server down does not wait out that pause: :meth:`Supervisor.want`
ends it, so the next attempt starts at once (a stdio server is spawned again on demand);
the call waits for that attempt's outcome (:attr:`Supervisor.ended` passing the count it
was given). Several waiting calls share one attempt. The pause is reset once a connection held for
:data:`STABLE` seconds *or* answered a call: a server restarted twice in a row is back to
short pauses as soon as it has done work, while one that crashes right after each connect
still backs off.
"""

from __future__ import annotations

import asyncio
import contextlib
import time
from collections.abc import Callable
from typing import TYPE_CHECKING, Any

from tmy import metrics
from tmy.backoff import Backoff
from tmy.logs import get_logger
from tmy.mcp.config import ServerConfig
from tmy.mcp.connection import Connection, connect, why_failed
from tmy.mcp.listing import ToolInfo, kept
from tmy.mcp.stderr import StderrRelay

if TYPE_CHECKING:  # deferred: the SDK is ~0.5 s of every CLI start (tmy.mcp.connection)
    import anyio
    import mcp_types as types

log = get_logger("tmy.mcp")

RETRY_BASE = 0.5  # seconds: the first pause before connecting a lost server again
RETRY_CAP = 30.0  # the longest pause between attempts
STABLE = 10.0  # a connection that held this long (or answered a call) resets the pause


class Supervisor:
    """One server's live state, written by its own task (:meth:`run`) only.

    ``changed()`` is called on every state or tool list change; ``tools_changed(name)``
    after each listing that differs from the one before.
    """

    def __init__(
        self,
        config: ServerConfig,
        changed: Callable[[], None],
        tools_changed: Callable[[str], None],
    ) -> None:
        self.config = config
        self.state = "starting"
        self.error: str | None = None
        self.since = time.time()
        self.reconnects = 0
        self.tools: list[ToolInfo] | None = None
        self.conn: Connection | None = None
        self.served = False  # the live connection answered a call (see STABLE)
        self.waiting = 0  # calls waiting for a connection (see want())
        self.started = 0  # connection attempts started
        self.ended = 0  # connection attempts over (failed, or connected and then lost)
        self.stopping = False
        self.task: asyncio.Task[None] | None = None
        self._scope: anyio.CancelScope | None = None  # the connect attempt, cancelled on stop
        self._wake = asyncio.Event()  # ends a pause between attempts (a call, stop)
        self._changed = changed
        self._tools_changed = tools_changed

    def view(self) -> dict[str, Any]:
        return {
            "state": self.state,
            "transport": self.config.transport,
            "tools": None if self.tools is None else len(self.tools),
            "error": self.error,
            "since": self.since,
            "reconnects": self.reconnects,
        }

    def usable(self) -> Connection | None:
        """The live connection, when there is one a call can use now."""
        conn = self.conn
        if conn is None or self.state != "connected" or conn.ended.is_set():
            return None
        return conn

    def want(self) -> int:
        """A call needs the server: end the pause, so an attempt starts now. The number
        :attr:`ended` reaches when that attempt is over (it may connect before)."""
        self._wake.set()
        return self.started + 1

    def stop(self) -> None:
        """Begin stopping: the pause ends, the connection (or the attempt) is closed."""
        self.stopping = True
        self._wake.set()
        if self.conn is not None:
            self.conn.end("tmy is stopping")  # a clean close: stdio stdin closed, HTTP DELETE
        elif self._scope is not None:
            self._scope.cancel()  # connecting: anyio's cancel keeps the SDK's shielded cleanup

    async def run(self) -> None:
        """Connect, list, watch; on an end, pause and connect again — until stopped."""
        relay = StderrRelay(self.config.name) if self.config.transport == "stdio" else None
        try:
            await self._loop(relay)
        finally:
            if relay is not None:
                await relay.aclose()
        metrics.mcp_server_up(self.config.name, False)

    async def _loop(self, relay: StderrRelay | None) -> None:
        backoff = Backoff(RETRY_BASE, RETRY_CAP)
        while not self.stopping:
            opened = time.monotonic()
            self._wake.clear()  # a call arriving from here on ends the pause below
            lost = await self._attempt(relay)
            if self.stopping:
                break
            if lost and (self.served or time.monotonic() - opened >= STABLE):
                backoff.reset()
            pause = backoff.next()
            if lost is None:  # the session expired: a new one at once
                pause = 0.0
            if self._wake.is_set() and not self.waiting:
                self._wake.clear()  # a call that came and went during the attempt
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(self._wake.wait(), pause)

    async def _attempt(self, relay: StderrRelay | None = None) -> bool | None:
        """One connection, start to end: True when it was connected and then lost (None when
        its HTTP session expired), False when it never connected."""
        import anyio  # deferred: the SDK is ~0.5 s of every CLI start

        name = self.config.name
        connected = False
        conn: Connection | None = None
        self.started += 1
        if relay is not None:
            relay.clear_tail()
        try:
            with anyio.CancelScope() as self._scope:
                errlog = relay.file if relay is not None else None
                async with connect(self.config, errlog) as conn:
                    tools = await conn.list_tools()
                    self.conn, self.served, connected = conn, False, True
                    self._scope = None  # from here on, stop ends the connection instead
                    self._connected(conn)
                    self._listed(tools)
                    await conn.run(self._listed)
            reason = conn.reason if conn is not None and conn.reason else "closed"
        except Exception as exc:
            reason = why_failed(exc, connected, self.config)
            if relay is not None and not connected:
                await relay.settle()  # what the process wrote before it died, read
                if relay.tail():
                    reason = f"{reason}; its stderr: {relay.tail()}"
        finally:
            self.conn = None
            self._scope = None
        if relay is not None:
            await relay.reap()  # what the stopped server left running
        self.ended += 1  # (the _set below tells waiting calls)
        if self.stopping:
            return connected
        if connected:
            log.info("mcp.disconnected", server=name, reason=reason)
            self._set("reconnecting", reason)
            return None if conn is not None and conn.session_expired else True
        log.warning("mcp.connect_failed", server=name, where=self.config.describe(), error=reason)
        self._set("failed" if self.state in ("starting", "failed") else "reconnecting", reason)
        return False

    def _connected(self, conn: Connection) -> None:
        name = self.config.name
        again = self.state == "reconnecting"
        if again:
            self.reconnects += 1
            metrics.mcp_reconnect(name)
        log.info(
            "mcp.connected",
            server=name,
            transport=self.config.transport,
            where=self.config.describe(),
            protocol=conn.protocol,
            reconnect=again,
        )
        self._set("connected", None)

    def _set(self, state: str, error: str | None) -> None:
        if (state, error) != (self.state, self.error):
            self.since = time.time()
        self.state, self.error = state, error
        metrics.mcp_server_up(self.config.name, state == "connected")
        self._changed()

    def _listed(self, tools: list[types.Tool]) -> None:
        name = self.config.name
        infos, skipped = kept(name, tools)
        before = self.tools
        self.tools = infos
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
        self._tools_changed(name)
