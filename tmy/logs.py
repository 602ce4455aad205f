"""Structured logs: one JSON object per line, ``trace_id`` bound for each message.

Every event of a run carries the same ``trace_id`` (bound with structlog's
contextvars), so ``grep <trace_id> data/tmy.log`` — or ``jq 'select(.trace_id
== "…")'`` — replays one run: ``message.received`` → ``rule.matched`` →
``step.start``/``step.done`` per step → ``reply.sent``.
"""

from __future__ import annotations

import logging
import sys
from pathlib import Path
from typing import Any, TextIO

import orjson
import structlog

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
PREVIEW = 200


def preview(value: Any, limit: int = PREVIEW) -> Any:
    """A short, JSON-safe picture of a value for a log line."""
    if value is None or isinstance(value, (bool, int, float)):
        if isinstance(value, int) and value.bit_length() > 64:
            return "<big number>"
        return value
    if isinstance(value, bytes):
        value = value.decode("utf-8", errors="replace")
    if not isinstance(value, str):
        try:
            value = orjson.dumps(value, option=orjson.OPT_NON_STR_KEYS, default=str).decode()
        except (TypeError, orjson.JSONEncodeError):
            value = repr(value)
    return value if len(value) <= limit else value[:limit] + f"…(+{len(value) - limit})"


def _dumps(obj: Any, **_: Any) -> bytes:
    return orjson.dumps(obj, option=orjson.OPT_NON_STR_KEYS, default=str)


def configure(level: str = "info", file: str | Path | None = None, stream: TextIO | None = None) -> None:
    """Send JSON lines to ``file`` (appended) or ``stream`` (default stderr).

    Called once by the CLI; library code only ever asks ``structlog.get_logger``.
    """
    lvl = LEVELS.get(str(level).lower())
    if lvl is None:
        from tmy.errors import ConfigError

        raise ConfigError(f"log level {level!r} must be one of {', '.join(LEVELS)}")
    if file:
        path = Path(file)
        path.parent.mkdir(parents=True, exist_ok=True)
        out: Any = path.open("ab", buffering=1024 * 64)
        factory: Any = structlog.BytesLoggerFactory(out)
    else:
        target = stream or sys.stderr
        factory = structlog.BytesLoggerFactory(getattr(target, "buffer", target))
    structlog.configure(
        processors=[
            structlog.contextvars.merge_contextvars,
            structlog.processors.add_log_level,
            structlog.processors.TimeStamper(fmt="iso", utc=True),
            structlog.processors.format_exc_info,
            structlog.processors.JSONRenderer(serializer=_dumps),
        ],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=factory,
        cache_logger_on_first_use=False,
    )
    logging.basicConfig(level=max(lvl, logging.WARNING), stream=sys.stderr)
