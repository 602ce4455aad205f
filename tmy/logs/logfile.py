"""The log file: rotated by size (``log.rotate``), reopened when someone else moves it.

**Rotation.** The same scheme as the standard library's
``logging.handlers.RotatingFileHandler`` (and logrotate without ``dateext``):
before a line that would take the file past ``max_bytes`` is written,
``<file>.N-1`` becomes ``<file>.N`` … ``<file>`` becomes ``<file>.1`` (the oldest,
``<file>.N``, is dropped) and a new ``<file>`` is opened. It is not that handler
itself because the log's lines never pass through ``logging``: they are rendered to
bytes once (:func:`tmy.logs._line`) and written through a buffer
(:class:`tmy.logs.sinks.JsonLines`); this is the file under that buffer.

**Moved by someone else.** Like ``logging.handlers.WatchedFileHandler``, every
flush (at most 0.2 s after a line, :func:`tmy.logs.flush`) checks that the name
still points to the open file; when logrotate has renamed it (its default
``create`` mode) or deleted it, the name is opened anew. Lines written in between
land in the renamed file, so none is lost and no signal is needed (SIGHUP reloads
rules; it does not reopen the log). A file truncated under the writer (logrotate's
``copytruncate``) is measured again before a rotation, so it is not rotated early.

Several processes may append to one log (the daemon, and a one-shot ``ask`` with
the same ``log.file``): the one that fills it rotates; the others find the name
moved and only reopen it, so no lines are rotated twice.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import BinaryIO

BUFFER = 256 * 1024  # bytes buffered before a write reaches the file (flushed every 0.2 s too)


class LogFile:
    """An append-only binary log file; ``max_bytes`` > 0 rotates it into ``backups`` files.

    ``write``/``flush`` are what :class:`~tmy.logs.sinks.JsonLines` calls. A
    rotation that fails (a read-only directory, a full disk) is reported once on
    standard error and writing goes on in the current file; it is tried again
    after another ``max_bytes``.
    """

    def __init__(self, path: str | Path, max_bytes: int = 0, backups: int = 5) -> None:
        if max_bytes < 0 or backups < 1:
            raise ValueError(
                f"max_bytes must be >= 0 and backups >= 1 (got {max_bytes}, {backups})"
            )
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = threading.Lock()
        self._warned = False
        self.file, self.size = self._open()
        # files replaced (rotated, or reopened after logrotate) but not yet closed: a
        # writer that took the old file's write a moment before still finds it open; the
        # next flush closes them, pushing such a line into the old (renamed) file
        self._retired: list[BinaryIO] = []
        self._direct()

    def _direct(self) -> None:
        """Without rotation nothing needs counting: ``write`` is the open file's own
        (no Python frame per line); ``size`` then stays what it was at opening."""
        if not self.max_bytes:
            self.write = self.file.write  # type: ignore[method-assign]

    def _open(self) -> tuple[BinaryIO, int]:
        file = self.path.open("ab", buffering=BUFFER)
        return file, os.fstat(file.fileno()).st_size

    def write(self, data: bytes) -> int:
        size = self.size + len(data)
        if self.max_bytes and size > self.max_bytes and self.size:  # checks inlined: hot path
            self._rollover(len(data))
            size = self.size + len(data)
        self.size = size
        return self.file.write(data)

    def flush(self) -> None:
        self._close_retired()
        self.file.flush()
        if self._moved():
            with self._lock:
                if self._moved():
                    self._reopen()

    def close(self) -> None:
        self._close_retired()
        self.file.close()

    def _close_retired(self) -> None:
        retired, self._retired = self._retired, []
        for old in retired:
            try:
                old.close()
            except OSError as exc:  # its last lines could not be written (a full disk)
                self._warn(exc)

    def _full(self, incoming: int) -> bool:
        return bool(self.size) and self.size + incoming > self.max_bytes

    def _rollover(self, incoming: int) -> None:
        with self._lock:
            if not self._full(incoming):
                return  # another thread rotated while this one waited
            self.file.flush()
            if self._moved():  # someone else rotated: write to the new file under the name
                self._reopen()
            else:  # the real size: copytruncate, or other processes appending
                self.size = os.fstat(self.file.fileno()).st_size
            if not self._full(incoming):
                return
            try:
                self._shift()
                new, size = self._open()
            except OSError as exc:
                self._warn(exc)
                self.size = 0  # try again after another max_bytes
                return
            old, self.file, self.size = self.file, new, size
            self._retired.append(old)

    def _reopen(self) -> None:
        try:
            new, size = self._open()
        except OSError as exc:  # the directory went away: keep writing where we are
            self._warn(exc)
            return
        old, self.file, self.size = self.file, new, size
        self._direct()
        self._retired.append(old)

    def _moved(self) -> bool:
        """Whether the name no longer points to the file this process writes."""
        try:
            named = os.stat(self.path)
            mine = os.fstat(self.file.fileno())
        except (FileNotFoundError, ValueError):  # deleted, or closed here
            return not self.file.closed
        return (named.st_dev, named.st_ino) != (mine.st_dev, mine.st_ino)

    def _shift(self) -> None:
        """``<file>.N-1`` → ``<file>.N`` … ``<file>`` → ``<file>.1`` (the oldest is replaced)."""
        for n in range(self.backups - 1, 0, -1):
            source = self._backup(n)
            if source.exists():
                os.replace(source, self._backup(n + 1))
        os.replace(self.path, self._backup(1))

    def _backup(self, n: int) -> Path:
        return self.path.with_name(f"{self.path.name}.{n}")

    def _warn(self, exc: OSError) -> None:
        if self._warned:
            return
        self._warned = True
        print(f"tmy: log file {self.path}: {exc}", file=sys.stderr, flush=True)
