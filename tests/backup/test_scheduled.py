"""The scheduled backup (tmy.backup.scheduled): file names, pruning to ``keep``, one file per
occurrence across replicas on one store, a failure logged and the next occurrence run."""

from __future__ import annotations

import asyncio
import contextlib
from collections.abc import AsyncIterator
from datetime import UTC, datetime
from pathlib import Path

import pytest

from tests.backup.test_operations import fill, opened
from tests.support.log_helpers import read_log
from tmy.backup.config import BackupConfig
from tmy.backup.reader import read_file
from tmy.backup.scheduled import (
    ScheduledBackup,
    backups_in,
    file_name,
    manual_name,
    prune,
    write_into_folder,
)
from tmy.cron.schedule import Schedule, Timing
from tmy.store.base import MISSING
from tmy.testing import serving

FIRE = datetime(2026, 11, 25, 4, 0, tzinfo=UTC)
RULES = {"r.yaml": "rules:\n  - {id: hi, triggers: [hi], steps: [{plugin: ADJUST, input: hey}]}\n"}


def test_files_are_named_by_utc_time_and_pruned_newest_first(tmp_path: Path) -> None:
    assert file_name(FIRE, True) == "tmy-backup-20261125T040000Z.jsonl.gz"
    assert file_name(FIRE.astimezone(), False) == "tmy-backup-20261125T040000Z.jsonl"
    names = [f"tmy-backup-2026112{d}T040000Z.jsonl{'.gz' if d % 2 else ''}" for d in range(6)]
    for name in [*names, "tmy-backup-notes.txt", "other.jsonl.gz"]:
        (tmp_path / name).write_text("x")
    assert [p.name for p in backups_in(tmp_path)] == names[::-1]
    assert prune(tmp_path, 0) == []
    removed = prune(tmp_path, 2)
    assert sorted(p.name for p in removed) == names[:4]
    left = sorted(p.name for p in tmp_path.iterdir())
    assert left == sorted([*names[4:], "tmy-backup-notes.txt", "other.jsonl.gz"])
    assert backups_in(tmp_path / "missing") == []


def test_manual_files_are_named_to_the_microsecond_and_pruned_apart(tmp_path: Path) -> None:
    """keep: 2 with three dailies and three manual files: each kind keeps its newest two;
    a suffixed name (a name that was taken) sorts after the plain one."""
    moment = datetime(2026, 11, 25, 9, 30, 12, 123456, tzinfo=UTC)
    assert manual_name(moment, True) == "tmy-backup-manual-20261125T093012.123456Z.jsonl.gz"
    dailies = [f"tmy-backup-2026112{d}T040000Z.jsonl.gz" for d in (1, 2, 3)]
    manual = [
        "tmy-backup-manual-20261125T093012.123456Z.jsonl.gz",
        "tmy-backup-manual-20261125T093012.123456Z-2.jsonl.gz",
        "tmy-backup-manual-20261125T093012.123457Z.jsonl",
    ]
    for name in [*dailies, *manual]:
        (tmp_path / name).write_text("x")
    assert [p.name for p in backups_in(tmp_path)] == dailies[::-1]
    assert [p.name for p in backups_in(tmp_path, manual=True)] == manual[::-1]
    assert [p.name for p in prune(tmp_path, 2, manual=True)] == [manual[0]]
    assert [p.name for p in prune(tmp_path, 2)] == [dailies[0]]
    assert sorted(p.name for p in tmp_path.iterdir()) == sorted([*dailies[1:], *manual[1:]])


async def test_folder_backups_in_one_microsecond_never_replace_each_other(
    tmp_path: Path,
) -> None:
    folder = tmp_path / "backups"
    config = BackupConfig(keep=0, path=str(folder), gzip=False)
    moment = datetime(2026, 11, 25, 9, 30, 12, 5, tzinfo=UTC)
    async with opened(f"sqlite:///{tmp_path / 's.db'}") as store:
        await fill(store)
        first = await write_into_folder(store, folder, config, moment, manual=True)
        await store.set("var/global/later", 1)
        second = await write_into_folder(store, folder, config, moment, manual=True)
        third = await write_into_folder(store, folder, config, FIRE)
        fourth = await write_into_folder(store, folder, config, FIRE)
    assert first.path.name == "tmy-backup-manual-20261125T093012.000005Z.jsonl"
    assert second.path.name == "tmy-backup-manual-20261125T093012.000005Z-2.jsonl"
    assert third.path.name == "tmy-backup-20261125T040000Z.jsonl"
    assert fourth.path.name == "tmy-backup-20261125T040000Z-2.jsonl"
    assert read_file(first.path).header["entries"] + 1 == read_file(second.path).header["entries"]
    assert sorted(p.name for p in folder.iterdir()) == sorted(
        p.path.name for p in (first, second, third, fourth)
    )  # no temporary file left behind


@contextlib.asynccontextmanager
async def replicas(url: str, folder: Path, n: int = 2) -> AsyncIterator[list[ScheduledBackup]]:
    """``n`` backup jobs as ``n`` daemons on one store would run them (a store each)."""
    config = BackupConfig(cron="0 4 * * *", keep=7, path=str(folder))
    async with contextlib.AsyncExitStack() as stack:
        stores = [await stack.enter_async_context(opened(url)) for _ in range(n)]
        yield [ScheduledBackup(store, config, folder, UTC) for store in stores]


async def test_two_replicas_write_one_file_per_occurrence(
    store_url: str, tmp_path: Path, log_file: Path
) -> None:
    folder = tmp_path / "backups"
    async with replicas(store_url, folder) as (one, two):
        await fill(one.store)
        results = await asyncio.gather(one.occurrence(FIRE), two.occurrence(FIRE))
        again = await two.occurrence(FIRE)  # later: the done mark is there
        mark = await one.store.get("backup/done/" + str(int(FIRE.timestamp())))
    written = [r for r in results if r is not None]
    assert len(written) == 1 and again is None
    assert [p.name for p in folder.iterdir()] == ["tmy-backup-20261125T040000Z.jsonl.gz"]
    assert mark["file"] == "tmy-backup-20261125T040000Z.jsonl.gz"
    assert read_file(written[0].path).header["entries"] == written[0].entries
    events = [e["event"] for e in read_log(log_file) if e["event"].startswith("backup.")]
    assert sorted(events) == ["backup.skipped", "backup.skipped", "backup.written"]


async def test_a_failure_is_logged_leaves_no_mark_and_the_next_occurrence_runs(
    tmp_path: Path, log_file: Path
) -> None:
    blocked = tmp_path / "backups"
    blocked.write_text("a file where the folder should be")
    async with replicas(f"sqlite:///{tmp_path / 's.db'}", blocked, n=1) as (job,):
        assert await job.occurrence(FIRE) is None
        assert await job.store.get(f"backup/done/{int(FIRE.timestamp())}") is MISSING
        blocked.unlink()
        assert await job.occurrence(FIRE) is not None  # a replica retrying it, or the next one
    failed = [e for e in read_log(log_file) if e["event"] == "backup.failed"]
    assert len(failed) == 1 and failed[0]["level"] == "error"
    assert "retried at the next occurrence" in failed[0]["detail"]
    assert [p.name for p in blocked.iterdir()] == ["tmy-backup-20261125T040000Z.jsonl.gz"]


@pytest.mark.slow  # seconds of real waiting for a schedule to fire
async def test_the_loop_fires_prunes_to_keep_and_survives_a_failure(
    tmp_path: Path, log_file: Path
) -> None:
    folder = tmp_path / "backups"
    folder.write_text("blocked: the first occurrence fails")
    every_second = Timing(Schedule(None, 1, None, (), "", 60.0), UTC)
    async with replicas(f"sqlite:///{tmp_path / 's.db'}", folder, n=1) as (job,):
        job.config = BackupConfig(cron="* * * * *", keep=2, path=str(folder), gzip=False)
        await fill(job.store)
        task = asyncio.create_task(job.run(every_second))
        try:
            async with asyncio.timeout(30):
                while not any(e["event"] == "backup.failed" for e in read_log(log_file)):
                    await asyncio.sleep(0.1)
                folder.unlink()
                while len([e for e in read_log(log_file) if e["event"] == "backup.pruned"]) < 2:
                    await asyncio.sleep(0.1)
        finally:
            task.cancel()
            await asyncio.gather(task, return_exceptions=True)
    kept = backups_in(folder)
    assert len(kept) == 2 and all(p.name.endswith(".jsonl") for p in kept)
    assert all(read_file(p).header["entries"] > 0 for p in kept)


async def test_the_daemon_runs_the_schedule_in_its_timezone(tmp_path: Path, log_file: Path) -> None:
    sections = {"backup": BackupConfig(cron="0 4 * * *", path=str(tmp_path / "b"))}
    async with serving(RULES, sections=sections, timezone="Asia/Shanghai"):
        scheduled = [e for e in read_log(log_file) if e["event"] == "backup.scheduled"]
    assert len(scheduled) == 1
    assert scheduled[0]["next"].endswith("T04:00:00+08:00")
    assert scheduled[0]["path"] == str(tmp_path / "b") and scheduled[0]["keep"] == 7


async def test_without_cron_the_daemon_schedules_nothing(log_file: Path) -> None:
    async with serving(RULES, sections={"backup": BackupConfig(path="b")}):
        pass
    assert not [e for e in read_log(log_file) if e["event"].startswith("backup.")]
