"""``log.rotate``: the log file moves to ``<file>.1`` … ``<file>.N`` when it reaches a size.

The same scheme as the standard library's ``logging.handlers.RotatingFileHandler``
(and logrotate without ``dateext``): before a line that would take the file past
``max_bytes`` is written, ``<file>.N-1`` becomes ``<file>.N`` … ``<file>`` becomes
``<file>.1`` (the oldest, ``<file>.N``, is dropped) and a new ``<file>`` is opened.
It is not that handler itself because the log's lines never pass through
``logging``: they are rendered to bytes once (:func:`tmy.logs._line`) and written
through a buffer (:class:`tmy.logs.sinks.JsonLines`), and this is the file under
that buffer.

Several processes may append to one log (the daemon, and a one-shot ``ask`` with
the same ``log.file``). Before rotating, the file is looked at again: if the name
no longer points to the file this process has open (another process rotated it,
or logrotate moved it), this one only reopens the name; if the file is smaller
than counted (logrotate's ``copytruncate``), the count is corrected. So two
writers never rotate the same lines twice.
"""

from __future__ import annotations

import os
import sys
import threading
from pathlib import Path
from typing import BinaryIO

BUFFER = 256 * 1024  # bytes buffered before a write reaches the file (flushed every 0.2 s too)


class RotatingFile:
    """A binary append-only file that rotates itself into ``backups`` numbered files.

    ``write``/``flush`` are what :class:`~tmy.logs.sinks.JsonLines` calls. A
    rotation that fails (a read-only directory, a full disk) is reported once on
    standard error and writing goes on in the current file; it is tried again
    after another ``max_bytes``.
    """

    def __init__(self, path: str | Path, max_bytes: int, backups: int) -> None:
        if max_bytes <= 0 or backups < 1:
            raise ValueError(f"max_bytes must be > 0 and backups >= 1 (got {max_bytes}, {backups})")
        self.path = Path(path)
        self.max_bytes = max_bytes
        self.backups = backups
        self._lock = threading.Lock()
        self._warned = False
        self.file, self.size = self._open()

    def _open(self) -> tuple[BinaryIO, int]:
        file = self.path.open("ab", buffering=BUFFER)
        return file, os.fstat(file.fileno()).st_size

    def write(self, data: bytes) -> int:
        if self.size and self.size + len(data) > self.max_bytes:
            self._rollover(len(data))
        written = self.file.write(data)
        self.size += len(data)
        return written

    def flush(self) -> None:
        self.file.flush()

    def close(self) -> None:
        self.file.close()

    def _rollover(self, incoming: int) -> None:
        with self._lock:
            if not (self.size and self.size + incoming > self.max_bytes):
                return  # another thread rotated while this one waited
            self.file.flush()
            if self._moved():  # someone else rotated: write to the new file under the name
                old = self.file
                self.file, self.size = self._open()
                old.close()
                if not (self.size and self.size + incoming > self.max_bytes):
                    return
            else:
                self.size = os.fstat(self.file.fileno()).st_size  # copytruncate, other writers
                if not (self.size and self.size + incoming > self.max_bytes):
                    return
            try:
                self._shift()
                new, size = self._open()
            except OSError as exc:
                self._warn(exc)
                self.size = 0  # try again after another max_bytes
                return
            old, self.file, self.size = self.file, new, size
            old.close()

    def _moved(self) -> bool:
        """Whether the name no longer points to the file this process writes."""
        try:
            named = os.stat(self.path)
        except FileNotFoundError:
            return True
        mine = os.fstat(self.file.fileno())
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
        print(f"tmy: could not rotate the log {self.path}: {exc}", file=sys.stderr, flush=True)
