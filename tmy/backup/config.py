"""The ``backup:`` config section: when the daemon writes a backup, where, and how many stay.

::

    backup:
      cron: "0 4 * * *"   # five-field crontab line, in the config's timezone (none: no schedule)
      keep: 7             # newest files kept in path (0: never delete any)
      path: backups       # directory; relative to the config file's directory
      gzip: true          # .jsonl.gz (false: plain .jsonl)

Checked once, when the settings load (an unknown key, a bad cron line, a
schedule without a ``path``: ConfigError naming ``backup.<key>``). ``cron`` is
read by the very parser scheduled rules use (:func:`tmy.cron.schedule.cron_trigger`:
``1-5`` is Monday to Friday there too), so the two cannot disagree.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from datetime import UTC
from pathlib import Path
from typing import Any

from tmy.config import Settings
from tmy.config.check import check_section
from tmy.cron.schedule import cron_trigger
from tmy.errors import ConfigError

SECTION = "backup"
DEFAULT_KEEP = 7
_SCHEMA: dict[str, Any] = {"cron": str, "keep": int, "path": str, "gzip": bool}


@dataclass(frozen=True, slots=True)
class BackupConfig:
    """The validated ``backup:`` section (defaults: no schedule, keep 7, no path, gzip)."""

    cron: str | None = None
    keep: int = DEFAULT_KEEP
    path: str | None = None
    gzip: bool = True


def parse(raw: Mapping[str, Any]) -> BackupConfig:
    """``backup:`` as written -> :class:`BackupConfig`; ConfigError naming the key."""
    data = check_section(SECTION, raw, _SCHEMA)
    cron = data.get("cron")
    if cron is not None:
        try:
            cron_trigger(cron, UTC)
        except ValueError as exc:
            raise ConfigError(f"'{SECTION}.cron': bad cron expression {cron!r}: {exc}") from None
    path = data.get("path")
    if path is not None and not path.strip():
        raise ConfigError(f"'{SECTION}.path' must name a directory, got {path!r}")
    if cron is not None and path is None:
        raise ConfigError(
            f"'{SECTION}.cron' needs '{SECTION}.path': the directory the scheduled backups go to"
        )
    keep = data.get("keep")
    return BackupConfig(
        cron=cron,
        keep=DEFAULT_KEEP if keep is None else keep,
        path=path,
        gzip=True if data.get("gzip") is None else data["gzip"],
    )


def config_of(settings: Settings) -> BackupConfig:
    """The app's ``backup:`` section (its defaults when the settings carry none)."""
    found = settings.sections.get(SECTION)
    return found if isinstance(found, BackupConfig) else BackupConfig()


def backup_dir(settings: Settings) -> Path | None:
    """``backup.path`` as a directory: a relative one is read from the config file's
    directory (as ``rules:`` and a relative SQLite store are), else from the working one."""
    path = config_of(settings).path
    if path is None:
        return None
    folder = Path(path).expanduser()
    if folder.is_absolute():
        return folder
    source = Path(settings.source)
    if settings.source != "<defaults>" and source.is_file():
        return source.absolute().parent / folder
    return Path.cwd() / folder
