"""A stdio server's stderr, relayed into tmy's log: line by line, secrets masked, bounded.

Left to itself the SDK hands a stdio server tmy's own stderr, so whatever the server
writes there — its environment in a debug dump, the token tmy gave it in an error — reaches
the daemon's output (a terminal, journald) as it is, past :mod:`tmy.redact`. Instead each
stdio server writes into a pipe of its own (one for the server's lifetime, across its
restarts), read here: every line becomes an ``mcp.stderr`` log event (info), so the log
renderer masks the configured secrets, a line is cut at :data:`LINE_CHARS`, and a server
that floods it is logged at most :data:`BURST` lines per :data:`WINDOW` seconds (then one
``mcp.stderr_dropped`` with the count) — a crashing server cannot grow the log at its pace.
The last few lines are kept (:meth:`StderrRelay.tail`), so a server that dies during the
handshake says why in the supervisor's ``mcp.connect_failed`` and its state's ``error``.

The pipe also tells which processes are the server's: every one that still has it as its
stderr once the SDK has stopped the server is something the server started and left
running (a child that ignores the closed stdin); :meth:`StderrRelay.reap` ends them.
"""

from __future__ import annotations

import asyncio
import contextlib
import fcntl
import os
import signal
import struct
import termios
import time
from collections import deque
from typing import IO

from tmy import redact
from tmy.logs import get_logger

log = get_logger("tmy.mcp")

LINE_CHARS = 2000  # a longer line is cut
BURST = 50  # lines logged per WINDOW seconds, per server
WINDOW = 10.0
TAIL_LINES = 3  # lines kept for the error of a server that died
TAIL_CHARS = 500  # of them, at most (the end: a traceback's last line says most)
CLOSE_WAIT = 1.0  # seconds close() waits for the rest of the pipe
REAP_GRACE = 2.0  # seconds a process the server left gets between SIGTERM and SIGKILL
_CHUNK = 65536


class StderrRelay:
    """The pipe a stdio server's stderr goes to, and the task logging what comes out of it."""

    def __init__(self, server: str) -> None:
        self.server = server
        self.lines = 0  # lines read in all (logged or dropped)
        self.dropped = 0  # lines not logged in all (over the burst)
        self._tail: deque[str] = deque(maxlen=TAIL_LINES)
        self._file: IO[str] | None = None
        self._task: asyncio.Task[None] | None = None
        self._read_fd: int | None = None
        self._window_start = 0.0
        self._in_window = 0
        self._dropped_in_window = 0

    @property
    def file(self) -> IO[str]:
        """The write end, for the server process's stderr (opened on first use)."""
        if self._file is None:
            read_fd, write_fd = os.pipe()
            self._read_fd = read_fd
            self._file = os.fdopen(write_fd, "w")
            self._task = asyncio.create_task(self._relay(read_fd), name=f"mcp-stderr:{self.server}")
        return self._file

    def tail(self) -> str:
        """The last lines the server wrote (masked), joined and cut at :data:`TAIL_CHARS`:
        why it died, most likely."""
        text = " | ".join(self._tail)
        return text if len(text) <= TAIL_CHARS else "…" + text[-TAIL_CHARS:]

    def clear_tail(self) -> None:
        """Forget the lines kept so far (a new connection's failure is its own)."""
        self._tail.clear()

    async def settle(self, wait: float = CLOSE_WAIT) -> None:
        """Until the pipe holds nothing unread (at most ``wait`` seconds): what a process
        that just died wrote is in :meth:`tail`."""
        deadline = time.monotonic() + wait
        while self._read_fd is not None and time.monotonic() < deadline:
            try:
                unread = struct.unpack("i", fcntl.ioctl(self._read_fd, termios.FIONREAD, b"\0" * 4))
            except OSError:  # closed meanwhile: all was read
                return
            if not unread[0]:
                for _ in range(3):  # the read that took the last bytes: its lines, logged
                    await asyncio.sleep(0)
                return
            await asyncio.sleep(0.01)

    def holders(self) -> list[int]:
        """Other processes whose stderr is this pipe: the server's, and whatever they started
        (Linux ``/proc``; none elsewhere)."""
        if self._file is None:
            return []
        wanted = f"pipe:[{os.fstat(self._file.fileno()).st_ino}]"
        found = []
        me = os.getpid()
        with contextlib.suppress(OSError):
            for entry in os.scandir("/proc"):
                if not entry.name.isdigit() or int(entry.name) == me:
                    continue
                with contextlib.suppress(OSError):
                    if os.readlink(f"/proc/{entry.name}/fd/2") == wanted:
                        found.append(int(entry.name))
        return found

    async def reap(self, grace: float = REAP_GRACE) -> list[int]:
        """End what a stopped server left behind: each process still writing to this pipe
        gets SIGTERM, then SIGKILL after ``grace`` seconds (the SDK stops the server's own
        process, but one of its children that ignores the closed stdin would live on)."""
        left = self.holders()
        if not left:
            return []
        log.warning("mcp.orphans", server=self.server, pids=left, why="the server left them")
        for sig in (signal.SIGTERM, signal.SIGKILL):
            for pid in left:
                with contextlib.suppress(ProcessLookupError, PermissionError):
                    os.kill(pid, sig)
            deadline = time.monotonic() + grace
            while time.monotonic() < deadline and (alive := self.holders()):
                left = alive
                await asyncio.sleep(0.05)
            left = self.holders()
            if not left:
                break
        return left

    async def aclose(self) -> None:
        """Close tmy's write end; log what is left in the pipe (within CLOSE_WAIT)."""
        if self._file is not None:
            self._file.close()
        task = self._task
        if task is None:
            return
        with contextlib.suppress(TimeoutError, asyncio.CancelledError):
            await asyncio.wait_for(asyncio.shield(task), CLOSE_WAIT)
        if not task.done():  # a process still holding the pipe (it outlived its group?)
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)

    async def _relay(self, read_fd: int) -> None:
        loop = asyncio.get_running_loop()
        reader = asyncio.StreamReader(limit=_CHUNK)
        pipe = os.fdopen(read_fd, "rb", buffering=0)
        transport, _ = await loop.connect_read_pipe(
            lambda: asyncio.StreamReaderProtocol(reader), pipe
        )
        pending = b""
        try:
            while chunk := await reader.read(_CHUNK):
                *whole, pending = (pending + chunk).split(b"\n")
                for line in whole:
                    self._line(line)
                if len(pending) > LINE_CHARS * 4:  # a "line" without end: log what came
                    self._line(pending)
                    pending = b""
            if pending:
                self._line(pending)
            self._summarise()
        finally:
            self._read_fd = None
            transport.close()

    def _line(self, raw: bytes) -> None:
        text = raw.decode("utf-8", errors="replace").rstrip("\r")
        if not text.strip():
            return
        if len(text) > LINE_CHARS:
            text = text[:LINE_CHARS] + "…"
        self.lines += 1
        self._tail.append(redact.redact(text))
        now = time.monotonic()
        if now - self._window_start >= WINDOW:
            self._summarise()
            self._window_start, self._in_window = now, 0
        if self._in_window >= BURST:
            self.dropped += 1
            self._dropped_in_window += 1
            return
        self._in_window += 1
        log.info("mcp.stderr", server=self.server, line=text)  # the renderer masks secrets

    def _summarise(self) -> None:
        if self._dropped_in_window:
            log.warning(
                "mcp.stderr_dropped",
                server=self.server,
                lines=self._dropped_in_window,
                why=f"more than {BURST} lines in {WINDOW:g} s",
            )
            self._dropped_in_window = 0
