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
import math
import os
import re
import stat
import sys
import tempfile
import zlib
from collections.abc import Iterator
from dataclasses import dataclass, field
from datetime import UTC, datetime
from pathlib import Path
from typing import IO, Any

import orjson

from tmy.command import CommandError
from tmy.store.codec import MAX_VALUE_BYTES

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


# -- reading ---------------------------------------------------------------------------------


def read_file(
    path: Path, *, max_value_bytes: int = MAX_VALUE_BYTES, max_id_chars: int = MAX_ID_CHARS
) -> BackupFile:
    """The whole file, checked: CommandError naming the line of the first problem.

    Gzip is recognised by its magic bytes, whatever the name. Nothing is returned
    unless every line parsed, the header's version is one this tmy reads, no key
    and no (board, member) appears twice, and the end line's counts match the
    header's and the lines'. Memory stays bounded by what a real backup needs:
    ``path`` must be a regular file (not a FIFO or a device, which could block or
    never end), each line is read with a limit (``max_value_bytes`` plus
    :data:`LINE_OVERHEAD`) and refused past it, and lines beyond the header's
    counts are refused as they come.
    """
    name = str(path)
    limit = max_value_bytes + LINE_OVERHEAD
    header: dict[str, Any] | None = None
    found = BackupFile(header={})
    end: dict[str, Any] | None = None
    number = 0
    try:
        for number, raw in _lines(path, name, limit):
            where = f"{name}:{number}"
            if end is not None:
                raise CommandError(f"{where}: a line after the end line")
            obj = _object(raw, where)
            if header is None:
                header = _check_header(obj, name)
                continue
            if "key" in obj:
                _add_entry(found, obj, where, number)
                if len(found.entries) > header["entries"]:
                    raise CommandError(f"{where}: more keys than the header's {header['entries']}")
            elif "board" in obj:
                _add_rank(found, obj, where, number, max_id_chars)
                if len(found.ranks) > header["ranks"]:
                    raise CommandError(
                        f"{where}: more board entries than the header's {header['ranks']}"
                    )
            elif "end" in obj:
                end = obj
            else:
                raise CommandError(f"{where}: neither a key, a board entry nor the end line")
    except (EOFError, zlib.error, gzip.BadGzipFile) as exc:
        raise CommandError(
            f"{name}: the gzip stream is cut short or damaged after line {number} ({exc}): "
            "the file is truncated"
        ) from None
    except OSError as exc:
        raise CommandError(f"cannot read {name}: {exc.strerror or exc}") from None
    if header is None:
        raise CommandError(f"{name}: empty file, not a tmy backup")
    counts = (len(found.entries), len(found.ranks))
    promised = (header["entries"], header["ranks"])
    if end is None:
        raise CommandError(
            f"{name}:{number}: the file ends without its end line after {counts[0]} of "
            f"{promised[0]} keys and {counts[1]} of {promised[1]} board entries: it is truncated"
        )
    if (end.get("entries"), end.get("ranks")) != promised or counts != promised:
        raise CommandError(
            f"{name}:{number}: the header promises {promised[0]} keys and {promised[1]} board "
            f"entries, the end line says {end.get('entries')!r} and {end.get('ranks')!r}, the "
            f"file holds {counts[0]} and {counts[1]}"
        )
    return BackupFile(header, found.entries, found.ranks, found.lines, found.rank_lines)


_KINDS = {
    stat.S_IFIFO: "a FIFO (named pipe)",
    stat.S_IFCHR: "a character device",
    stat.S_IFBLK: "a block device",
    stat.S_IFSOCK: "a socket",
    stat.S_IFDIR: "a directory",
}


def _open_regular(path: Path, name: str) -> IO[bytes]:
    """``path`` opened for reading, if it is a regular file; CommandError otherwise.

    Opened non-blocking and checked on the open descriptor (no race with a rename):
    opening a FIFO this way does not wait for a writer, and a FIFO or a device
    (``/dev/zero``) would never end or never start.
    """
    try:
        fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0) | os.O_CLOEXEC)
    except OSError as exc:
        raise CommandError(f"cannot read {name}: {exc.strerror or exc}") from None
    mode = os.fstat(fd).st_mode
    if not stat.S_ISREG(mode):
        os.close(fd)
        kind = _KINDS.get(stat.S_IFMT(mode), "not a regular file")
        raise CommandError(
            f"{name} is {kind}, not a regular file: restore reads a backup file "
            "(copy a stream to a file first)"
        )
    if hasattr(os, "set_blocking"):
        os.set_blocking(fd, True)
    return os.fdopen(fd, "rb")


def _lines(path: Path, name: str, limit: int) -> Iterator[tuple[int, bytes]]:
    """(line number, bytes without the newline), each read with ``limit``: a longer line
    is refused without reading the rest of it; a last line without its newline is
    yielded as is (the JSON check or the missing end line then says what is wrong)."""
    with _open_regular(path, name) as raw:
        packed = raw.read(2) == GZIP_MAGIC
        raw.seek(0)
        stream: IO[bytes] = gzip.GzipFile(fileobj=raw, mode="rb") if packed else raw
        with stream:
            number = 0
            while line := stream.readline(limit + 1):
                number += 1
                if len(line) > limit and not (len(line) == limit + 1 and line[-1:] == b"\n"):
                    raise CommandError(
                        f"{name}:{number}: the line is longer than {limit:,} bytes "
                        f"(limits.max_value_bytes + {LINE_OVERHEAD:,}): not a backup this "
                        "store can hold; nothing more was read"
                    )
                yield number, line.rstrip(b"\n")


def _object(raw: bytes, where: str) -> dict[str, Any]:
    try:
        obj = orjson.loads(raw)
    except orjson.JSONDecodeError as exc:
        raise CommandError(f"{where}: not a JSON line ({exc}): corrupt or truncated") from None
    if not isinstance(obj, dict):
        raise CommandError(f"{where}: not a JSON object")
    return obj


def _check_header(obj: dict[str, Any], name: str) -> dict[str, Any]:
    where = f"{name}:1"
    if obj.get("format") != FORMAT:
        raise CommandError(f"{where}: not a tmy backup (its first line has no format {FORMAT!r})")
    version = obj.get("version")
    if not _count(version) or version < 1:
        raise CommandError(f"{where}: the header's version {version!r} is not a version number")
    if version > VERSION:
        raise CommandError(
            f"{name} was written by a newer tmy (backup version {version}, "
            f"tmy {printable(obj.get('tmy'))}); "
            f"this tmy {tmy_version()} reads backup version {VERSION} and older: upgrade tmy"
        )
    for key in ("entries", "ranks"):
        if not _count(obj.get(key)):
            raise CommandError(f"{where}: the header's {key!r} is not a count: {obj.get(key)!r}")
    try:
        created = datetime.fromisoformat(obj.get("created", ""))
    except (TypeError, ValueError):
        raise CommandError(f"{where}: the header's 'created' is not an ISO time") from None
    if created.tzinfo is None:
        raise CommandError(f"{where}: the header's 'created' has no time zone")
    return obj


def _count(value: Any) -> bool:
    return isinstance(value, int) and not isinstance(value, bool) and value >= 0


def _add_entry(found: BackupFile, obj: dict[str, Any], where: str, number: int) -> None:
    key, ttl = obj.get("key"), obj.get("ttl")
    if not isinstance(key, str) or not key:
        raise CommandError(f"{where}: 'key' must be a non-empty string, got {key!r}")
    if "value" not in obj:
        raise CommandError(f"{where}: key {key!r} has no 'value'")
    if ttl is not None and not _positive(ttl):
        raise CommandError(f"{where}: key {key!r}: 'ttl' must be seconds > 0 or null")
    if key in found.lines:
        raise CommandError(f"{where}: key {key!r} appears twice (first on line {found.lines[key]})")
    found.lines[key] = number
    found.entries.append((key, obj["value"], None if ttl is None else float(ttl)))


def _add_rank(
    found: BackupFile, obj: dict[str, Any], where: str, number: int, max_id_chars: int
) -> None:
    board, member = obj.get("board"), obj.get("member")
    score, name = obj.get("score"), obj.get("name")
    if not isinstance(board, str) or not board or not isinstance(member, str) or not member:
        raise CommandError(f"{where}: a board entry needs a text 'board' and 'member'")
    what = f"{where}: board {board!r:.300} member {member!r:.300}"
    if not BOARD_ID.fullmatch(board):
        raise CommandError(
            f"{what}: a board id is '<platform>/<variable name>' (as 'console/points')"
        )
    if len(member) > max_id_chars:
        raise CommandError(
            f"{what}: the member (a user id) is {len(member)} characters long "
            f"(limits.max_id_chars is {max_id_chars})"
        )
    if isinstance(score, bool) or not isinstance(score, int | float) or not math.isfinite(score):
        raise CommandError(f"{what}: 'score' must be a number")
    if name is not None and not isinstance(name, str):
        raise CommandError(f"{what}: 'name' must be text or null")
    if name is not None and len(name) > MAX_NAME_CHARS:
        raise CommandError(
            f"{what}: the name is {len(name)} characters long (the limit is {MAX_NAME_CHARS})"
        )
    first = found.rank_lines.get((board, member))
    if first is not None:
        raise CommandError(f"{what} appears twice (first on line {first})")
    found.rank_lines[(board, member)] = number
    found.ranks.append((board, member, float(score), name))


def _positive(value: Any) -> bool:
    return (
        not isinstance(value, bool)
        and isinstance(value, int | float)
        and math.isfinite(value)
        and value > 0
    )


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
