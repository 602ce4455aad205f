"""What a restore refuses to write into, before it opens the target store.

A SQLite URL can name places where a restore would look fine and be wrong:

* ``sqlite:///:memory:`` — a private in-memory database: the restore would report
  success and its data would be gone when the command exits;
* a file in a directory that does not exist — opening the store would create
  the directories, so a typo in the path silently becomes a new, empty place;
* another application's database — a file with tables but no tmy format marker:
  opening it as a store would add tmy's tables to it and write into it.

A file that does not exist yet (in an existing directory), an empty database, or
one holding tmy's tables is a fine target. Redis URLs pass (what a Redis holds
is checked by the restore itself: empty, or ``--merge``/``--replace``).
"""

from __future__ import annotations

import contextlib
import functools
import sqlite3
from pathlib import Path

from tmy.backup.fileformat import printable
from tmy.command import CommandError
from tmy.config.store import parse_store_url
from tmy.store import open_store
from tmy.store.base import FORMAT_KEY
from tmy.store.sqlite import SQLiteStore
from tmy.store.sqlite.connection import SCHEMA


@functools.cache
def tmy_tables() -> frozenset[str]:
    """The tables a tmy SQLite store has (read from the store's own schema)."""
    with contextlib.closing(sqlite3.connect(":memory:")) as db:
        db.executescript(SCHEMA)
        return frozenset(_tables(db))


def _tables(db: sqlite3.Connection) -> list[str]:
    rows = db.execute(
        "SELECT name FROM sqlite_master WHERE type = 'table' AND name NOT LIKE 'sqlite_%' "
        "ORDER BY name"
    )
    return [row[0] for row in rows]


def check_restore_target(url: str, shown: str) -> None:
    """CommandError when a restore into the store ``url`` names (``shown``: the URL as
    printed, password removed) would lose its data or write into the wrong place."""
    if parse_store_url(url).scheme != "sqlite":
        return
    store = open_store(url)  # not opened: only its file's place, resolved as the store does
    assert isinstance(store, SQLiteStore)
    if str(store.path) == ":memory:":
        raise CommandError(
            f"{shown} is a private in-memory database: what a restore wrote there would be "
            "gone when restore exits. Restore into a file (sqlite:///path.db) or a Redis"
        )
    path = Path(store.path)
    if not path.parent.is_dir():
        raise CommandError(
            f"{shown}: the folder {path.parent} does not exist; restore does not create "
            f"folders (a typo would silently become a new, empty store): mkdir -p {path.parent}"
        )
    if path.exists():
        _check_database(path, shown)


def _check_database(path: Path, shown: str) -> None:
    """Refuse a file that is not a SQLite database, or another application's one."""
    uri = f"{path.absolute().as_uri()}?mode=ro"
    try:
        with contextlib.closing(sqlite3.connect(uri, uri=True)) as db:
            tables = _tables(db)
            marked = "kv" in tables and _marked(db)
    except sqlite3.Error as exc:
        raise CommandError(
            f"{shown}: {path} is not a SQLite database tmy can use ({exc})"
        ) from None
    ours = tmy_tables()
    if not tables or marked or ("kv" in tables and set(tables) <= ours):
        return
    foreign = [t for t in tables if t not in ours]
    listed = ", ".join(printable(t) for t in foreign[:10]) + (" …" if len(foreign) > 10 else "")
    raise CommandError(
        f"{shown}: {path} holds another application's tables ({listed}) and no tmy format "
        f"marker ({FORMAT_KEY!r}): restore writes only into a new or empty SQLite file or a "
        "tmy store. Nothing was written"
    )


def _marked(db: sqlite3.Connection) -> bool:
    """Whether the ``kv`` table holds tmy's format marker (a ``kv`` of another shape: no)."""
    try:
        row = db.execute("SELECT 1 FROM kv WHERE key = ?", (FORMAT_KEY,)).fetchone()
    except sqlite3.OperationalError:
        return False
    return row is not None
