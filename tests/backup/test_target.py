"""What ``restore`` refuses to write into (tmy.backup.target), through the real CLI: an
in-memory SQLite, a file in a folder that does not exist, another application's SQLite
database, something that is not a database; and what it takes (a new file, an empty
database, a tmy store). Also a FIFO or a device as FILE, refused without blocking."""

from __future__ import annotations

import json
import os
import sqlite3
import threading
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.backup.test_commands import _filled, _snapshot, run
from tests.backup.test_operations import values
from tmy.backup.fileformat import header_for, write_file
from tmy.backup.target import tmy_tables


@pytest.fixture
def backup(tmp_path: Path, sqlite_store_url: str) -> Path:
    _filled(sqlite_store_url)
    file = tmp_path / "all.jsonl"
    assert run("backup", str(file), "--store", sqlite_store_url) == 0
    return file


@pytest.mark.parametrize("dry_run", [False, True])
def test_an_in_memory_sqlite_is_refused(
    backup: Path, capsys: pytest.CaptureFixture[str], dry_run: bool
) -> None:
    capsys.readouterr()
    extra = ["--dry-run"] if dry_run else []
    assert run("restore", str(backup), "--store", "sqlite:///:memory:", *extra) == 2
    err = capsys.readouterr().err
    assert "sqlite:///:memory: is a private in-memory database: what a restore wrote there" in err


def test_a_folder_that_does_not_exist_is_not_created(
    backup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    missing = tmp_path / "nonexistent" / "dir"
    capsys.readouterr()
    assert run("restore", str(backup), "--store", f"sqlite:///{missing / 'x.db'}") == 2
    err = capsys.readouterr().err
    assert f"the folder {missing} does not exist; restore does not create folders" in err
    assert f"mkdir -p {missing}" in err
    assert not (tmp_path / "nonexistent").exists()


@pytest.mark.parametrize("mode", [[], ["--merge"], ["--replace"], ["--replace", "--dry-run"]])
def test_another_applications_database_is_refused_and_left_as_it_was(
    backup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str], mode: list[str]
) -> None:
    other = tmp_path / "app.db"
    with sqlite3.connect(other) as db:
        db.execute("CREATE TABLE invoices (id INTEGER PRIMARY KEY, total REAL)")
        db.execute("CREATE TABLE kv (k TEXT)")  # a table of tmy's name is not enough
        db.execute("INSERT INTO invoices (total) VALUES (12.5)")
    before = other.read_bytes()
    capsys.readouterr()
    assert run("restore", str(backup), "--store", f"sqlite:///{other}", *mode) == 2
    err = capsys.readouterr().err
    assert f"{other} holds another application's tables (invoices) and no tmy format" in err
    assert other.read_bytes() == before


def test_a_file_that_is_not_a_database_is_refused(
    backup: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    text = tmp_path / "notes.db"
    text.write_text("these are my notes, not a database\n" * 100)
    capsys.readouterr()
    assert run("restore", str(backup), "--store", f"sqlite:///{text}", "--replace") == 2
    assert f"{text} is not a SQLite database tmy can use" in capsys.readouterr().err
    assert text.read_text().startswith("these are my notes")


@pytest.mark.parametrize("kind", ["new file", "empty database", "tmy store"])
def test_a_new_file_an_empty_database_or_a_tmy_store_is_restored_into(
    backup: Path, tmp_path: Path, sqlite_store_url: str, kind: str
) -> None:
    target = tmp_path / "target.db"
    if kind == "empty database":
        sqlite3.connect(target).close()
        assert target.exists()
    elif kind == "tmy store":
        _snapshot(f"sqlite:///{target}")  # opened (and so created) by tmy once
        with sqlite3.connect(target) as db:
            db.execute("DELETE FROM kv")  # even without its format marker (an older tmy's)
    assert run("restore", str(backup), "--store", f"sqlite:///{target}", "--replace") == 0
    assert values(_snapshot(f"sqlite:///{target}")) == values(_snapshot(sqlite_store_url))


def test_tmys_own_tables_are_read_from_the_stores_schema() -> None:
    assert {"kv", "locks", "ranks"} <= tmy_tables()


@pytest.mark.parametrize("kind", ["fifo", "/dev/zero"])
def test_a_fifo_or_a_device_as_file_is_refused_without_blocking(
    tmp_path: Path, capsys: pytest.CaptureFixture[str], kind: str
) -> None:
    if kind == "fifo":
        source = tmp_path / "pipe"
        os.mkfifo(source)
    else:
        source = Path(kind)
    codes: list[int] = []
    worker = threading.Thread(
        # the store is the test's own: the default (data/tmy.db) needs a data/ folder in the cwd
        target=lambda: codes.append(
            run("restore", str(source), "--dry-run", "--store", f"sqlite:///{tmp_path}/t.db")
        ),
        daemon=True,
    )
    worker.start()
    worker.join(timeout=30)
    assert codes == [2]
    err = capsys.readouterr().err
    assert f"{source} is a" in err and "not a regular file" in err


def test_the_dry_run_of_a_hand_made_file_escapes_its_header_skips_the_marker_and_warns(
    tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    entries = [
        ("mystery/a", 1, None),
        ("tmy/format", {"format": 1}, None),
        ("var/global/a", 2, None),
    ]
    head = header_for("\x1b]0;owned\x07sqlite:///x.db\nfake: 0 keys", 3, 0, datetime.now(UTC))
    file = tmp_path / "hand.jsonl"
    write_file(file, head, entries, [], compress=False)
    target = f"sqlite:///{tmp_path / 't.db'}"
    assert run("restore", str(file), "--store", target, "--dry-run") == 0
    out = capsys.readouterr().out
    assert "\x1b" not in out and "\x07" not in out and "fake: 0 keys\n" not in out
    assert "2 keys and 0 board entries (backup of \\x1b]0;owned\\x07sqlite:///x.db\\nfake" in out
    assert "  skipped tmy/format: the store format marker: the target keeps its own\n" in out
    warned = "  warning: 1 key outside tmy's known key families ('mystery', first 'mystery/a' at"
    assert f"{warned} {file}:2)" in out
    assert run("restore", str(file), "--store", target, "--dry-run", "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["entries"] == 2 and shown["skipped"] == ["tmy/format"]
    assert len(shown["warnings"]) == 1 and "'mystery'" in shown["warnings"][0]
    assert run("restore", str(file), "--store", target) == 0
    assert values(_snapshot(target)) == {"mystery/a": 1, "var/global/a": 2}
