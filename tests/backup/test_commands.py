"""``backup`` and ``restore`` on their front ends: the CLI (``tmy.cli.main`` in-process), ``.tmy
backup`` in chat and ``POST /admin/commands/backup``; restore is the command line's only."""

from __future__ import annotations

import asyncio
import gzip
import json
import os
import re
from pathlib import Path
from typing import Any

import httpx
import pytest
import redis

from tests.backup.test_operations import fill, opened, values
from tmy import cli
from tmy.backup.config import BackupConfig
from tmy.backup.fileformat import VERSION
from tmy.backup.reader import read_file
from tmy.testing import Bot, serving

KEY = "k-backup-test"
RULES = {"r.yaml": "rules:\n  - {id: hi, triggers: [hi], steps: [{plugin: ADJUST, input: hey}]}\n"}


@pytest.fixture(autouse=True)
def _no_env(monkeypatch: pytest.MonkeyPatch) -> None:
    for name in [k for k in os.environ if k.startswith("TMY_")]:
        monkeypatch.delenv(name)


@pytest.fixture
def config(tmp_path: Path, sqlite_store_url: str) -> Path:
    path = tmp_path / "tmy.yaml"
    path.write_text(f"store: {sqlite_store_url}\nbackup: {{path: backups, keep: 2}}\n")
    return path


def run(*argv: str) -> int:
    """``python run.py ARGV`` in this process, on the test's config (or an empty one)."""
    if "--config" not in argv:
        argv = (*argv, "--config", os.devnull)
    return cli.main(list(argv))


def _filled(url: str) -> None:
    async def work() -> None:
        async with opened(url) as store:
            await fill(store)

    asyncio.run(work())


def _snapshot(url: str) -> Any:
    async def work() -> Any:
        async with opened(url) as store:
            return await store.snapshot()

    return asyncio.run(work())


def _redis_keys(redis_url: str, namespace: str) -> list[bytes]:
    client = redis.Redis.from_url(redis_url)
    try:
        return list(client.scan_iter(match=f"{namespace}:*"))
    finally:
        client.close()


@pytest.mark.redis
def test_cli_backup_then_dry_run_then_restore_into_an_empty_redis(
    config: Path,
    sqlite_store_url: str,
    redis_url: str,
    redis_namespace: str,
    redis_store_url: str,
    tmp_path: Path,
    capsys: pytest.CaptureFixture[str],
) -> None:
    _filled(sqlite_store_url)
    file = tmp_path / "all.jsonl.gz"
    assert run("backup", str(file), "--config", str(config)) == 0
    out = capsys.readouterr().out
    assert out.startswith(f"wrote {file}: 10 keys and 2 board entries")
    assert gzip.decompress(file.read_bytes()).startswith(b'{"format":"tmy-backup"')

    assert run("restore", str(file), "--store", redis_store_url, "--dry-run") == 0
    out = capsys.readouterr().out
    assert out.startswith("dry run: nothing written. Would restore\n10 keys and 2 board entries")
    assert "  var/user: 2\n" in out and "  mem/user: 1\n" in out
    assert _redis_keys(redis_url, redis_namespace) == []  # not even opened

    assert run("restore", str(file), "--store", redis_store_url, "--json") == 0
    shown = json.loads(capsys.readouterr().out)
    assert shown["written"] == 10 and shown["mode"] == "an empty store only"
    source, target = _snapshot(sqlite_store_url), _snapshot(redis_store_url)
    assert values(target) == values(source) and target.ranks == source.ranks

    assert run("restore", str(file), "--store", redis_store_url) == 2  # not empty now
    assert "is not empty (10 keys and 2 board entries)" in capsys.readouterr().err


def test_cli_dry_run_does_not_create_a_sqlite_target(
    config: Path, sqlite_store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _filled(sqlite_store_url)
    file = tmp_path / "all.jsonl"
    assert run("backup", str(file), "--gzip", "--config", str(config)) == 0
    assert file.read_bytes()[:2] == b"\x1f\x8b"  # --gzip whatever the name
    target = tmp_path / "new.db"
    code = run("restore", str(file), "--store", f"sqlite:///{target}", "--dry-run", "--replace")
    assert code == 0
    assert "into sqlite:///" in capsys.readouterr().out
    assert not target.exists()


def test_cli_refuses_a_newer_or_truncated_file_before_writing(
    config: Path, sqlite_store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    _filled(sqlite_store_url)
    file = tmp_path / "all.jsonl"
    assert run("backup", str(file), "--config", str(config)) == 0
    lines = file.read_bytes().splitlines(keepends=True)
    header = json.loads(lines[0])
    target = f"sqlite:///{tmp_path / 'target.db'}"

    newer = tmp_path / "newer.jsonl"
    newer.write_bytes(
        json.dumps({**header, "version": VERSION + 1}).encode() + b"\n" + b"".join(lines[1:])
    )
    capsys.readouterr()
    assert run("restore", str(newer), "--store", target, "--replace") == 2
    err = capsys.readouterr().err
    assert f"written by a newer tmy (backup version {VERSION + 1}" in err
    assert f"reads backup version {VERSION} and older: upgrade tmy" in err

    cut = tmp_path / "cut.jsonl"
    cut.write_bytes(b"".join(lines[:-3]))
    assert run("restore", str(cut), "--store", target, "--replace") == 2
    err = capsys.readouterr().err
    assert f"{cut}:{len(lines) - 3}: the file ends without its end line" in err
    assert not (tmp_path / "target.db").exists()  # refused before the target was opened


def test_cli_backup_that_cannot_be_written_says_so(
    config: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    (tmp_path / "taken").mkdir()
    assert run("backup", str(tmp_path / "taken"), "--config", str(config)) == 1
    err = capsys.readouterr().err
    assert err.startswith("cannot write the backup to ") and "Is a directory" in err
    assert [p.name for p in (tmp_path / "taken").iterdir()] == []
    assert not [p for p in tmp_path.iterdir() if p.name.endswith(".partial")]


def test_cli_merge_and_replace_exclude_each_other(config: Path, tmp_path: Path) -> None:
    with pytest.raises(SystemExit) as caught:
        run("restore", str(tmp_path / "x.jsonl"), "--merge", "--replace")
    assert caught.value.code == 2


@pytest.mark.redis
def test_the_header_names_the_store_without_its_password(
    redis_url: str, redis_namespace: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    # the test Redis has no password: its default user takes any one
    host = redis_url.split("://", 1)[1]
    url = f"redis://default:s3cret-pass@{host}?prefix={redis_namespace}"
    file = tmp_path / "r.jsonl"
    assert run("backup", str(file), "--store", url) == 0
    header = json.loads(file.read_text().splitlines()[0])
    assert header["store"].startswith("redis://default:***@127.0.0.1")
    assert "s3cret-pass" not in file.read_text() + capsys.readouterr().out


def test_manual_backups_never_prune_scheduled_ones_nor_replace_each_other(
    config: Path, sqlite_store_url: str, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """keep: 2 with three dailies: manual backups (no FILE) are pruned among themselves
    only, and three taken within a second get three files."""
    _filled(sqlite_store_url)
    folder = tmp_path / "backups"  # relative to the config's folder
    folder.mkdir()
    dailies = [f"tmy-backup-2020010{d}T040000Z.jsonl.gz" for d in (1, 2, 3)]
    for name in [*dailies, "notes.txt"]:
        (folder / name).write_text("x")
    for _ in range(3):
        assert run("backup", "--config", str(config)) == 0
    names = sorted(p.name for p in folder.iterdir())
    manual = [n for n in names if n.startswith("tmy-backup-manual-")]
    assert sorted(set(names) - set(manual)) == sorted([*dailies, "notes.txt"])  # all kept
    assert len(manual) == 2  # keep: 2 among the manual ones
    assert all(re.fullmatch(r"tmy-backup-manual-\d{8}T\d{6}\.\d{6}Z\.jsonl\.gz", n) for n in manual)
    out = capsys.readouterr().out
    written = re.findall(r"wrote (\S+):", out)
    assert len(set(written)) == 3
    assert all(w.startswith(f"{folder}/tmy-backup-manual-") for w in written)
    assert set(written[1:]) == {str(folder / n) for n in manual}  # the newest two stay
    for name in manual:
        assert read_file(folder / name).header["entries"] == 10


async def test_chat_backup_writes_into_the_folder_and_restore_is_not_offered(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "backups"
    sections = {"backup": BackupConfig(path=str(folder), keep=3, gzip=False)}
    async with Bot(RULES, admins=frozenset({"test:root"}), sections=sections) as bot:
        await bot.say("hi")
        answer = await bot.say(".tmy backup", user="root")
        assert answer.startswith(f"wrote {folder}/tmy-backup-") and ".jsonl:" in answer
        assert (await bot.ask(".tmy backup", user="someone")).text == ""  # not an admin
        refused = await bot.say(".tmy restore x.jsonl", user="root")
        assert refused.startswith("error: unknown command 'restore'")
    (written,) = folder.iterdir()
    assert written.name.endswith(".jsonl")
    assert json.loads(written.read_text().splitlines()[0])["entries"] >= 0


async def test_without_a_folder_chat_backup_says_how_to_set_one() -> None:
    async with Bot(RULES, admins=frozenset({"test:root"})) as bot:
        answer = await bot.say(".tmy backup", user="root")
    assert answer.startswith("error: no backup folder: set 'backup: {path: DIR}' in the config")


async def test_http_backup_writes_into_the_folder_and_restore_is_404(tmp_path: Path) -> None:
    folder = tmp_path / "backups"
    sections = {"backup": BackupConfig(path=str(folder))}
    async with (
        serving(RULES, http_api_keys=(KEY,), sections=sections) as daemon,
        httpx.AsyncClient(base_url=daemon.url, timeout=30) as client,
    ):
        headers = {"Authorization": f"Bearer {KEY}"}
        ok = await client.post("/admin/commands/backup", json={"args": {}}, headers=headers)
        file_arg = {"args": {"file": "/etc/evil.jsonl"}}
        named = await client.post("/admin/commands/backup", json=file_arg, headers=headers)
        restore = await client.post(
            "/admin/commands/restore", json={"args": {"file": "x"}}, headers=headers
        )
    assert ok.status_code == 200 and ok.json()["ok"], ok.text
    assert ok.json()["data"]["file"].startswith(str(folder / "tmy-backup-"))
    assert ok.json()["data"]["file"].endswith(".jsonl.gz")
    assert named.status_code == 400 and "has no argument 'file'" in named.json()["text"]
    assert restore.status_code == 404
    assert len(list(folder.iterdir())) == 1
