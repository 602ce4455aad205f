"""Where rendered log lines go: buffered JSON lines, or readable lines on a terminal."""

from __future__ import annotations

from collections.abc import Callable
from typing import Any

import orjson
import structlog


class JsonLines:
    """Where rendered lines go: written through a buffer, flushed at most 0.2 s later.

    Flushing every line costs a system call per event (five per message), so a file
    or pipe gets its lines through its buffer: :func:`tmy.logs.flush` pushes them out
    — every 0.2 s while an App is open (its ticker: ``serve``, ``chat``, ``ask``),
    before :mod:`tmy.tracelog` reads, and at exit. Code logging with no App open
    gets its lines out as the buffer fills and at exit. A terminal gets each line at
    once.

    :attr:`out` is what a rendered line is handed to: the stream's own ``write`` for a
    file or pipe — no Python frame per line (an FAQ answer's line used to spend a
    quarter of its cost in this class's bookkeeping) — else :meth:`write`. A log file
    that logrotate moved is opened anew at a flush (:mod:`tmy.logs.logfile`), whose
    ``write`` is then taken again; a line handed to the old one, closed meanwhile,
    raises ValueError, and its writer hands it to :meth:`write` instead.
    """

    def __init__(self, stream: Any, interactive: bool) -> None:
        self.stream = stream
        self.interactive = interactive
        self.out: Callable[[bytes], Any] = self.write if interactive else stream.write

    def msg(self, line: bytes) -> None:
        self.write(line + b"\n")

    def write(self, line: bytes) -> None:
        """Write a rendered line that already ends in a newline (:func:`emit_event`)."""
        try:
            self.stream.write(line)
            if self.interactive:
                self.stream.flush()
        except ValueError:  # the stream is closed (interpreter exit, a finished capture)
            pass

    def flush(self) -> None:
        try:
            self.stream.flush()
        except ValueError:  # closed at interpreter exit
            pass
        if not self.interactive:  # a log file moved away is opened anew by its flush
            self.out = self.stream.write

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

    def msg(self, line: bytes) -> None:
        try:
            event = orjson.loads(line)
            text = self.renderer(None, event.get("level", "info"), event)
        except Exception:  # never lose a line to the pretty printer
            text = line.decode("utf-8", errors="replace")
        JsonLines.write(self, text.encode("utf-8", errors="replace") + b"\n")

    debug = info = warning = warn = error = critical = exception = fatal = log = msg
