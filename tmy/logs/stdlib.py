"""What libraries log through the standard ``logging``: redacted, and repeats rate-limited.

The daemon's own lines never pass through ``logging`` (:mod:`tmy.logs` renders them);
:func:`tmy.logs.configure` puts these two filters on the root logger's handlers so the
lines libraries write there get the same redaction and repeat limit.
"""

from __future__ import annotations

import logging
from collections.abc import Callable

from tmy import redact
from tmy.logs.repeats import RepeatLimiter


class Repeats(logging.Filter):
    """Libraries' identical warnings and errors (asyncio's accept() traceback): rate-limited.

    Identical means the same logger, level, message and exception (type and
    text; the traceback of a line repeated in a loop is the same too).
    """

    def __init__(self, limiter: Callable[[], RepeatLimiter]) -> None:
        """``limiter``: the process's limiter when a record comes (the one lines share)."""
        super().__init__()
        self.limiter = limiter

    def filter(self, record: logging.LogRecord) -> bool:
        if record.levelno < logging.WARNING or getattr(record, "tmy_repeat_summary", False):
            return True
        decided = getattr(record, "tmy_repeat_allowed", None)
        if decided is not None:  # one record, several handlers: counted once
            return bool(decided)
        try:
            message = record.getMessage()
        except Exception:  # a malformed record: logging reports that itself
            return True
        exc = record.exc_info[1] if record.exc_info else None
        if exc is not None:
            message = f"{message} [{type(exc).__name__}: {exc}]"
        key = ("stdlib", record.name, record.levelno, message)
        record.tmy_repeat_allowed = allowed = self.limiter().allow(key, message)
        return allowed


class Redacting(logging.Filter):
    """Takes configured secrets out of what libraries log through the standard logging."""

    def filter(self, record: logging.LogRecord) -> bool:
        if redact.active():
            try:
                message = record.getMessage()
            except Exception:  # a malformed record: logging reports that itself
                return True
            clean = redact.redact(message)
            if clean != message:
                record.msg, record.args = clean, None
        return True
