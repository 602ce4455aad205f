"""WAL checkpoints on a thread of their own, so they never stall the event loop.

Why: SQLite copies the WAL back into the database file (a *checkpoint*) by
itself once the WAL holds 1,000 pages, inside whichever commit crossed that
line — on the event loop, where every statement of this store runs. With
``synchronous=NORMAL`` a checkpoint syncs the WAL and the database file: 4–14 ms
of wall time on the VMs measured, every ~3,500 messages of the QQ path (each
message's de-duplication claim writes a row), stalling every message in flight
— most of what stood between its p50 and its p99.

So the store's connection turns the automatic checkpoint off
(``wal_autocheckpoint = 0``, once this thread's connection is open: else it stays
on), and a daemon thread with a connection of its own runs ``PRAGMA
wal_checkpoint(PASSIVE)`` (which never waits for readers or writers, and releases
the GIL while it syncs) after writes, at most every :data:`EVERY` seconds. An idle
store's thread sleeps on an Event: no wake-ups. The WAL stays about :data:`EVERY`
seconds of writes long; durability is unchanged (a commit is in the WAL either
way). Other processes on the same file checkpoint on their own as well; SQLite lets
one at a time do it.
"""

from __future__ import annotations

import logging
import sqlite3
import threading
from pathlib import Path

log = logging.getLogger("tmy.store.sqlite")

EVERY = 0.2  # seconds between two checkpoints while the store is written


class Checkpointer:
    """The background checkpoints of one SQLite file (see the module docstring)."""

    def __init__(self, path: Path, busy_timeout_ms: int) -> None:
        self.path = path
        self.busy_timeout_ms = busy_timeout_ms
        self.checkpoints = 0  # checkpoints run so far (tests read it)
        self._due = threading.Event()  # a write happened since the last checkpoint
        self._stopped = threading.Event()
        self._thread: threading.Thread | None = None

    def start(self) -> bool:
        """Open the thread's own connection and start the thread. False (no thread) when
        the file cannot be opened a second time: the caller then leaves SQLite's own
        checkpoints on — with them off and no thread, the WAL would grow without bound."""
        try:
            db = sqlite3.connect(
                self.path, isolation_level=None, check_same_thread=False,
                timeout=self.busy_timeout_ms / 1000,
            )  # fmt: skip
        except sqlite3.Error as exc:
            log.warning("sqlite %s: no background checkpoints: %s", self.path, exc)
            return False
        self._stopped.clear()
        self._thread = threading.Thread(
            target=self._loop, args=(db,), name=f"sqlite-checkpoint {self.path.name}",
            daemon=True,
        )  # fmt: skip
        self._thread.start()
        return True

    def wrote(self) -> None:
        """A write may have happened: a checkpoint is due (called after every operation)."""
        if not self._due.is_set():
            self._due.set()

    def stop(self) -> None:
        """End the thread and wait for it (its connection closed: the store's own close is
        then the last one, which checkpoints what is left and removes the WAL)."""
        thread, self._thread = self._thread, None
        if thread is None:
            return
        self._stopped.set()
        self._due.set()
        thread.join()

    def _loop(self, db: sqlite3.Connection) -> None:
        try:
            while True:
                self._due.wait()
                if self._stopped.is_set():
                    return
                self._due.clear()
                self._checkpoint(db)
                if self._stopped.wait(EVERY):  # at most one checkpoint per EVERY seconds
                    return
        finally:
            db.close()

    def _checkpoint(self, db: sqlite3.Connection) -> None:
        try:
            db.execute("PRAGMA wal_checkpoint(PASSIVE)").fetchall()
            self.checkpoints += 1
        except sqlite3.Error as exc:  # busy (another checkpoint), or the file is gone
            log.debug("sqlite %s: checkpoint skipped: %s", self.path, exc)
