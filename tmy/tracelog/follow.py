"""``trace --follow``: tail the log and hand over each run once it has finished.

Survives rotation (a new file at the path) and truncation; a run is complete
``settle`` seconds after its finishing line, or after ``quiet`` seconds of silence.
"""

from __future__ import annotations

import os
import time
from collections.abc import Callable
from pathlib import Path
from typing import Any

from tmy.tracelog.search import parse_line
from tmy.tracelog.view import CRON_END, CRON_START, TraceView, build_view

# lines that end a run: --follow prints the run when one arrives
FINISHING = {"reply.sent", "run.done", "message.unmatched", "message.refused", "run.cooldown"}
QUIET_SECONDS = 2.0  # --follow prints a run with no finishing line after this much silence
# ... and a finished one after this much: at debug, reply.sent follows run.done
SETTLE_SECONDS = 0.4


class _Run:
    """A run --follow is still collecting."""

    __slots__ = ("entries", "finished", "seen")

    def __init__(self) -> None:
        self.entries: list[dict[str, Any]] = []
        self.finished = False
        self.seen = 0.0


def follow(
    path: Path,
    emit: Callable[[TraceView], None],
    *,
    stop: Callable[[], bool] = lambda: False,
    max_runs: int | None = None,
    offset: int | None = None,
    poll: float = 0.2,
    quiet: float = QUIET_SECONDS,
    settle: float = SETTLE_SECONDS,
) -> int:
    """Tail ``path`` and ``emit`` each run once it finishes; returns how many were emitted.

    Starts at ``offset`` (default: the end of the file, like ``tail -f``) and
    survives rotation (a new file at ``path``) and truncation. A run is emitted
    ``settle`` seconds after its finishing line (a line or two may follow it),
    or after ``quiet`` seconds without any line of its own. Returns when
    ``stop()`` is true or ``max_runs`` runs were emitted; Ctrl-C raises
    KeyboardInterrupt out of the poll sleep.
    """
    pending: dict[str, _Run] = {}
    emitted = 0
    handle = None
    buffer = b""
    try:
        while not stop():
            if handle is None:
                try:
                    handle = path.open("rb")
                except FileNotFoundError:
                    time.sleep(poll)
                    continue
                size = os.fstat(handle.fileno()).st_size
                handle.seek(size if offset is None else min(offset, size))
                offset, buffer = None, b""
            chunk = handle.read(1 << 20)
            if chunk:
                lines = (buffer + chunk).split(b"\n")
                buffer = lines.pop()
                now = time.monotonic()
                for raw in lines:
                    entry = parse_line(raw) if b"trace_id" in raw else None
                    tid = entry.get("trace_id") if entry else None
                    if isinstance(tid, str):
                        run = pending.setdefault(tid, _Run())
                        run.entries.append(entry)
                        run.seen = now
                        run.finished = run.finished or _finishes(run.entries)
            now = time.monotonic()
            for tid, run in list(pending.items()):
                if now - run.seen >= (settle if run.finished else quiet):
                    del pending[tid]
                    emit(build_view(tid, run.entries))
                    emitted += 1
                    if max_runs is not None and emitted >= max_runs:
                        return emitted
            if chunk:
                continue
            if _replaced(path, handle):
                handle.close()
                handle, offset = None, 0  # read the new file from its start
                continue
            time.sleep(poll)
    finally:
        if handle is not None:
            handle.close()
    return emitted


def _finishes(entries: list[dict[str, Any]]) -> bool:
    """Whether the newest entry ends the run (a cron run ends with cron.done)."""
    last = entries[-1]
    if entries[0].get("event") == CRON_START:
        return last.get("event") == CRON_END
    return last.get("event") in FINISHING and not last.get("nested")


def _replaced(path: Path, handle: Any) -> bool:
    """True when ``path`` is now another file (rotated) or shorter than what was read."""
    try:
        now = os.stat(path)
    except FileNotFoundError:
        return False  # mid-rotation: keep the old file until a new one appears
    mine = os.fstat(handle.fileno())
    return (now.st_ino, now.st_dev) != (mine.st_ino, mine.st_dev) or now.st_size < handle.tell()
