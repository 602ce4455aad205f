"""The ``backup:`` section (tmy.backup.config): defaults, checks with file:line, the folder."""

from __future__ import annotations

from pathlib import Path

import pytest

from tmy.backup import EXTENSION
from tmy.backup.config import BackupConfig, backup_dir, config_of, parse
from tmy.builtins import extensions
from tmy.config import Settings, load_settings
from tmy.errors import ConfigError


def _load(tmp_path: Path, text: str) -> Settings:
    path = tmp_path / "config" / "tmy.yaml"
    path.parent.mkdir(exist_ok=True)
    path.write_text(text, encoding="utf-8")
    return load_settings(path, env={}, extensions=extensions())


def test_without_a_section_there_is_no_schedule_and_no_folder(tmp_path: Path) -> None:
    settings = _load(tmp_path, "timezone: UTC\n")
    assert config_of(settings) == BackupConfig(cron=None, keep=7, path=None, gzip=True)
    assert backup_dir(settings) is None
    assert config_of(Settings()) == BackupConfig()  # settings made without load_settings


def test_the_section_is_read_and_its_path_is_relative_to_the_config_file(tmp_path: Path) -> None:
    settings = _load(tmp_path, 'backup: {cron: "0 4 * * 1-5", keep: 3, path: ../backups}\n')
    assert config_of(settings) == BackupConfig(cron="0 4 * * 1-5", keep=3, path="../backups")
    assert backup_dir(settings) == tmp_path / "config" / ".." / "backups"
    absolute = _load(tmp_path, f"backup: {{path: {tmp_path / 'abs'}, gzip: false}}\n")
    assert backup_dir(absolute) == tmp_path / "abs"
    assert config_of(absolute).gzip is False


@pytest.mark.parametrize(
    ("text", "message"),
    [
        ('backup: {cron: "61 4 * * *", path: b}', "'backup.cron': bad cron expression"),
        ('backup: {cron: "0 4 * *", path: b}', "Wrong number of fields"),
        ('backup: {cron: "0 4 * * *"}', "'backup.cron' needs 'backup.path'"),
        ("backup: {keep: -1, path: b}", "'backup.keep' must not be negative"),
        ("backup: {keep: yes, path: b}", "'backup.keep' has the wrong type"),
        ("backup: {paht: b}", "unknown key 'backup.paht' (did you mean 'path'?)"),
        ("backup: {path: ' '}", "'backup.path' must name a directory"),
        ("backup: daily", "'backup' must be a mapping"),
    ],
)
def test_a_wrong_section_is_refused_at_load_with_its_line(
    tmp_path: Path, text: str, message: str
) -> None:
    with pytest.raises(ConfigError) as caught:
        _load(tmp_path, f"timezone: UTC\n{text}\n")
    assert message in str(caught.value)
    assert str(caught.value).startswith(f"{tmp_path / 'config' / 'tmy.yaml'}:2:")


def test_the_extension_claims_the_section_and_carries_the_commands() -> None:
    assert EXTENSION.config is not None and EXTENSION.config.key == "backup"
    assert [c.name for c in EXTENSION.commands] == ["backup", "restore"]
    assert EXTENSION in extensions()
    assert parse({}) == BackupConfig()
