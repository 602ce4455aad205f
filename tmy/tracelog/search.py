"""Finding one trace's lines in the JSON log: newest first, within a bound, bytes before JSON.

A byte search (no parsing) picks the candidate lines and only those are
JSON-parsed; a :class:`Bound` keeps the most recent runs when the log is huge
(``.tmy trace`` in a daemon), while the CLI reads everything.
"""

from __future__ import annotations

import json
import mmap
import re
import time
from collections.abc import Iterator
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from tmy import logs
from tmy.config import Settings
from tmy.errors import ConfigError

# What ``.tmy trace ID`` accepts: the engine's ids are 16 hex digits (explain's
# "explain-" + 12); a shorter or odd id is refused before any byte is read.
TRACE_ID_RE = re.compile(r"[A-Za-z0-9][A-Za-z0-9_.:-]{7,63}")
# ``.tmy trace`` reads the log off the event loop, newest lines first, and stops at the
# first of these bounds (its reply says so): the daemon answers while a large log is read.
CHAT_SCAN_BYTES = 256 * 1024 * 1024
CHAT_SCAN_LINES = 5000  # lines of the trace kept
CHAT_SCAN_SECONDS = 5.0
_WINDOW = 8 * 1024 * 1024  # bytes searched between two looks at the time budget


def log_path(settings: Settings, override: str | None = None) -> Path:
    """The log to read: ``--log``, else ``log.file`` / ``TMY_LOG_FILE``."""
    name = override or settings.log_file
    if not name:
        raise ConfigError(
            "no log file: set log.file in the config or TMY_LOG_FILE, or pass --log FILE"
        )
    return Path(name)


@dataclass(frozen=True, slots=True)
class Bound:
    """How much of the log one search may read: bytes (newest first), lines kept, seconds."""

    max_bytes: int = CHAT_SCAN_BYTES
    max_lines: int = CHAT_SCAN_LINES
    seconds: float = CHAT_SCAN_SECONDS


UNBOUNDED = Bound(max_bytes=1 << 62, max_lines=1 << 62, seconds=float("inf"))


@dataclass
class Found:
    """A search's result: the trace's entries (oldest first) and, if a bound stopped it, which."""

    entries: list[dict[str, Any]]
    cut: str | None = None  # "the last 256 MB", "5000 lines", "5 s": what was not searched
    scanned: int = 0  # bytes searched


def check_trace_id(trace_id: str) -> str:
    """``trace_id`` if it has a trace id's shape, else ConfigError saying what one looks like."""
    if not TRACE_ID_RE.fullmatch(trace_id):
        shown = trace_id if len(trace_id) <= 70 else trace_id[:70] + "…"
        raise ConfigError(
            f"{shown!r} is not a trace id: give a whole trace id, 8 to 64 letters, digits "
            "or . _ : - (a reply's trace id looks like 24ea56ec00000001)"
        )
    return trace_id


def _needle(trace_id: str) -> bytes:
    """What a line holding ``trace_id`` as a JSON string contains.

    An id of the usual shape needs no JSON escape, so ``"<id>"`` with its quotes
    is exact: a short id no longer matches (and JSON-parses) every line that
    merely contains it. Any other id (the CLI takes anything) is searched bare.
    """
    if TRACE_ID_RE.fullmatch(trace_id):
        return b'"' + trace_id.encode() + b'"'
    return trace_id.encode()


def _scan_back(mm: Any, needle: bytes, low: int, deadline: float) -> Iterator[tuple[int, bytes]]:
    """(start, line) of the lines of ``mm[low:]`` holding ``needle``, newest first.

    Searches windows of :data:`_WINDOW` bytes from the end so that the time
    budget is looked at between them; yields ``(-1, b"")`` when it runs out.
    """
    end = len(mm)
    start = max(low, end - _WINDOW)
    while True:
        pos = mm.rfind(needle, start, end)
        if pos != -1:
            first = mm.rfind(b"\n", 0, pos) + 1
            stop = mm.find(b"\n", pos)
            yield first, mm[first : len(mm) if stop == -1 else stop]
            end = first
            start = max(low, min(start, end - _WINDOW))
            continue
        if start <= low:
            return
        if time.monotonic() > deadline:
            yield -1, b""
            return
        end = start + len(needle) - 1  # a match across the window's edge is found next
        start = max(low, end - _WINDOW)


def search(path: Path, trace_id: str, bound: Bound = UNBOUNDED) -> Found:
    """Every log entry of ``trace_id`` within ``bound``, oldest first (``FILE.2`` before
    ``FILE.1`` before ``FILE``: the files ``log.rotate`` and logrotate leave).

    Reads newest first, so a bound keeps the most recent runs; a byte search
    (no parsing) picks the candidate lines and only those are JSON-parsed.
    Blocking: the daemon calls it in a thread (:func:`trace_reply`). Raises
    ConfigError when the log does not exist or is empty.
    """
    if not path.exists():
        raise ConfigError(f"the log file {path} does not exist (log.file / TMY_LOG_FILE / --log)")
    if path.stat().st_size == 0:
        raise ConfigError(f"the log file {path} is empty: nothing has been logged there yet")
    needle = _needle(trace_id)
    deadline = time.monotonic() + bound.seconds
    budget = bound.max_bytes
    newest_first: list[dict[str, Any]] = []
    cut: str | None = None
    scanned = 0
    for file in _newest_first(path):
        if cut is not None or not file.is_file():
            continue
        if budget <= 0:
            cut = f"the last {_size(bound.max_bytes)}"
            break
        with file.open("rb") as f:
            try:
                mm = mmap.mmap(f.fileno(), 0, access=mmap.ACCESS_READ)
            except ValueError:  # an empty file cannot be mapped
                continue
            with mm:
                low = max(0, len(mm) - budget)
                reached = len(mm)
                for n, (at, raw) in enumerate(_scan_back(mm, needle, low, deadline), 1):
                    if at == -1 or (n % 256 == 0 and time.monotonic() > deadline):
                        cut = f"{bound.seconds:g} s of searching"
                        break
                    reached = at
                    entry = parse_line(raw)
                    if entry is not None and entry.get("trace_id") == trace_id:
                        newest_first.append(entry)
                        if len(newest_first) >= bound.max_lines:
                            cut = f"{bound.max_lines} lines"
                            break
                else:
                    reached = low
                    if low > 0:
                        cut = f"the last {_size(bound.max_bytes)}"
                scanned += len(mm) - reached
                budget -= len(mm) - reached
    newest_first.reverse()
    return Found(newest_first, cut, scanned)


MAX_ROTATED = 100  # rotated files a search looks into (log.rotate.backups is usually 5)


def _newest_first(path: Path) -> Iterator[Path]:
    """``FILE``, then its rotated ``FILE.1``, ``FILE.2`` … while they exist."""
    yield path
    for n in range(1, MAX_ROTATED + 1):
        older = path.with_name(f"{path.name}.{n}")
        if not older.is_file():
            return
        yield older


def _size(n: int) -> str:
    return f"{n / (1024 * 1024):g} MB" if n >= 1024 * 1024 else f"{n} bytes"


def parse_line(raw: bytes) -> dict[str, Any] | None:
    try:
        entry = json.loads(raw)
    except ValueError:
        return None
    return entry if isinstance(entry, dict) else None


def read_trace(path: Path, trace_id: str) -> list[dict[str, Any]]:
    """Every log entry of ``trace_id``, oldest first (the rotated ``FILE.1`` before ``FILE``).

    Raises ConfigError when the log does not exist or is empty: that is a
    misconfigured path far more often than a run that logged nothing. This
    process's own buffered lines are flushed first.
    """
    logs.flush()
    return search(path, trace_id).entries
