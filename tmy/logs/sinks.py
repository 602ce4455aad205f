"""Where rendered log lines go: buffered JSON lines, or readable lines on a terminal."""

from __future__ import annotations

import time
from typing import Any

import orjson
import structlog


class JsonLines:
    """Where rendered lines go: written through a buffer, flushed at most 0.2 s later.

    Flushing every line costs a system call per event (five per message); a
    terminal still gets each line at once. :func:`flush` (called by the daemon's
    ticker and at exit) bounds the delay when no further events arrive.
    """

    def __init__(self, stream: Any, interactive: bool) -> None:
        self.stream = stream
        self.interactive = interactive
        self.pending = 0
        self.last = time.time()  # the lines' own clock (a step back only delays a flush)

    def msg(self, line: bytes) -> None:
        self.write(line + b"\n")

    def write(self, line: bytes) -> None:
        """Write a rendered line that already ends in a newline (:func:`emit_event`)."""
        JsonLines.write_at(self, line, time.time())  # not an override (ConsoleLines)

    def write_at(self, line: bytes, now: float) -> None:
        """:meth:`write`, ``now`` being :func:`time.time` as the caller read it for the
        line's timestamp (one clock reading per line, not two)."""
        try:
            self.stream.write(line)
        except ValueError:  # the stream is closed (interpreter exit, a finished capture)
            return
        if self.interactive:
            self.stream.flush()
            return
        self.pending += 1
        if now - self.last > 0.2:
            self.flush(now)

    def flush(self, now: float | None = None) -> None:
        if self.pending:
            try:
                self.stream.flush()
            except ValueError:  # closed at interpreter exit
                pass
            self.pending = 0
        self.last = now or time.time()

    debug = info = warning = warn = error = critical = exception = fatal = log = msg


class ConsoleLines(JsonLines):
    """Readable lines for a person at a terminal (structlog's console renderer).

    The line is rendered to JSON first (the same redaction applies), then
    re-rendered: only ``serve`` on a terminal pays for it.
    """

    def __init__(self, stream: Any, colors: bool) -> None:
        super().__init__(stream, interactive=True)
        self.renderer = structlog.dev.ConsoleRenderer(colors=colors)

    def write(self, line: bytes) -> None:
        self.msg(line.rstrip(b"\n"))

    def write_at(self, line: bytes, now: float) -> None:
        self.write(line)

    def msg(self, line: bytes) -> None:
        try:
            event = orjson.loads(line)
            text = self.renderer(None, event.get("level", "info"), event)
        except Exception:  # never lose a line to the pretty printer
            text = line.decode("utf-8", errors="replace")
        super().write(text.encode("utf-8", errors="replace") + b"\n")

    debug = info = warning = warn = error = critical = exception = fatal = log = msg
