"""Reading a backup file: the whole file checked, line by line, before anything is written.

The format is :mod:`tmy.backup.fileformat`'s. Every refusal is a
:class:`~tmy.command.CommandError` naming ``FILE:LINE``; memory stays bounded by
what a real backup needs (a line longer than ``limits.max_value_bytes`` plus
:data:`~tmy.backup.fileformat.LINE_OVERHEAD` is refused before the rest of it is read).
"""

from __future__ import annotations

import gzip
import math
import os
import stat
import zlib
from collections.abc import Iterator
from datetime import datetime
from pathlib import Path
from typing import IO, Any

import orjson

from tmy.backup.fileformat import (
    BOARD_ID,
    FORMAT,
    GZIP_MAGIC,
    LINE_OVERHEAD,
    MAX_ID_CHARS,
    MAX_NAME_CHARS,
    VERSION,
    BackupFile,
    printable,
    tmy_version,
)
from tmy.command import CommandError
from tmy.store.codec import MAX_VALUE_BYTES


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
