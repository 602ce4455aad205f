"""Hot reload: load and validate everything, then swap the rules in one assignment.

A reload builds a fresh executor registry (built-ins, the app's extensions, and
the ``plugins/`` files executed anew, so an edited plugin is live too) and loads
every rules file against it, off the event loop. Only when all of it loads
without an error are the rulebook and the registry replaced, together; a
broken file changes nothing and its ``file:line`` errors are logged and
returned to whoever asked. Runs in flight keep the rules and executors they
started with (each holds its own compiled rule); open sessions go on while
their rule id still exists; listeners (the cron scheduler) follow the new
rulebook. A plugin's module-level state starts afresh on each reload.

Reloads are serialised: a second request waits for the first and then loads
the files as they are by then.
"""

from __future__ import annotations

import asyncio
import time
from collections.abc import Awaitable, Callable, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from tmy.errors import ConfigError, RuleError
from tmy.logs import get_logger

log = get_logger("tmy.reload")


@dataclass(slots=True)
class ReloadResult:
    ok: bool
    reason: str
    rules: int = 0
    files: int = 0
    errors: list[str] = field(default_factory=list)
    warnings: list[str] = field(default_factory=list)
    ms: float = 0.0

    def summary(self) -> str:
        if self.ok:
            return (
                f"reloaded: {self.rules} rules from {self.files} files, plugins reloaded"
                f" ({self.ms:.0f} ms)"
            )
        return "reload failed, the running rules are unchanged:\n" + "\n".join(self.errors)

    def as_dict(self) -> dict[str, Any]:
        return {
            "ok": self.ok,
            "reason": self.reason,
            "rules": self.rules,
            "files": self.files,
            "errors": self.errors,
            "warnings": self.warnings,
            "ms": round(self.ms, 1),
        }


class Reloader:
    """Reloads one app's rules and plugins; ``listeners`` get each new rulebook.

    ``rebuild()`` builds a fresh registry and loads the rules against it (it runs
    in a worker thread and raises RuleError/ConfigError for a bad file);
    ``swap(registry, rulebook)`` puts both in force together; then each of
    ``listeners`` gets the new rulebook. The app passes its own: this module
    knows nothing about how an app is made.
    """

    def __init__(
        self,
        rebuild: Callable[[], tuple[Any, Any]],
        swap: Callable[[Any, Any], None],
        on_result: Callable[[bool], None] | None = None,
        *,
        listeners: Sequence[Callable[[Any], None]] = (),
        warnings: Callable[[Any], list[str]] | None = None,
    ) -> None:
        self.rebuild = rebuild
        self.swap = swap
        # what `check` warns about a rulebook (the app's: collisions across files, adapters
        # the config leaves off); without it, the loader's own warnings
        self.warnings = warnings or (lambda rulebook: list(rulebook.warnings))
        self.listeners: tuple[Callable[[Any], None], ...] = tuple(listeners)
        self.on_result = on_result  # metrics
        self._lock = asyncio.Lock()

    async def reload(self, reason: str) -> ReloadResult:
        async with self._lock:
            started = time.perf_counter()
            try:
                registry, rulebook = await asyncio.to_thread(self.rebuild)
            except (RuleError, ConfigError) as exc:
                errors = [line for line in str(exc).splitlines() if line.strip()]
                result = ReloadResult(False, reason, errors=errors, ms=_ms(started))
                log.error("reload.failed", reason=reason, errors=errors)
                self._count(False)
                return result
            self.swap(registry, rulebook)
            for listener in self.listeners:
                try:
                    listener(rulebook)
                except Exception:  # a listener's bug must not undo a good reload
                    log.exception("reload.listener_failed")
            warnings = self.warnings(rulebook)
            for warning in warnings:
                log.warning("rules.warning", detail=warning)
            result = ReloadResult(
                True,
                reason,
                rules=len(rulebook.rules),
                files=len(rulebook.files),
                warnings=warnings,
                ms=_ms(started),
            )
            log.info("reload.done", reason=reason, rules=result.rules, files=result.files)
            self._count(True)
            return result

    def _count(self, ok: bool) -> None:
        if self.on_result is not None:
            self.on_result(ok)


def _ms(started: float) -> float:
    return (time.perf_counter() - started) * 1000


def _relevant(_change: Any, path: str) -> bool:
    """Rules and plugin files; not editor swap files or caches."""
    name = path.rsplit("/", 1)[-1]
    if name.startswith((".", "#")) or name.endswith("~") or "__pycache__" in path:
        return False
    return name.endswith((".yaml", ".yml", ".py"))


async def watch(
    paths: list[Path], reload: Callable[[str], Awaitable[Any]], stop: asyncio.Event
) -> None:
    """Reload after the rules or plugin files change, until ``stop`` is set.

    The *directories* are watched (a file is watched through its folder):
    editors save by writing a new file and renaming it over the old one, which
    a watch on the file itself would lose. Changes are debounced, so a save
    that touches several files is one reload.
    """
    from watchfiles import awatch

    folders = sorted({str(p if p.is_dir() else p.parent) for p in paths if p.exists()})
    if not folders:
        return
    log.info("reload.watching", folders=folders)
    try:
        async for changes in awatch(
            *folders, watch_filter=_relevant, debounce=300, step=50, stop_event=stop
        ):
            names = sorted({Path(path).name for _, path in changes})
            shown = ", ".join(names[:5]) + (f" (+{len(names) - 5})" if len(names) > 5 else "")
            await reload(f"files changed: {shown}")
    except Exception as exc:  # no inotify here, a folder removed: serving goes on
        log.warning("reload.watch_failed", error=str(exc))
