"""Guarding the one HTTP listener against clients that hold connections and send nothing.

A connection costs a file descriptor from accept to close. Without a deadline,
a client that connects and stays silent — or trickles a header one byte every
few seconds (slowloris) — holds its descriptor forever, and a thousand of them
exhaust the process's open-file limit: no new HTTP request, no OneBot
reconnect, no outbound HTTP step, and asyncio logs an ``accept()`` traceback
per attempt. On loopback every client shares one address, so a per-address
cap cannot tell the attacker from the operator's own tools; what tells them
apart is that a real client *completes a request* promptly.

:class:`ConnectionGuard` therefore tracks every connection of the listener
(through the aiohttp ``Server``'s ``connection_made``/``connection_lost``
hooks) in one of three states:

* **fresh** — accepted, no request header completed yet: closed when
  ``header_timeout`` passes; also a connection whose header arrived but whose
  body is still on the way (**reading**: no header deadline any more, the
  body's own ``body_timeout`` applies) — it has proven nothing yet, so it
  stays among the connections that give way first;
* **busy** — a whole request has arrived and is being handled (or a WebSocket
  was upgraded): never closed by the guard (the handler's own limits apply);
* **idle** — between two requests of a keep-alive connection: closed when
  ``keepalive_timeout`` passes without a new request.

At ``max_connections`` open connections a new one makes room by closing the
oldest fresh connection, else the longest-idle one; when every connection is
busy the new one is closed. Connections already serving requests — OneBot
WebSockets, a webhook being answered, an authenticated client mid-request —
are never the ones that give way. The cap is further held to half the
process's soft open-file limit, so the listener alone can never starve the
store, the log and outbound steps of descriptors.

Closings and refusals are counted (``tmy_http_refused_total{reason}``) and
logged as one ``http.refused`` warning per :data:`REPORT_EVERY` seconds with the
counts per reason, not one line per connection: an attack must not be able to
grow the log at its own pace.
"""

from __future__ import annotations

import asyncio
import resource
from collections import Counter, OrderedDict
from typing import Any

from tmy import metrics
from tmy.logs import get_logger

log = get_logger("tmy.adapter.http")

REPORT_EVERY = 10.0  # seconds between two summary lines of closed connections
FD_SHARE = 2  # the listener may hold at most 1/FD_SHARE of the soft open-file limit


def open_file_limits() -> tuple[int, int]:
    """(soft, hard) RLIMIT_NOFILE of this process (RLIM_INFINITY as -1)."""
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return soft, hard


def raise_open_file_limit() -> dict[str, int]:
    """Raise the soft open-file limit to the hard one (``serve`` does this at start).

    The common default soft limit of 1,024 is far below what the kernel allows
    the process (the hard limit); raising it costs nothing and leaves room for
    connections, store sockets and log files. An unlimited hard limit (macOS)
    is not a value the soft limit can take: the soft limit then rises to
    1,048,576 (or stays as it is if that is refused). Returns the values to log.
    """
    soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    before = soft
    target = hard if hard != resource.RLIM_INFINITY else 1 << 20
    if soft != resource.RLIM_INFINITY and soft < target:
        try:
            resource.setrlimit(resource.RLIMIT_NOFILE, (target, hard))
        except (ValueError, OSError):
            pass  # the soft limit stays as it was; the listener's cap follows it
        soft, hard = resource.getrlimit(resource.RLIMIT_NOFILE)
    return {"soft_before": before, "soft": soft, "hard": hard}


def listen_backlog(max_connections: int) -> int:
    """The listen socket's accept queue: room for ``max_connections`` connecting at once.

    aiohttp's default is 128. A burst of connects beyond what the queue holds
    (a thousand clients at once) overflows it, and the kernel drops the
    overflowing handshakes: each of those clients waits for its SYN retransmit
    (1 s, then 3 s …) before it is even accepted. Measured on loopback, 1,000
    concurrent ``POST /v1/messages`` overflowed a 128 queue 261 times and took
    1.7 s instead of 1.0 s. The kernel caps the value at ``net.core.somaxconn``
    (4,096 on current Linux), so asking for more costs nothing.
    """
    return max(128, max_connections)


def effective_max_connections(configured: int) -> int:
    """``configured``, held to half the soft open-file limit (at least 16)."""
    soft, _ = open_file_limits()
    if soft == resource.RLIM_INFINITY or soft <= 0:
        return configured
    return max(16, min(configured, soft // FD_SHARE))


class _Conn:
    __slots__ = ("handler", "state")

    def __init__(self, handler: Any) -> None:
        self.handler = handler
        self.state = "fresh"


class _Deadlines:
    """Connections waiting out one fixed timeout, oldest first, on ONE loop timer.

    A timer per connection put a thousand connecting clients in the event loop's
    heap twice (their header deadline, then their keep-alive one), each push and
    each cancelled entry's removal a dozen Python-level comparisons. The timeout
    is the same for all, so their deadlines come in the order they were added:
    the timer waits for the oldest, expires every connection then due and waits
    for the next.
    """

    __slots__ = ("_due", "_expire", "_loop", "_timer", "reason", "timeout")

    def __init__(self, timeout: float, reason: str, expire: Any) -> None:
        self.timeout = timeout
        self.reason = reason
        self._expire = expire  # called as expire(handler, reason) at the deadline
        self._due: OrderedDict[Any, float] = OrderedDict()  # handler -> loop time, in order
        self._timer: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None

    def add(self, handler: Any) -> None:
        """``handler``'s deadline is ``timeout`` from now (a previous one is dropped)."""
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
        self._due.pop(handler, None)
        at = self._due[handler] = loop.time() + self.timeout
        if self._timer is None:
            self._timer = loop.call_at(at, self._fire)

    def discard(self, handler: Any) -> None:
        self._due.pop(handler, None)  # its timer, if it was the oldest, finds the next one

    def close(self) -> None:
        if self._timer is not None:
            self._timer.cancel()
            self._timer = None
        self._due.clear()

    def _fire(self) -> None:
        self._timer = None
        assert self._loop is not None
        now = self._loop.time() + 0.001  # the loop runs a timer up to its clock's resolution early
        due = self._due
        while due:
            handler, at = next(iter(due.items()))
            if at > now:
                self._timer = self._loop.call_at(at, self._fire)
                return
            del due[handler]
            self._expire(handler, self.reason)


class ConnectionGuard:
    """Every open connection of one listener, with its deadline; see the module docstring."""

    def __init__(
        self,
        *,
        header_timeout: float,
        keepalive_timeout: float,
        max_connections: int,
    ) -> None:
        self.header_timeout = header_timeout
        self.keepalive_timeout = keepalive_timeout
        self.max_connections = max_connections
        self._conns: dict[Any, _Conn] = {}
        # waiting for a (first / next) request, oldest first: who gives way at the cap
        self._fresh: OrderedDict[Any, _Conn] = OrderedDict()
        self._idle: OrderedDict[Any, _Conn] = OrderedDict()
        self._closed: Counter[str] = Counter()  # reason -> closings since the last report
        self._reporter: asyncio.TimerHandle | None = None
        self._loop: asyncio.AbstractEventLoop | None = None
        self._header_due = _Deadlines(header_timeout, "header_timeout", self._expire)
        self._keepalive_due = _Deadlines(keepalive_timeout, "keepalive_timeout", self._expire)

    # -- what the listener reports --------------------------------------------------------------

    @property
    def open(self) -> int:
        return len(self._conns)

    def counts(self) -> dict[str, int]:
        busy = len(self._conns) - len(self._fresh) - len(self._idle)
        return {"open": len(self._conns), "fresh": len(self._fresh), "idle": len(self._idle),
                "busy": busy, "max": self.max_connections}  # fmt: skip

    # -- hooks ----------------------------------------------------------------------------------

    def attach(self, server: Any) -> None:
        """Follow every connection of aiohttp's low-level ``Server`` (after ``runner.setup()``).

        ``Server.connection_made``/``connection_lost`` are the calls each
        connection's protocol makes on its manager; wrapping them on this one
        server instance is the one place every accepted socket passes through.
        """
        made, lost = server.connection_made, server.connection_lost

        def connection_made(handler: Any, transport: Any) -> None:
            made(handler, transport)
            self._opened(handler)

        def connection_lost(handler: Any, exc: BaseException | None = None) -> None:
            self._forget(handler)
            lost(handler, exc)

        server.connection_made = connection_made
        server.connection_lost = connection_lost

    def request_reading(self, handler: Any) -> None:
        """A request's header is complete; its body may still be on the way.

        Until the whole request has arrived the connection has proven nothing
        (a client may send a header and withhold the body): it stays among the
        fresh connections, newest last, so at the cap it gives way before any
        connection serving a request. The header deadline is over; the
        middleware bounds the body with ``body_timeout``.
        """
        conn = self._conns.get(handler)
        if conn is None:
            return
        self._idle.pop(handler, None)
        self._header_due.discard(handler)
        self._keepalive_due.discard(handler)
        conn.state = "reading"
        self._fresh.pop(handler, None)
        self._fresh[handler] = conn

    def request_started(self, handler: Any) -> None:
        """The whole request has arrived and is being handled: no deadline while busy."""
        conn = self._conns.get(handler)
        if conn is None:
            return
        self._fresh.pop(handler, None)
        self._idle.pop(handler, None)
        conn.state = "busy"
        self._header_due.discard(handler)
        self._keepalive_due.discard(handler)

    def request_finished(self, handler: Any) -> None:
        """The handler returned: the connection waits for its next request, for a while."""
        conn = self._conns.get(handler)
        if conn is None or conn.state not in ("busy", "reading"):
            return
        self._fresh.pop(handler, None)  # refused while reading
        conn.state = "idle"
        self._idle[handler] = conn
        self._keepalive_due.add(handler)

    def close_all(self) -> None:
        """Stop the report timer (the runner closes the connections themselves)."""
        if self._reporter is not None:
            self._reporter.cancel()
            self._reporter = None
        self._report()
        self._header_due.close()
        self._keepalive_due.close()

    # -- internals ------------------------------------------------------------------------------

    def _later(self, delay: float, callback: Any, *args: Any) -> asyncio.TimerHandle:
        loop = self._loop or asyncio.get_running_loop()
        self._loop = loop
        return loop.call_later(delay, callback, *args)

    def _opened(self, handler: Any) -> None:
        if len(self._conns) >= self.max_connections and not self._make_room():
            # every open connection is serving a request: this one cannot be taken
            self.count("max_connections")
            (self._loop or asyncio.get_running_loop()).call_soon(handler.force_close)
            return
        conn = _Conn(handler)
        self._conns[handler] = conn
        self._fresh[handler] = conn
        self._header_due.add(handler)

    def _make_room(self) -> bool:
        """Close the oldest connection that has sent no request (else the longest idle)."""
        for queue, reason in ((self._fresh, "evicted_fresh"), (self._idle, "evicted_idle")):
            if queue:
                handler = next(iter(queue))
                self._close(handler, reason)
                return True
        return False

    def _expire(self, handler: Any, reason: str) -> None:
        conn = self._conns.get(handler)
        if conn is None or conn.state in ("busy", "reading"):
            return
        self._close(handler, reason)

    def _close(self, handler: Any, reason: str) -> None:
        self._forget(handler)
        self.count(reason)
        try:
            handler.force_close()
        except Exception:  # a transport already gone: nothing left to close
            pass

    def _forget(self, handler: Any) -> None:
        conn = self._conns.pop(handler, None)
        self._fresh.pop(handler, None)
        self._idle.pop(handler, None)
        if conn is not None:
            self._header_due.discard(handler)
            self._keepalive_due.discard(handler)

    def count(self, reason: str) -> None:
        """One closing or refusal for ``reason``: a metric now, a summary line later."""
        metrics.http_refused(reason)
        self._closed[reason] += 1
        if self._reporter is None:
            self._reporter = self._later(REPORT_EVERY, self._report)

    def _report(self) -> None:
        """One warning line for every closing since the last one (an attack is not a log flood)."""
        self._reporter = None
        if not self._closed:
            return
        counts = dict(self._closed)
        self._closed.clear()
        log.warning(
            "http.refused",
            counts=counts,
            seconds=REPORT_EVERY,
            **{k: v for k, v in self.counts().items() if k in ("open", "max")},
        )
