"""The log file: ``log.rotate`` rotates it into numbered backups; moved away, it is reopened.

No line is lost or written twice on the way."""

from __future__ import annotations

import json
import os
from collections.abc import Iterator
from pathlib import Path

import pytest

from tmy import logs
from tmy.logs.logfile import LogFile


@pytest.fixture
def restore_logs() -> Iterator[None]:
    yield
    logs.configure("warning")  # back to standard error; closes the rotating file


def numbers(path: Path) -> list[int]:
    return [json.loads(line)["n"] for line in path.read_text().splitlines()]


def test_enough_lines_rotate_into_n_backups(tmp_path: Path, restore_logs: None) -> None:
    path = tmp_path / "log" / "tmy.log"
    logs.configure("info", path, max_bytes=2000, backups=3)
    log = logs.get_logger("tmy.test")
    total = 400  # ~80 bytes a line: about 16 files' worth
    for n in range(total):
        if n % 2:
            log.info("rotate.line", n=n)  # through structlog
        else:
            logs.emit("info", "rotate.line", n=n)  # the engine's fast path
    logs.flush()
    names = sorted(p.name for p in path.parent.iterdir())
    assert names == ["tmy.log", "tmy.log.1", "tmy.log.2", "tmy.log.3"]
    files = [path.with_name(f"tmy.log.{i}") for i in (3, 2, 1)] + [path]
    assert all(0 < f.stat().st_size <= 2000 for f in files)
    kept = [n for f in files for n in numbers(f)]  # oldest file first
    assert kept == list(range(total - len(kept), total))  # the newest lines, none lost or doubled
    assert len(kept) > 60


def test_lines_go_on_after_a_rotation(tmp_path: Path, restore_logs: None) -> None:
    """The rotation happens before the line that would not fit: that line starts the new file."""
    path = tmp_path / "tmy.log"
    logs.configure("info", path, max_bytes=300, backups=1)
    log = logs.get_logger("tmy.test")
    for n in range(3):
        log.info("rotate.line", n=n, pad="x" * 40)  # ~110 bytes each: two fit in 300
    logs.flush()
    assert numbers(path.with_name("tmy.log.1")) == [0, 1]
    assert numbers(path) == [2]


def test_zero_max_bytes_never_rotates(tmp_path: Path, restore_logs: None) -> None:
    path = tmp_path / "tmy.log"
    logs.configure("info", path, max_bytes=0, backups=2)
    for n in range(200):
        logs.get_logger("tmy.test").info("rotate.line", n=n)
    logs.flush()
    assert [p.name for p in tmp_path.iterdir()] == ["tmy.log"]
    assert numbers(path) == list(range(200))


def test_an_existing_file_counts_towards_the_size(tmp_path: Path) -> None:
    path = tmp_path / "tmy.log"
    path.write_bytes(b'{"n": -1}\n' * 30)  # 300 bytes from an earlier run
    out = LogFile(path, max_bytes=320, backups=2)
    out.write(b'{"n": 0, "pad": "abcdefghijklmnopqrstuvwxyz"}\n')
    out.flush()
    out.close()
    assert path.with_name("tmy.log.1").read_bytes() == b'{"n": -1}\n' * 30
    assert numbers(path) == [0]


def test_two_writers_on_one_file_never_rotate_it_twice(tmp_path: Path) -> None:
    """A daemon and a one-shot command with the same log.file: the second to fill it reopens."""
    path = tmp_path / "tmy.log"
    first = LogFile(path, max_bytes=100, backups=5)
    second = LogFile(path, max_bytes=100, backups=5)
    line = b'{"n": 1, "who": "first......."}\n'  # 32 bytes: three fit in 100
    for _ in range(3):
        first.write(line)
    first.flush()
    for _ in range(3):
        second.write(line.replace(b"first", b"secnd"))
    second.flush()  # the file holds 192 bytes: both counts are off
    first.write(b'{"n": 2, "who": "first......."}\n')  # first rotates: 192 + 32 > 100
    first.flush()
    second.write(b'{"n": 2, "who": "secnd......."}\n')  # the name moved: second reopens only
    second.flush()
    first.close()
    second.close()
    assert sorted(p.name for p in tmp_path.iterdir()) == ["tmy.log", "tmy.log.1"]
    assert len(path.with_name("tmy.log.1").read_bytes()) == 192
    assert [json.loads(x)["who"][:5] for x in path.read_text().splitlines()] == ["first", "secnd"]


def test_a_truncated_file_is_counted_again_not_rotated(tmp_path: Path) -> None:
    """logrotate's copytruncate empties the file under the writer: no needless rotation."""
    path = tmp_path / "tmy.log"
    out = LogFile(path, max_bytes=100, backups=2)
    for _ in range(3):
        out.write(b"x" * 30 + b"\n")
    out.flush()
    os.truncate(path, 0)  # what copytruncate does after copying
    out.write(b"y" * 30 + b"\n")  # the count says 124 > 100; the file says 31
    out.flush()
    out.close()
    assert [p.name for p in tmp_path.iterdir()] == ["tmy.log"]
    assert path.read_bytes().endswith(b"y" * 30 + b"\n")


def test_a_file_moved_away_is_reopened_at_the_next_flush(
    tmp_path: Path, restore_logs: None
) -> None:
    """logrotate's default (rename, then create): no copytruncate, no signal, no line lost."""
    path = tmp_path / "tmy.log"
    logs.configure("info", path)
    log = logs.get_logger("tmy.test")
    log.info("rotate.line", n=0)
    logs.flush()
    os.rename(path, tmp_path / "tmy.log-20261125")  # what logrotate does first
    log.info("rotate.line", n=1)  # still to the open, renamed file
    logs.flush()  # notices the name moved: opens tmy.log anew
    log.info("rotate.line", n=2)
    logs.flush()
    assert numbers(tmp_path / "tmy.log-20261125") == [0, 1]
    assert numbers(path) == [2]


def test_a_deleted_file_is_created_again(tmp_path: Path) -> None:
    path = tmp_path / "tmy.log"
    out = LogFile(path)
    out.write(b'{"n": 0}\n')
    out.flush()
    path.unlink()
    out.flush()  # nothing pending, but the name is gone: reopened (created)
    out.write(b'{"n": 1}\n')
    out.flush()
    out.close()
    assert numbers(path) == [1]


def test_bad_numbers_are_refused(tmp_path: Path) -> None:
    with pytest.raises(ValueError, match="backups >= 1"):
        LogFile(tmp_path / "tmy.log", max_bytes=100, backups=0)
    with pytest.raises(ValueError, match="max_bytes must be >= 0"):
        LogFile(tmp_path / "tmy.log", max_bytes=-1)


def test_a_write_taken_before_a_reopen_still_lands_in_the_moved_file(tmp_path: Path) -> None:
    """A writer that took the file's write just before logrotate's move was noticed (a
    thread, or the sink's cached write) finds the old file still open: its line goes to
    the renamed file at the next flush, none is dropped on a closed handle."""
    path = tmp_path / "tmy.log"
    out = LogFile(path)
    out.write(b'{"n": 0}\n')
    out.flush()
    taken = out.write  # the open file's own write (no rotation by size)
    path.rename(tmp_path / "tmy.log.1")
    out.flush()  # the name moved: tmy.log opened anew, the old file retired
    taken(b'{"n": 1}\n')  # through the old file
    out.write(b'{"n": 2}\n')
    out.flush()  # closes the retired file: its last line is written
    out.close()
    assert numbers(tmp_path / "tmy.log.1") == [0, 1]
    assert numbers(path) == [2]
