"""One live connection to one MCP server, over the official SDK's ``Client``.

:func:`connect` opens the transport a :class:`~tmy.mcp.config.ServerConfig` names —
stdio (the SDK spawns the command in its own process group and, on close, closes
its stdin, then SIGTERMs and SIGKILLs the group), streamable HTTP, or the older SSE —
negotiates the protocol version (``mode="auto"``: the 2026-07-28 ``server/discover``
probe, falling back to the ``initialize`` handshake) and yields a :class:`Connection`.
:meth:`Connection.run` then watches it until it ends:

- the end of the transport's read stream (a stdio server exited, an SSE stream
  closed) — seen by wrapping the read stream the SDK's dispatcher consumes, since
  the SDK offers no "closed" signal of its own;
- a tool list change: ``notifications/tools/list_changed`` on a handshake-era
  connection (through the message handler, from the first moment), a
  ``subscriptions/listen`` event on a 2026-07-28 one (listed once more when the
  subscription opens: a change before that was announced to no one). Either makes it
  list the tools again (every page) and report them — at most one listing per
  :data:`RELIST_PAUSE`: a change announced meanwhile is listed right after it;
- a request that found the HTTP session gone: a 404 answer to a request that carried
  ``Mcp-Session-Id`` (seen by an httpx event hook — the SDK turns it into an error
  whose text varies by server). The session is over; the caller reconnects, which
  starts a new one (the spec's recovery), and may resend a call the server never ran.

Who reconnects, and when, is :mod:`tmy.mcp.servers`; this module is one attempt.
The SDK's response cache is off: a tool list must be what the server says now.

The SDK (and anyio, httpx2, pydantic under it) is imported where it is used, not with
this module: it is ~0.5 s that a CLI command, or a bot without MCP servers, need not pay.
"""

from __future__ import annotations

import contextlib
import sys
from collections.abc import AsyncIterator, Callable
from typing import IO, TYPE_CHECKING, Any

from tmy import redact
from tmy.logs import get_logger
from tmy.mcp import bounded, hops
from tmy.mcp.config import ServerConfig

if TYPE_CHECKING:  # deferred: the SDK is ~0.5 s of every CLI start
    import httpx2
    import mcp_types as types
    from mcp import Client

log = get_logger("tmy.mcp")

MAX_LIST_PAGES = 100  # a paginator that never ends cannot hang the listing
SSE_READ_TIMEOUT = 300.0  # seconds an idle event stream stays open (the SDK's default)
CLIENT_NAME, CLIENT_VERSION = "tmy", "1"  # the clientInfo tmy gives servers
MAX_ERROR_CHARS = 500  # an error's text past this is cut (a validation error lists every field)
PROBE_INTERVAL = 30.0  # seconds between re-lists of a handshake-era HTTP server (see run())
LISTEN_RETRY = 1.0  # seconds before a change subscription that ended is opened again (doubling)
LISTEN_RETRY_CAP = 60.0
RELIST_PAUSE = 0.5  # seconds between two listings: a server announcing changes without end


class Connection:
    """An open session with one server: its client, and why it ended (once it has)."""

    def __init__(self, config: ServerConfig) -> None:
        import anyio  # deferred: the SDK is ~0.5 s of every CLI start

        self.config = config
        self.client: Client | None = None
        self.ended = anyio.Event()
        self.reason: str | None = None  # why it ended
        self.session_expired = False  # an HTTP request carrying Mcp-Session-Id was answered 404
        self._changed = anyio.Event()

    @property
    def protocol(self) -> str:
        return self.client.protocol_version if self.client is not None else ""

    def end(self, reason: str) -> None:
        """Mark the connection over (the first reason wins); :meth:`run` returns."""
        if not self.ended.is_set():
            self.reason = reason
            self.ended.set()

    async def call(
        self, tool: str, arguments: dict[str, Any], timeout: float
    ) -> types.CallToolResult:
        """``tools/call``; the SDK answers MCPError(REQUEST_TIMEOUT) after ``timeout`` seconds
        (and tells the server the request is cancelled)."""
        import mcp_types as types  # deferred: the SDK is ~0.5 s of every CLI start
        from mcp.shared.exceptions import MCPError

        if self.client is None:  # closed between the caller's look and now
            raise MCPError(types.CONNECTION_CLOSED, "Connection closed")
        return await self.client.call_tool(
            tool, arguments, read_timeout_seconds=timeout, meta=hops.outgoing()
        )

    async def list_tools(self) -> list[types.Tool]:
        """Every tool the server offers, all pages."""
        assert self.client is not None
        tools: list[types.Tool] = []
        cursor: str | None = None
        for _ in range(MAX_LIST_PAGES):
            page = await self.client.list_tools(cursor=cursor, cache_mode="bypass")
            tools.extend(page.tools)
            cursor = page.next_cursor
            if not cursor:
                break
        return tools

    async def run(self, listed: Callable[[list[types.Tool]], None]) -> None:
        """Watch the connection until it ends, re-listing tools on each announced change.

        A handshake-era streamable HTTP server that dies says nothing (the SDK's event
        stream gives up quietly), so such a connection is also re-listed every
        :data:`PROBE_INTERVAL` seconds: a server gone, or one that forgot the session,
        ends it there rather than at the next call.
        """
        import anyio  # deferred: the SDK is ~0.5 s of every CLI start
        from mcp_types.version import MODERN_PROTOCOL_VERSIONS

        async with anyio.create_task_group() as tg:
            if self.protocol in MODERN_PROTOCOL_VERSIONS:
                tg.start_soon(self._listen)
            elif self.config.transport == "http":
                tg.start_soon(self._probe)
            tg.start_soon(self._refresh, listed)
            await self.ended.wait()
            tg.cancel_scope.cancel()

    async def _refresh(self, listed: Callable[[list[types.Tool]], None]) -> None:
        import anyio  # deferred: the SDK is ~0.5 s of every CLI start

        while True:
            await self._changed.wait()
            self._changed = anyio.Event()
            try:
                tools = await self.list_tools()
            except Exception as exc:  # the server went away mid-list: the connection is over
                self.end(f"listing tools failed: {describe(exc)}")
                return
            listed(tools)
            await anyio.sleep(RELIST_PAUSE)  # changes meanwhile: one listing after the pause

    async def _probe(self) -> None:
        import anyio  # deferred: the SDK is ~0.5 s of every CLI start

        while True:
            await anyio.sleep(PROBE_INTERVAL)
            self._changed.set()

    async def _listen(self) -> None:
        """2026-07-28: a ``subscriptions/listen`` stream for tool list changes, opened again
        (after a growing pause, with a re-list: events are not replayed) when it ends.

        Each time it opens (the server acknowledged it), the tools are listed once more: a
        change between the last listing and now was announced to no one."""
        import anyio  # deferred: the SDK is ~0.5 s of every CLI start
        import mcp_types as types
        from mcp.client.subscriptions import ListenNotSupportedError, SubscriptionLost
        from mcp.shared.exceptions import MCPError

        assert self.client is not None
        pause, opened = LISTEN_RETRY, False
        while True:
            try:
                async with self.client.listen(tools_list_changed=True) as subscription:
                    opened, pause = True, LISTEN_RETRY
                    self._changed.set()
                    async for _event in subscription:
                        self._changed.set()
            except ListenNotSupportedError:
                return
            except MCPError as exc:
                if not opened and exc.code == types.METHOD_NOT_FOUND:
                    log.debug("mcp.listen_refused", server=self.config.name, error=describe(exc))
                    return
                log.debug("mcp.listen_lost", server=self.config.name, error=describe(exc))
            except (SubscriptionLost, TimeoutError) as exc:
                log.debug("mcp.listen_lost", server=self.config.name, error=describe(exc))
            if opened:
                self._changed.set()  # changes meanwhile are not replayed (a dead server fails it)
            await anyio.sleep(pause)
            pause = min(pause * 2, LISTEN_RETRY_CAP)

    async def _on_message(self, message: Any) -> None:
        """The SDK's message handler: server notifications, and transport errors as values."""
        import mcp_types as types  # deferred: the SDK is ~0.5 s of every CLI start

        if isinstance(message, types.ToolListChangedNotification):
            self._changed.set()
        elif isinstance(message, Exception):
            log.debug("mcp.transport_error", server=self.config.name, error=describe(message))

    async def _on_response(self, response: httpx2.Response) -> None:
        from mcp.client.streamable_http import MCP_SESSION_ID  # deferred: the SDK is ~0.5 s

        if response.status_code == 404 and response.request.headers.get(MCP_SESSION_ID):
            self.session_expired = True


class _WatchedRead:
    """The transport's read stream, telling the connection when it ends (EOF or closed)."""

    def __init__(self, inner: Any, connection: Connection) -> None:
        self._inner = inner
        self._connection = connection

    @property
    def last_context(self) -> Any:
        return getattr(self._inner, "last_context", None)

    def _closed(self) -> None:
        self._connection.end("the server closed the connection")

    async def receive(self) -> Any:
        import anyio  # deferred: the SDK is ~0.5 s of every CLI start

        try:
            return await self._inner.receive()
        except (anyio.EndOfStream, anyio.ClosedResourceError, anyio.BrokenResourceError):
            self._closed()
            raise

    def close(self) -> None:
        self._inner.close()

    async def aclose(self) -> None:
        await self._inner.aclose()

    def __aiter__(self) -> _WatchedRead:
        return self

    async def __anext__(self) -> Any:
        import anyio  # deferred: the SDK is ~0.5 s of every CLI start

        try:
            return await self.receive()
        except anyio.EndOfStream:
            raise StopAsyncIteration from None

    async def __aenter__(self) -> _WatchedRead:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self._inner.aclose()


@contextlib.asynccontextmanager
async def _watched(transport: Any, connection: Connection) -> AsyncIterator[Any]:
    async with transport as (read, write):
        yield _WatchedRead(read, connection), write
    connection.end("the connection was closed")


def _transport(config: ServerConfig, connection: Connection, errlog: IO[str] | None) -> Any:
    """The SDK transport for ``config`` (an async context manager of the stream pair);
    ``errlog``: where a stdio server's stderr goes (tmy's own when None)."""
    import httpx2  # deferred: the SDK is ~0.5 s of every CLI start
    from mcp.client.sse import sse_client
    from mcp.client.stdio import StdioServerParameters, stdio_client
    from mcp.client.streamable_http import streamable_http_client

    if config.transport == "stdio":
        assert config.command is not None
        params = StdioServerParameters(
            command=config.command,
            args=list(config.args),
            env=dict(config.env) or None,
            cwd=config.cwd,
        )
        return stdio_client(params, errlog=errlog if errlog is not None else sys.stderr)
    assert config.url is not None
    timeout = httpx2.Timeout(config.timeout, read=SSE_READ_TIMEOUT)
    hooks = {"response": [connection._on_response]}
    if config.transport == "sse":

        def factory(
            headers: Any = None, timeout: Any = None, auth: Any = None
        ) -> httpx2.AsyncClient:
            return httpx2.AsyncClient(
                headers=headers,
                timeout=timeout,
                auth=auth,
                event_hooks=hooks,
                transport=bounded.transport(),
            )

        return sse_client(
            config.url,
            headers=dict(config.headers),
            timeout=config.timeout,
            sse_read_timeout=SSE_READ_TIMEOUT,
            httpx_client_factory=factory,
        )
    http = httpx2.AsyncClient(
        headers=dict(config.headers),
        timeout=timeout,
        event_hooks=hooks,
        transport=bounded.transport(),
    )
    return _owning(http, streamable_http_client(config.url, http_client=http))


@contextlib.asynccontextmanager
async def _owning(http: httpx2.AsyncClient, transport: Any) -> AsyncIterator[Any]:
    """``transport`` with the HTTP client it was given closed after it."""
    async with http, transport as streams:
        yield streams


@contextlib.asynccontextmanager
async def connect(config: ServerConfig, errlog: IO[str] | None = None) -> AsyncIterator[Connection]:
    """Open and negotiate one session with the server of ``config``; closed on exit
    (a stdio server's process is stopped, an HTTP session is ended with DELETE).
    ``errlog``: a stdio server's stderr (:class:`tmy.mcp.stderr.StderrRelay`'s pipe)."""
    import mcp_types as types  # deferred: the SDK is ~0.5 s of every CLI start
    from mcp import Client

    connection = Connection(config)
    client = Client(
        _watched(_transport(config, connection, errlog), connection),
        mode="auto",
        cache=None,
        read_timeout_seconds=config.timeout,
        message_handler=connection._on_message,
        client_info=types.Implementation(name=CLIENT_NAME, version=CLIENT_VERSION),
    )
    async with client:
        connection.client = client
        try:
            yield connection
        finally:
            connection.end("closed by tmy")
            connection.client = None


def describe(exc: BaseException) -> str:
    """A one-line account of ``exc`` (the first leaf of an exception group), secrets masked."""
    from mcp.shared.exceptions import MCPError  # deferred: the SDK is ~0.5 s of every CLI start

    while isinstance(exc, BaseExceptionGroup) and exc.exceptions:
        exc = exc.exceptions[0]
    if isinstance(exc, MCPError):
        text = exc.message
    else:
        text = str(exc) or type(exc).__name__
        if type(exc).__module__.startswith(("httpx", "anyio", "ssl")) or isinstance(exc, OSError):
            text = f"{type(exc).__name__}: {text}"
    text = redact.redact(" ".join(text.split()))  # before the cut, which could split a secret
    return text if len(text) <= MAX_ERROR_CHARS else text[:MAX_ERROR_CHARS] + "…"


def why_failed(exc: Exception, connected: bool, config: ServerConfig) -> str:
    """Why a connection attempt failed, worded for the handshake's two common failures."""
    import mcp_types as types  # deferred: the SDK is ~0.5 s of every CLI start
    from mcp.shared.exceptions import MCPError

    leaf: BaseException = exc
    while isinstance(leaf, BaseExceptionGroup) and leaf.exceptions:
        leaf = leaf.exceptions[0]
    if not connected and isinstance(leaf, MCPError):
        if leaf.code == types.CONNECTION_CLOSED:
            return "the server closed the connection during the handshake"  # (+ its stderr)
        if leaf.code == types.REQUEST_TIMEOUT:  # (the SDK's discover probe waits 10 s of its own)
            return "the server did not answer the handshake in time"
    return describe(exc)
