"""The daemon's part: ingest the configured bases at start, then follow their files.

When the daemon serves, one background task ingests every configured base
(incrementally: unchanged files cost a ``stat``), so start-up does not wait for
it and a failure is logged (``knowledge.ingest_failed``), never fatal; meanwhile it
watches the folders of the bases with ``watch: true`` (``watchfiles``: the
folders are watched, as the rules watcher does, since editors save by renaming
a new file over the old one) and, after each debounced batch of changes,
ingests the bases whose paths hold a changed file — again by content hash, so
only the changed files are read and written. A watched folder that is removed
and made again (a deploy swapping ``docs/``) is watched again: the watcher
re-arms whenever the set of folders to watch changes; a path that does not
exist is looked for every two seconds, never watched through its parent.
"""

from __future__ import annotations

import asyncio
import contextlib
import os
from collections.abc import AsyncIterator, Iterable, Mapping
from pathlib import Path

from tmy.knowledge.bases import KnowledgeBases, knowledge_of
from tmy.knowledge.config import roots_of
from tmy.logs import get_logger
from tmy.types import Services

log = get_logger("tmy.knowledge")

DEBOUNCE_MS = 300
POLL_MS = 2_000  # how often a missing path is looked for (it is not watched)
BACKGROUND_LOCK_WAIT = 24 * 3600.0
"""How long the daemon's ingestion waits for another process's (a second daemon on one
Redis ingesting a large base at start): waiting is its job, not a failure for /healthz."""


async def ingest_all(kb: KnowledgeBases, names: Iterable[str]) -> None:
    """Ingest each base of ``names`` from its configured paths; failures are logged."""
    for name in names:
        try:
            await kb.ingest(name, wait=BACKGROUND_LOCK_WAIT)
        except asyncio.CancelledError:
            raise
        except Exception as exc:  # a base that fails must not stop the others, nor the daemon
            log.error("knowledge.ingest_failed", base=name, error=f"{type(exc).__name__}: {exc}")


def _folders(roots: Mapping[str, list[Path]]) -> list[str]:
    """The folders to watch: each folder of ``roots`` and the folder of each file (editors
    save by renaming a new file over the old one). A path that does not exist is not
    watched through its parent — that may be a home folder or ``/``, thousands of inotify
    watches — but looked for every :data:`POLL_MS` (:func:`_missing`)."""
    found = set()
    for paths in roots.values():
        for path in paths:
            if path.is_dir():
                found.add(str(path))
            elif path.exists():
                found.add(str(path.parent))
    return sorted(found)


def _missing(roots: Mapping[str, list[Path]]) -> bool:
    return any(not path.exists() for paths in roots.values() for path in paths)


def _affected(changed: Iterable[str], roots: Mapping[str, list[Path]]) -> list[str]:
    """The bases whose paths hold one of the ``changed`` paths."""
    out = []
    for name, paths in roots.items():
        for path in paths:
            top = str(path)
            if any(c == top or c.startswith(top.rstrip(os.sep) + os.sep) for c in changed):
                out.append(name)
                break
    return out


async def _watch(kb: KnowledgeBases, roots: Mapping[str, list[Path]], stop: asyncio.Event) -> None:
    """Watch the folders of ``roots`` until ``stop``, re-arming when they change: a watched
    folder removed and made again (a deploy that swaps ``docs/`` for a new copy, a ``git
    checkout``) is followed again — inotify forgets a folder once it is gone — and a missing
    one is looked for every :data:`POLL_MS` until it appears. After a re-arm every watched base
    is ingested again (a change in between was not seen; unchanged files cost a stat)."""
    from watchfiles import awatch  # deferred: only a serving daemon with watched bases needs it

    backoff = 1.0
    armed_before = False
    while not stop.is_set():
        folders, polling = _folders(roots), _missing(roots)
        if not folders:  # nothing there yet: look again now and then
            armed_before = True
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), POLL_MS / 1000)
            continue
        log.info("knowledge.watching", folders=folders, polling=polling)
        catch_up = asyncio.create_task(ingest_all(kb, roots)) if armed_before else None
        armed_before = True
        try:
            timing = {"debounce": DEBOUNCE_MS, "step": 50, "rust_timeout": POLL_MS}
            async for changes in awatch(
                *folders, stop_event=stop, yield_on_timeout=polling, **timing
            ):
                changed = {os.path.abspath(path) for _, path in changes}
                await ingest_all(kb, _affected(changed, roots))
                if changed & set(folders) or _folders(roots) != folders:
                    break  # a watched folder itself changed, came or went: watch it anew
            backoff = 1.0
        except Exception as exc:  # no inotify here, too many watches: try again later
            log.warning("knowledge.watch_failed", error=str(exc), retry_in=backoff)
            with contextlib.suppress(TimeoutError):
                await asyncio.wait_for(stop.wait(), backoff)
            backoff = min(backoff * 2, 300.0)
        finally:
            if catch_up is not None:
                await catch_up


async def follow(kb: KnowledgeBases, stop: asyncio.Event) -> None:
    """Ingest every configured base, and re-ingest the watched ones as their files change.

    The watcher starts first, so a file changed while the first ingestion runs is
    ingested again after it (one ingestion of a base at a time: the base's lock)."""
    settings = kb.services.settings
    roots = {n: roots_of(settings, c) for n, c in sorted(kb.configs.items()) if c.watch}
    watcher = asyncio.create_task(_watch(kb, roots, stop)) if roots else None
    try:
        await ingest_all(kb, sorted(kb.configs))
        if watcher is not None:
            await watcher
    finally:
        if watcher is not None:
            watcher.cancel()
            await asyncio.gather(watcher, return_exceptions=True)


@contextlib.asynccontextmanager
async def serving(services: Services) -> AsyncIterator[asyncio.Task[None] | None]:
    """Run :func:`follow` while the daemon serves (nothing when no base is configured)."""
    kb = knowledge_of(services)
    if not kb.configs:
        yield None
        return
    stop = asyncio.Event()
    task = asyncio.create_task(follow(kb, stop), name="knowledge")
    try:
        yield task
    finally:
        stop.set()
        task.cancel()
        await asyncio.gather(task, return_exceptions=True)
