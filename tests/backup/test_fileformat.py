"""The backup file (tmy.backup.fileformat): lines, header, gzip, atomic writes, and every
way a file is refused (newer version, corrupt line, truncation) with its line number."""

from __future__ import annotations

import gzip
import json
import os
import subprocess
import sys
import threading
from datetime import UTC, datetime
from pathlib import Path
from typing import Any

import pytest

from tmy.backup.fileformat import (
    FORMAT,
    LINE_OVERHEAD,
    VERSION,
    header_for,
    suffixed,
    wants_gzip,
    write_file,
    write_new_file,
)
from tmy.backup.reader import read_file
from tmy.command import CommandError

CREATED = datetime(2026, 11, 25, 4, 0, tzinfo=UTC)
ENTRIES: list[tuple[str, Any, float | None]] = [
    ("mem/user/console/ann/1", {"text": "my cat is called Mimi", "vec": [0.25, -1.5]}, None),
    ("session/console/c/ann", "memory-chat", 300.0),
    ("var/global/hits", 41, None),
    ("var/user/console/ann/name", "Ann ✓ 安", None),
]
RANKS: list[tuple[str, str, float, str | None]] = [
    ("console/points", "ann", 12.0, "Ann"),
    ("console/points", "bob", 3.5, None),
]


def _write(path: Path, *, compress: bool = False, **header: Any) -> int:
    head = header_for("redis://***@db:6379/0", len(ENTRIES), len(RANKS), CREATED)
    head.update(header)
    return write_file(path, head, list(ENTRIES), list(RANKS), compress=compress)


def _lines(path: Path) -> list[dict[str, Any]]:
    raw = path.read_bytes()
    if raw[:2] == b"\x1f\x8b":
        raw = gzip.decompress(raw)
    return [json.loads(line) for line in raw.decode().splitlines()]


def test_the_file_is_a_header_one_line_per_key_and_board_entry_and_an_end_line(
    tmp_path: Path,
) -> None:
    path = tmp_path / "b.jsonl"
    _write(path)
    lines = _lines(path)
    assert lines[0] == {
        "format": FORMAT,
        "version": VERSION,
        "tmy": "0.1.0",
        "created": "2026-11-25T04:00:00.000+00:00",
        "store": "redis://***@db:6379/0",
        "entries": 4,
        "ranks": 2,
        "point_in_time": True,
    }
    assert lines[1:5] == [{"key": k, "value": v, "ttl": t} for k, v, t in ENTRIES]
    assert lines[5:7] == [
        {"board": "console/points", "member": "ann", "score": 12.0, "name": "Ann"},
        {"board": "console/points", "member": "bob", "score": 3.5, "name": None},
    ]
    assert lines[7] == {"end": FORMAT, "entries": 4, "ranks": 2}


@pytest.mark.parametrize("compress", [False, True])
def test_what_is_written_reads_back_the_same(tmp_path: Path, compress: bool) -> None:
    path = tmp_path / "b.data"  # gzip is recognised by its bytes, not its name
    _write(path, compress=compress)
    assert (path.read_bytes()[:2] == b"\x1f\x8b") is compress
    loaded = read_file(path)
    assert loaded.entries == ENTRIES
    assert loaded.ranks == RANKS
    assert loaded.created == CREATED
    assert loaded.lines["var/global/hits"] == 4


def test_gzip_is_chosen_by_the_name_or_the_flag() -> None:
    assert wants_gzip(Path("b.jsonl.gz"))
    assert wants_gzip(Path("b.jsonl"), True)
    assert not wants_gzip(Path("b.jsonl"))


def test_a_failed_write_leaves_the_previous_file_and_no_temporary(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    _write(path)
    before = path.read_bytes()
    head = header_for("sqlite:///x.db", 1, 0, CREATED)
    with pytest.raises(TypeError):  # a value JSON cannot hold stops the write half-way
        write_file(path, head, [("k", {1, 2}, None)], [], compress=False)
    assert path.read_bytes() == before
    assert sorted(p.name for p in tmp_path.iterdir()) == ["b.jsonl"]


def test_the_written_file_replaces_the_old_one_whole(tmp_path: Path) -> None:
    path = tmp_path / "deep" / "b.jsonl.gz"  # the folder is made
    _write(path, compress=True)
    inode = path.stat().st_ino
    _write(path, compress=True)
    assert path.stat().st_ino != inode  # a new file renamed over it, not rewritten in place
    assert read_file(path).entries == ENTRIES


# -- refusals ----------------------------------------------------------------------------------


def _refused(path: Path) -> str:
    with pytest.raises(CommandError) as caught:
        read_file(path)
    return str(caught.value)


def test_a_newer_version_is_refused_naming_both_versions(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    _write(path, version=VERSION + 1, tmy="9.0.0")
    message = _refused(path)
    assert "written by a newer tmy" in message
    assert f"backup version {VERSION + 1}, tmy 9.0.0" in message
    assert f"this tmy 0.1.0 reads backup version {VERSION}" in message
    assert message.endswith("upgrade tmy")


def test_a_file_without_its_end_line_is_truncated(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    _write(path)
    lines = path.read_bytes().splitlines(keepends=True)
    path.write_bytes(b"".join(lines[:5]))  # header + 4 keys: no board entries, no end
    message = _refused(path)
    assert f"{path}:5:" in message
    assert "4 of 4 keys and 0 of 2 board entries" in message
    assert "truncated" in message


def test_a_line_cut_in_the_middle_is_named(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    _write(path)
    raw = path.read_bytes()
    cut = raw.index(b"var/global/hits")
    path.write_bytes(raw[:cut])
    message = _refused(path)
    assert f"{path}:4: not a JSON line" in message
    assert "truncated" in message


def test_a_cut_gzip_stream_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl.gz"
    _write(path, compress=True)
    raw = path.read_bytes()
    path.write_bytes(raw[: len(raw) // 2])
    assert "truncated" in _refused(path)


def test_counts_that_disagree_are_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    _write(path, entries=5)
    assert "the header promises 5 keys" in _refused(path)


@pytest.mark.parametrize(
    ("line", "message"),
    [
        (b'{"key": "", "value": 1, "ttl": null}', "'key' must be a non-empty string"),
        (b'{"key": "a", "ttl": null}', "key 'a' has no 'value'"),
        (b'{"key": "a", "value": 1, "ttl": -3}', "'ttl' must be seconds > 0 or null"),
        (b'{"key": "var/global/hits", "value": 2, "ttl": null}', "appears twice (first on line 4)"),
        (b'{"board": "x/b", "member": "m", "score": "high"}', "'score' must be a number"),
        (b'{"board": "points", "member": "m", "score": 1}', "a board id is '<platform>/"),
        (b'{"board": "a/b/c", "member": "m", "score": 1}', "a board id is '<platform>/"),
        (b'{"board": "a/9x", "member": "m", "score": 1}', "a board id is '<platform>/"),
        (
            b'{"board": "a/b", "member": "' + b"m" * 257 + b'", "score": 1}',
            "the member (a user id) is 257 characters long (limits.max_id_chars is 256)",
        ),
        (
            b'{"board": "a/b", "member": "m", "score": 1, "name": "' + b"n" * 1025 + b'"}',
            "the name is 1025 characters long (the limit is 1024)",
        ),
        (b'{"something": "else"}', "neither a key, a board entry nor the end line"),
        (b"[1, 2]", "not a JSON object"),
        (b"{not json", "not a JSON line"),
    ],
)
def test_a_bad_line_is_refused_with_its_number(tmp_path: Path, line: bytes, message: str) -> None:
    path = tmp_path / "b.jsonl"
    _write(path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(5, line + b"\n")
    path.write_bytes(b"".join(lines))
    refused = _refused(path)
    assert refused.startswith(f"{path}:6: ")
    assert message in refused


def test_a_board_entry_twice_is_refused_as_a_key_twice_is(tmp_path: Path) -> None:
    """The last one does not silently win: the file was edited or is corrupt."""
    path = tmp_path / "b.jsonl"
    _write(path)
    lines = path.read_bytes().splitlines(keepends=True)
    lines.insert(7, b'{"board": "console/points", "member": "ann", "score": 99, "name": "X"}\n')
    path.write_bytes(b"".join(lines))
    refused = _refused(path)
    assert refused == (
        f"{path}:8: board 'console/points' member 'ann' appears twice (first on line 6)"
    )


def test_a_line_after_the_end_line_is_refused(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    _write(path)
    with path.open("ab") as f:
        f.write(b'{"key": "x", "value": 1, "ttl": null}\n')
    assert f"{path}:9: a line after the end line" in _refused(path)


def test_other_files_are_not_backups(tmp_path: Path) -> None:
    empty = tmp_path / "empty.jsonl"
    empty.write_bytes(b"")
    assert "empty file" in _refused(empty)
    other = tmp_path / "other.jsonl"
    other.write_text('{"format": "something"}\n')
    assert "not a tmy backup" in _refused(other)
    assert "cannot read" in _refused(tmp_path / "missing.jsonl")


def test_a_line_longer_than_the_value_limit_is_refused_before_the_rest_is_read(
    tmp_path: Path,
) -> None:
    path = tmp_path / "b.jsonl"
    entries = [ENTRIES[0], ("var/global/big", "x" * 100_000, None), *ENTRIES[1:]]
    head = header_for("sqlite:///x.db", len(entries), 0, CREATED)
    write_file(path, head, entries, [], compress=False)
    with pytest.raises(CommandError) as caught:
        read_file(path, max_value_bytes=1000)
    limit = 1000 + LINE_OVERHEAD
    assert str(caught.value).startswith(
        f"{path}:3: the line is longer than {limit:,} bytes (limits.max_value_bytes + "
    )
    assert read_file(path, max_value_bytes=200_000).entries[1][0] == "var/global/big"


def test_a_line_of_exactly_the_limit_is_read(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    _write(path)
    first = path.read_bytes().splitlines(keepends=True)[0]
    assert read_file(path, max_value_bytes=len(first) - 1 - LINE_OVERHEAD).header["entries"] == 4
    with pytest.raises(CommandError, match=r":1: the line is longer than"):
        read_file(path, max_value_bytes=len(first) - 2 - LINE_OVERHEAD)


def test_more_lines_than_the_header_promises_are_refused_as_they_come(tmp_path: Path) -> None:
    path = tmp_path / "b.jsonl"
    _write(path, entries=1)
    assert _refused(path) == f"{path}:3: more keys than the header's 1"


@pytest.mark.parametrize("kind", ["fifo", "device", "directory"])
def test_a_fifo_a_device_or_a_directory_is_refused_without_blocking(
    tmp_path: Path, kind: str
) -> None:
    if kind == "fifo":
        path = tmp_path / "pipe"
        os.mkfifo(path)  # nobody writes: opening it for a plain read would wait forever
        expected = "a FIFO (named pipe)"
    elif kind == "device":
        path, expected = Path("/dev/zero"), "a character device"
    else:
        path, expected = tmp_path, "a directory"
    outcome: list[str] = []
    reader = threading.Thread(target=lambda: outcome.append(_refused(path)), daemon=True)
    reader.start()
    reader.join(timeout=20)
    assert outcome == [
        f"{path} is {expected}, not a regular file: restore reads a backup file "
        "(copy a stream to a file first)"
    ]


BOMB_READER = """
import resource, sys
from pathlib import Path
import tmy
from tmy.backup.reader import read_file
from tmy.command import CommandError
before = resource.getrusage(resource.RUSAGE_SELF).ru_maxrss
try:
    read_file(Path(sys.argv[1]))
except CommandError as exc:
    print(exc)
print(before, resource.getrusage(resource.RUSAGE_SELF).ru_maxrss)
"""


@pytest.mark.slow
@pytest.mark.parametrize("where", ["header", "key line"])
def test_a_gzip_bomb_is_refused_at_its_first_long_line_in_bounded_memory(
    tmp_path: Path, where: str
) -> None:
    """1 GiB of one line in ~1 MiB on disk: refused at the line limit, peak RSS small."""
    path = tmp_path / "bomb.jsonl.gz"
    head = header_for("sqlite:///x.db", 1, 0, CREATED)
    start = b"" if where == "header" else json.dumps(head).encode() + b"\n"
    start += b'{"key": "var/global/x", "value": "'
    # gzip members read as one stream: one 16 MiB member written 64 times is 1 GiB
    member = gzip.compress(b"a" * (16 << 20), compresslevel=9, mtime=0)
    with path.open("wb") as out:
        out.write(gzip.compress(start, mtime=0))
        for _ in range(64):
            out.write(member)
    assert path.stat().st_size < 4 << 20
    done = subprocess.run(
        [sys.executable, "-c", BOMB_READER, str(path)],
        capture_output=True,
        text=True,
        timeout=120,
        check=True,
    )
    message, rss = done.stdout.strip().rsplit("\n", 1)
    line = 1 if where == "header" else 2
    assert message.startswith(f"{path}:{line}: the line is longer than ")
    before, peak = (int(n) for n in rss.split())  # KiB on Linux
    assert peak - before < 64 * 1024, (before, peak)  # the limit is ~1 MiB; the bomb 1 GiB


def test_a_new_file_never_replaces_an_existing_one(tmp_path: Path) -> None:
    path = tmp_path / "tmy-backup-manual-20261125T093012.000005Z.jsonl.gz"
    path.write_bytes(b"the older backup")
    head = header_for("sqlite:///x.db", len(ENTRIES), len(RANKS), CREATED)
    written = [write_new_file(path, head, ENTRIES, RANKS, compress=True) for _ in range(2)]
    names = [p.name for p, _ in written]
    assert names == [
        "tmy-backup-manual-20261125T093012.000005Z-2.jsonl.gz",
        "tmy-backup-manual-20261125T093012.000005Z-3.jsonl.gz",
    ]
    assert path.read_bytes() == b"the older backup"
    assert all(read_file(p).entries == ENTRIES and p.stat().st_size == n for p, n in written)
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([path.name, *names])
    assert suffixed(Path("notes"), 2) == Path("notes-2")
    assert suffixed(Path("b.data"), 2) == Path("b-2.data")
