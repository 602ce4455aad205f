"""Structured logs: one JSON object per line, ``trace_id`` bound for each message.

Every event of a run carries the same ``trace_id`` (bound with structlog's
contextvars), so ``grep <trace_id> data/tmy.log`` — or ``jq 'select(.trace_id
== "…")'`` — replays one run: ``message.received`` → ``rule.matched`` →
``step.start``/``step.done`` per step → ``reply.sent``.

Here: the loggers, the one fused renderer every line goes through
(:func:`_line`: trace id, timestamp, JSON, redaction, repeat limit), the
engine's fast paths (:func:`emit`, :func:`emit_event`) and :func:`configure`.
Where lines go is :mod:`tmy.logs.sinks`; how repeated warnings are counted
instead of written is :mod:`tmy.logs.repeats`.
"""

from __future__ import annotations

import atexit
import contextvars
import json
import logging
import math
import sys
import time
from datetime import UTC, datetime
from pathlib import Path
from typing import Any, TextIO

import orjson
import structlog

from tmy import redact
from tmy.errors import ConfigError
from tmy.logs.logfile import LogFile
from tmy.logs.loggers import Log, get_logger
from tmy.logs.repeats import REPEAT_BURST, REPEAT_INTERVAL, REPEAT_KEYS, RepeatLimiter
from tmy.logs.sinks import ConsoleLines, JsonLines
from tmy.logs.stdlib import Redacting, Repeats

__all__ = [
    "LEVELS",
    "PREVIEW",
    "REPEAT_BURST",
    "REPEAT_INTERVAL",
    "REPEAT_KEYS",
    "TRACE",
    "ConsoleLines",
    "JsonLines",
    "Log",
    "LogFile",
    "RepeatLimiter",
    "bind_trace",
    "configure",
    "emit",
    "emit_event",
    "emit_info",
    "emit_info_text",
    "flush",
    "get_logger",
    "level_of",
    "preview",
]

LEVELS = {"debug": 10, "info": 20, "warning": 30, "error": 40, "critical": 50}
PREVIEW = 200


def level_of(level: str) -> int:
    """The number of a log level name (any case); ConfigError naming the allowed ones.

    The config checks ``log.level`` with this at load, so :func:`configure` never
    meets a bad name from the config.
    """
    lvl = LEVELS.get(str(level).lower())
    if lvl is None:
        raise ConfigError(f"log level {level!r} must be one of {', '.join(LEVELS)}")
    return lvl


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


def stamp_ms(ms: int) -> str:
    """ISO-8601 UTC to the millisecond; the date and time part is formatted once a second."""
    sec = ms // 1000  # not divmod: a builtin's call and a tuple, for every new millisecond
    if sec != _second[0]:
        _second[0] = sec
        _second[1] = datetime.fromtimestamp(sec, UTC).strftime("%Y-%m-%dT%H:%M:%S.")
    return _second[1] + _MILLIS[ms - sec * 1000]


_MILLIS = tuple(f"{frac:03d}Z" for frac in range(1000))  # "000Z" … "999Z": no format per line
STAMP: list[Any] = [0, ""]  # (millisecond, its timestamp)
_second: list[Any] = [0, ""]  # (second, its date-and-time prefix)
_NON_STR_KEYS = orjson.OPT_NON_STR_KEYS
_NEWLINE = orjson.OPT_APPEND_NEWLINE
_time = time.time
_floor = math.floor  # a float's int: a call, not int()'s class call (~500 instructions less)


_repeats = RepeatLimiter()
_LIMITED = frozenset({"warning", "error", "critical"})


def _report_repeats() -> None:
    """One line per repeated line whose interval ended: how many were left out, and which."""
    for key, suppressed, sample in _repeats.due():
        if isinstance(key, tuple) and key and key[0] == "stdlib":
            _, name, levelno, _message = key
            logging.getLogger(name).log(
                levelno,
                "suppressed %d repeats of this line in %d s: %s",
                suppressed,
                int(_repeats.interval),
                sample,
                extra={"tmy_repeat_summary": True},
            )
            continue
        sink = SINK
        if sink is None:
            continue
        line = sample.decode("utf-8", errors="replace") if isinstance(sample, bytes) else sample
        event = {
            "event": "log.repeats_suppressed",
            "repeats": suppressed,
            "seconds": _repeats.interval,
            "line": preview(line, 500),
        }
        sink.msg(_line("warning", event, None, 0, limit=False))


# Where lines go (None: not configured — through structlog). Like INFO_ENABLED it is read
# as ``logs.SINK`` by a caller that renders whole info lines itself and writes them without
# a call of ours per line (tmy.engine.plans: a FAQ answer's run.done line, one f-string,
# :func:`emit_info_text` inline): that caller also reads BOUND (context bound: its lines
# take emit_event's way), STAMP (the millisecond and its timestamp, kept current with
# :func:`stamp_ms` by whoever writes first in it) and :data:`tmy.redact.LINE_SECRETS`.
SINK: JsonLines | None = None
INFO_ENABLED = True  # read by the engine to skip building previews nobody will see
DEBUG_ENABLED = False


def emit(level: str, event: str, **fields: Any) -> None:
    """Log one of the engine's per-message events (received, matched, step, reply).

    The same renderer and sink that :func:`configure` gives structlog, minus
    structlog's bound-logger layers: these five events per message are the
    daemon's hottest code. Callers check INFO_ENABLED / DEBUG_ENABLED first.
    """
    sink = SINK
    if sink is None:  # not configured (a library user): go through structlog
        getattr(structlog.get_logger("tmy"), level)(event, **fields)
        return
    fields["event"] = event
    line = _line(level, fields, TRACE.get(), 0)
    if line is not None:
        sink.msg(line)


def emit_event(level: str, event: dict[str, Any], trace_id: str | None) -> None:
    """Log a line whose fields the caller built as one dict (``event`` key included).

    The engine's one line per run: :func:`emit` plus :func:`_render` without a
    keyword-argument repack, a context-variable read for the trace id the
    caller already holds, or a copy of the rendered bytes to add the newline.
    Same line, same redaction. Callers check INFO_ENABLED / DEBUG_ENABLED first.
    ``event`` is left as it was: the engine hands the same dict to its observer.
    """
    sink = SINK
    if sink is None:  # not configured (a library user): through structlog
        fields = {k: v for k, v in event.items() if k != "event"}  # the caller's dict intact
        token = TRACE.set(trace_id)
        try:
            emit(level, event["event"], **fields)
        finally:
            TRACE.reset(token)
        return
    line = _line(level, event, trace_id, _NEWLINE)
    if line is not None:
        sink.write(line)


_STAMPED = frozenset({"event", "trace_id", "level", "timestamp"})


def emit_info(event: dict[str, Any]) -> None:
    """Log an ``info`` line whose dict already holds ``trace_id``, ``level`` and a
    ``timestamp`` to fill in, last and in that order (the engine's ``run.done``).

    The line :func:`emit_event` writes, byte for byte, in one pass: the dict is
    built once, in its final order and size (no key added, so no resize), rendered
    once and written. With context variables bound (a plugin's) or no sink
    configured, it takes :func:`emit_event`'s way. Callers check INFO_ENABLED first.
    """
    sink = SINK
    if sink is None:  # not configured (a library user): through structlog
        fields = {k: v for k, v in event.items() if k not in _STAMPED}
        fields["event"] = event["event"]
        emit_event("info", fields, event["trace_id"])
        return
    if BOUND:  # context a plugin bound: merged in front, as every other line has it
        line = _line("info", event, event["trace_id"], _NEWLINE)
        if line is not None:
            sink.write(line)
        return
    now = _time()
    ms = _floor(now * 1000)
    if ms != STAMP[0]:
        STAMP[1] = stamp_ms(ms)
        STAMP[0] = ms
    event["timestamp"] = STAMP[1]
    try:
        line = orjson.dumps(event, option=_NEWLINE)
    except TypeError:
        line = _dumps_any(event) + b"\n"
    if redact.active():
        line = redact.redact_line(line)
    try:
        sink.out(line)
    except ValueError:  # a file opened anew since (logrotate), or closed at exit
        sink.write(line)


def emit_info_text(head: str, trace_id: str) -> bool:
    """Finish and write an ``info`` line rendered up to its ``trace_id``'s value.

    ``head`` is the line as :func:`emit_event` would render it up to and including
    ``"trace_id":"`` (a run.done line assembled from parts its rule's run always
    repeats, :mod:`tmy.engine.plans`); ``trace_id`` letters and digits only (the
    engine's own ids: nothing to escape). This adds the id, level and timestamp,
    encodes the line once and writes it, redacted like every line. False (nothing
    written): the caller logs the line through :func:`emit_event` — no sink
    configured, or context variables a plugin bound (merged in front of every line).
    """
    sink = SINK
    if sink is None or BOUND:
        return False
    now = _time()
    ms = _floor(now * 1000)
    if ms != STAMP[0]:
        STAMP[1] = stamp_ms(ms)
        STAMP[0] = ms
    line = f'{head}{trace_id}","level":"info","timestamp":"{STAMP[1]}"}}\n'.encode()
    if redact.LINE_SECRETS:  # redact.active(), inline: every FAQ answer's line passes here
        line = redact.redact_line(line)
    try:
        sink.out(line)  # a file's own write: no frame of ours between
    except ValueError:  # a file opened anew since (logrotate), or closed at exit
        sink.write(line)
    return True


def _dumps_any(event: dict[str, Any]) -> bytes:
    """JSON for a line orjson refused as it is: non-string keys, other objects, surrogates."""
    try:
        return orjson.dumps(event, option=_NON_STR_KEYS, default=str)
    except TypeError:  # e.g. a lone surrogate from a plugin: escape rather than lose it
        return json.dumps(event, default=str).encode()


def flush() -> None:
    """Push buffered log lines out (the daemon calls this on a short timer).

    Also writes the summaries of repeated lines whose interval has ended.
    """
    if _repeats.pending():
        _report_repeats()
    if SINK is not None:
        SINK.flush()


# structlog's registry of the context variables bind_contextvars() has ever made:
# empty (the usual case) means there is nothing to merge into a line.
BOUND: dict[str, Any] = getattr(structlog.contextvars, "_CONTEXT_VARS", {"?": None})

TRACE: contextvars.ContextVar[str | None] = contextvars.ContextVar("tmy_trace_id", default=None)


def bind_trace(trace_id: str) -> contextvars.Token[str | None]:
    """Tag every event logged in this context (this message's run) with ``trace_id``."""
    return TRACE.set(trace_id)


def _render(_: Any, method: str, event: dict[str, Any]) -> bytes:
    """structlog's one processor: :func:`_line` for an event logged through structlog."""
    line = _line("warning" if method == "warn" else method, event, TRACE.get(), 0)
    if line is None:
        raise structlog.DropEvent
    return line


def _line(
    level: str, event: dict[str, Any], trace_id: str | None, option: int, *, limit: bool = True
) -> bytes | None:
    """trace_id + structlog contextvars + level + timestamp + JSON + redaction: every line.

    One fused step instead of structlog's processor chain: this runs for every
    line the daemon writes. ``option`` is orjson's (``_NEWLINE`` for the sink's
    fast path, which takes the line with its newline). None: a warning or error
    line identical (but for its timestamp) to too many just before it
    (:class:`RepeatLimiter`).
    """
    if trace_id is not None:
        event["trace_id"] = trace_id
    if BOUND:  # what plugins bind themselves (copying the context costs; skip when none)
        ctx = structlog.contextvars.get_contextvars()
        if ctx:
            event = {**ctx, **event}
    event["level"] = level
    ms = _floor(time.time() * 1000)  # the timestamp, formatted once per millisecond
    if ms != STAMP[0]:
        STAMP[1] = stamp_ms(ms)
        STAMP[0] = ms
    event["timestamp"] = STAMP[1]
    if "exc_info" in event:
        exc = event.pop("exc_info")
        if exc:
            event["exception"] = structlog.processors.format_exc_info(
                None, level, {"exc_info": exc}
            )["exception"]
    try:
        line = orjson.dumps(event, option=option)  # plain JSON values, the usual line
    except TypeError:
        line = _dumps_any(event) + (b"\n" if option else b"")
    if redact.active():  # configured secrets (API keys, passwords) never reach the log
        line = redact.redact_line(line)
    if limit and level in _LIMITED:
        key = line.replace(STAMP[1].encode(), b"", 1)
        if not _repeats.allow(key, line):
            return None
    return line


def configure(
    level: str = "info",
    file: str | Path | None = None,
    stream: TextIO | None = None,
    fmt: str = "json",
    *,
    max_bytes: int = 0,
    backups: int = 5,
) -> None:
    """Send JSON lines to ``file`` (appended) or ``stream`` (default stderr).

    ``fmt``: ``json``; ``console`` for readable lines; ``auto`` for readable
    lines when the stream is a terminal and no file is given (``serve``).
    ``max_bytes`` > 0 (``log.rotate``): the file rotates into ``backups``
    numbered files as it reaches that size; 0 never. Moved away (logrotate), the
    file is opened anew within a flush (:mod:`tmy.logs.logfile`).
    Called once by the CLI; library code only ever asks :func:`get_logger`.
    """
    global SINK, INFO_ENABLED, DEBUG_ENABLED
    lvl = level_of(level)
    flush()
    previous = SINK
    if file:
        path = Path(file)
        path.parent.mkdir(parents=True, exist_ok=True)
        SINK = JsonLines(LogFile(path, max_bytes, backups), interactive=False)
    else:
        target = stream or sys.stderr
        raw = getattr(target, "buffer", target)
        tty = bool(getattr(target, "isatty", lambda: False)())
        if fmt == "console" or (fmt == "auto" and tty):
            SINK = ConsoleLines(raw, colors=tty)
        else:
            SINK = JsonLines(raw, interactive=tty)
    sink = SINK
    structlog.configure(
        processors=[_render],
        wrapper_class=structlog.make_filtering_bound_logger(lvl),
        logger_factory=lambda *args: sink,
        cache_logger_on_first_use=False,
    )
    Log._cache.clear()
    INFO_ENABLED = lvl <= LEVELS["info"]
    DEBUG_ENABLED = lvl <= LEVELS["debug"]
    logging.basicConfig(level=max(lvl, logging.WARNING), stream=sys.stderr)
    for handler in logging.getLogger().handlers:  # libraries' own warnings: redacted too
        if not any(isinstance(f, Redacting) for f in handler.filters):
            handler.addFilter(Redacting())
        if not any(isinstance(f, Repeats) for f in handler.filters):
            handler.addFilter(Repeats(lambda: _repeats))  # and one line per repeat burst
    atexit.register(flush)
    if previous is not None and isinstance(previous.stream, LogFile):
        previous.stream.close()  # a file this process no longer logs to
