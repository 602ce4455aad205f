"""The backup file: versioned JSON lines, gzip optional, checked whole before a restore.

One JSON object per line (UTF-8, ``\\n``-terminated), so a file can be read
with ``zcat | head``, ``jq`` or ``grep`` and streamed without loading a parser
of its own::

    {"format": "tmy-backup", "version": 1, "tmy": "0.1.0", "created": "…", "store": "…",
     "entries": N, "ranks": M, "point_in_time": true}
    {"key": "var/global/jokes", "value": ["A", "B"], "ttl": null}        × N, sorted by key
    {"board": "console/points", "member": "alice", "score": 12.0, "name": "Alice"}   × M
    {"end": "tmy-backup", "entries": N, "ranks": M}

``ttl`` is the seconds the key had left when the snapshot was taken
(``created``), ``null`` for a key that never expires. The counts are written
twice, in the header and in the end line, so a file cut short anywhere — a
full disk, a copy interrupted — is refused on restore, naming the line where
it stops. Reading is bounded: a line longer than ``limits.max_value_bytes`` +
:data:`LINE_OVERHEAD` is refused at its line before the rest is read, and only a
regular file is read (a gzip bomb, a FIFO or ``/dev/zero`` cost no memory and never
block). A file is written to a hidden temporary name beside its target,
flushed to disk and renamed over the target: ``FILE`` is either the previous
file or the complete new one, never half of one.

Versions: a reader takes every version up to :data:`VERSION` and refuses a
newer one, naming both ("written by a newer tmy (backup version 2, tmy 0.3.0);
this tmy 0.1.0 reads backup version 1 and older: upgrade tmy"). A change that
an older reader would misread bumps :data:`VERSION`; adding a header field
does not (readers ignore header fields they do not know). Every refusal is a
:class:`~tmy.command.CommandError` (the CLI's ``error: …``, exit 2), raised
while reading, before anything is written anywhere.
"""

from __future__ import annotations

import contextlib
import gzip
import os
import re
import sys
import tempfile
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

FORMAT = "tmy-backup"
VERSION = 1
GZIP_MAGIC = b"\x1f\x8b"
_GZIP_LEVEL = 6  # zlib's default: most of level 9's size at a fraction of its time
LINE_OVERHEAD = 64 * 1024
"""Bytes a line may hold beyond ``limits.max_value_bytes``: its key, ttl and JSON around the
value. A longer line is refused before the rest of it is read (a gzip bomb, ``/dev/zero``)."""
MAX_ID_CHARS = 256  # limits.max_id_chars' default: a board member is a user id
MAX_NAME_CHARS = 1024
"""The longest user name a board entry may carry (display names are far shorter)."""
BOARD_ID = re.compile(r"[^/]+/[^\W\d]\w*")
"""``<platform>/<variable name>``: the board of a ``rank: true`` variable (its platform
escaped, so without ``/``; the name as rules declare one)."""


Entry = tuple[str, Any, float | None]  # (key, value, ttl seconds left | None)
Rank = tuple[str, str, float, str | None]  # (board, member, score, name)


@dataclass(frozen=True, slots=True)
class BackupFile:
    """A backup file read and checked whole: its header, its entries and board entries."""

    header: dict[str, Any]
    entries: list[Entry] = field(default_factory=list)
    ranks: list[Rank] = field(default_factory=list)
    lines: dict[str, int] = field(default_factory=dict)  # key -> its line (for messages)
    rank_lines: dict[tuple[str, str], int] = field(default_factory=dict)  # (board, member) -> line

    @property
    def created(self) -> datetime:
        return datetime.fromisoformat(self.header["created"])


def tmy_version() -> str:
    """This tmy's version (``tmy.__version__``), read from the package already imported:
    an ``import tmy`` here would make the layer contract see the whole public API
    (the test harness included) as a dependency of this module."""
    return str(getattr(sys.modules["tmy"], "__version__", "unknown"))


def header_for(
    store_url: str, entries: int, ranks: int, created: datetime, point_in_time: bool = True
) -> dict[str, Any]:
    """The first line of a file holding ``entries`` keys and ``ranks`` board entries.

    ``store_url`` must already have its password removed (:func:`tmy.redact.safe_url`).
    ``point_in_time``: whether the snapshot was one moment of the whole store (SQLite;
    one Redis up to a size) or read key by key (a Redis Cluster, a larger Redis).
    """
    return {
        "format": FORMAT,
        "version": VERSION,
        "tmy": tmy_version(),
        "created": created.astimezone(UTC).isoformat(timespec="milliseconds"),
        "store": store_url,
        "entries": entries,
        "ranks": ranks,
        "point_in_time": point_in_time,
    }


def wants_gzip(path: Path, flag: bool = False) -> bool:
    """Gzip when asked (``--gzip``, ``backup.gzip``) or when the name ends in ``.gz``."""
    return flag or path.name.endswith(".gz")


def write_file(
    path: Path,
    header: dict[str, Any],
    entries: list[Entry],
    ranks: list[Rank],
    *,
    compress: bool,
) -> int:
    """Write the file atomically (temporary name, fsync, rename); its size in bytes.

    On any failure the temporary file is removed and ``path`` is left as it was.
    """
    temp = _write_temp(path, header, entries, ranks, compress)
    try:
        os.replace(temp, path)
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    _sync_dir(path.parent)
    return path.stat().st_size


def write_new_file(
    path: Path,
    header: dict[str, Any],
    entries: list[Entry],
    ranks: list[Rank],
    *,
    compress: bool,
) -> tuple[Path, int]:
    """As :func:`write_file`, but never over an existing file: when ``path`` exists the
    file gets the first free name with a suffix (``NAME-2.jsonl.gz``, ``-3`` …). The
    name is taken atomically (a hard link of the finished file), so two writers racing
    for one name both keep their file. The path written and its size."""
    temp = _write_temp(path, header, entries, ranks, compress)
    try:
        for n in range(1, 10_000):
            target = path if n == 1 else suffixed(path, n)
            try:
                os.link(temp, target)
            except FileExistsError:
                continue
            except OSError:  # no hard links here: claim the name empty, then rename onto it
                try:
                    os.close(os.open(target, os.O_WRONLY | os.O_CREAT | os.O_EXCL, 0o600))
                except FileExistsError:
                    continue
                os.replace(temp, target)
            break
        else:
            raise FileExistsError(f"no free name for {path}")
    finally:
        with contextlib.suppress(OSError):
            os.unlink(temp)
    _sync_dir(path.parent)
    return target, target.stat().st_size


def suffixed(path: Path, n: int) -> Path:
    """``tmy-backup-X.jsonl.gz`` -> ``tmy-backup-X-2.jsonl.gz``: the suffix goes before
    ``.jsonl…`` (else before the last extension), so the name still reads as a backup."""
    name = path.name
    at = name.find(".jsonl")
    at = at if at > 0 else (name.rfind(".") if name.rfind(".") > 0 else len(name))
    return path.with_name(f"{name[:at]}-{n}{name[at:]}")


def _write_temp(
    path: Path, header: dict[str, Any], entries: list[Entry], ranks: list[Rank], compress: bool
) -> str:
    """The whole file written and flushed to disk under a hidden name beside ``path``."""
    path.parent.mkdir(parents=True, exist_ok=True)
    fd, temp = tempfile.mkstemp(dir=path.parent, prefix=f".{path.name}.", suffix=".partial")
    try:
        with os.fdopen(fd, "wb") as raw:
            if compress:
                # mtime=0: the same data gives the same bytes (comparable checksums)
                with gzip.GzipFile(
                    filename="", mode="wb", fileobj=raw, compresslevel=_GZIP_LEVEL, mtime=0
                ) as packed:
                    _write_lines(packed, header, entries, ranks)
            else:
                _write_lines(raw, header, entries, ranks)
            raw.flush()
            os.fsync(raw.fileno())
    except BaseException:
        with contextlib.suppress(OSError):
            os.unlink(temp)
        raise
    return temp


def _write_lines(out: IO[bytes], head: dict[str, Any], es: list[Entry], rs: list[Rank]) -> None:
    out.write(_line(head))
    for key, value, ttl in es:
        out.write(_line({"key": key, "value": value, "ttl": ttl}))
    for board, member, score, name in rs:
        out.write(_line({"board": board, "member": member, "score": score, "name": name}))
    out.write(_line({"end": FORMAT, "entries": len(es), "ranks": len(rs)}))


def _line(obj: dict[str, Any]) -> bytes:
    return orjson.dumps(obj) + b"\n"


def _sync_dir(folder: Path) -> None:
    """Make the rename itself durable (POSIX: fsync the directory); best effort."""
    with contextlib.suppress(OSError):
        fd = os.open(folder, os.O_RDONLY)
        try:
            os.fsync(fd)
        finally:
            os.close(fd)


def printable(value: Any) -> str:
    """A header field as text safe to print: control and format characters (terminal
    escapes, newlines, bidi overrides) escaped as ``repr`` would, other text as is.

    A header is read from a file anyone may have edited; ``restore --dry-run`` prints
    it, and a field must not be able to move the cursor or fake another line.
    """
    text = value if isinstance(value, str) else repr(value)
    if text.isprintable():
        return text
    return "".join(c if c.isprintable() or c == " " else repr(c)[1:-1] for c in text)
